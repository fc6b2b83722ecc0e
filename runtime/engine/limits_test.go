package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/test/testenv"
)

// inotifyHog opens 128 inotify instances and keeps them in the session's
// namespace; it reports how many it got and the OSError that stopped it.
const inotifyHog = `
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
fds, err = [], None
try:
    for _ in range(128):
        fd = _libc.inotify_init1(os.O_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        fds.append(fd)
except OSError as e:
    err = e.errno
[len(fds), err]`

// Inotify instances made in a sandbox are charged to host root as well: a
// session holding 128 of them left root unable to make one (EMFILE) until
// it was destroyed. With its own budget the sandbox runs out first and the
// host keeps its own. Not parallel: while it runs it holds part of root's
// inotify budget, which no other test of this process may need.
func TestInotifyBudgetProtectsHost(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	ctx := context.Background()
	id := fmt.Sprintf("inotify-%d", os.Getpid())
	t.Cleanup(func() {
		if err := eng.DestroySession(ctx, engine.LocalPrincipal, id); err != nil {
			t.Errorf("destroying session %s: %v", id, err)
		}
	})
	budget := eng.Runtime().Budgets()["max_inotify_instances"]
	if budget < 1 {
		t.Fatalf("no inotify budget: %v", eng.Runtime().Budgets())
	}
	res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: inotifyHog, SessionID: id})
	if err != nil {
		t.Fatal(err)
	}
	var opened int64
	var errno string
	if _, err := fmt.Sscanf(fmt.Sprint(res.Result), "[%d %s", &opened, &errno); err != nil {
		t.Fatalf("result %v (error %+v), want [opened, errno]: %v", res.Result, res.Error, err)
	}
	if errno = strings.TrimSuffix(errno, "]"); opened > budget || errno != fmt.Sprint(int(unix.EMFILE)) {
		t.Errorf("sandbox opened %d instances and stopped with errno %s, want at most its budget %d, then EMFILE (%d)",
			opened, errno, budget, unix.EMFILE)
	}
	// The session is alive and holds its instances; root can still make one.
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("host root's inotify_init1 while the session holds %d instances: %v", opened, err)
	}
	unix.Close(fd)
	if r := call(t, eng, id, "len(fds)"); fmt.Sprint(r.Result) != fmt.Sprint(opened) {
		t.Errorf("the session lost its instances: len(fds) = %v", r.Result)
	}
}

type outcome struct {
	res *kernel.Result
	err error
}

// execAsync runs a stateless execution in the background.
func execAsync(ctx context.Context, eng *engine.Engine, code string) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: code})
		ch <- outcome{res, err}
	}()
	return ch
}

// waitRunning polls until an execution holds a sandbox (the pool is off, so
// a live sandbox is an admitted execution).
func waitRunning(t *testing.T, eng *engine.Engine) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for eng.Runtime().Live() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first execution never started a sandbox")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConcurrencyCapBusy(t *testing.T) {
	const wait = 300 * time.Millisecond
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.Execution.MaxConcurrent, c.Execution.QueueTimeout = 1, profiles.Duration(wait)
	})
	ctx, cancel := context.WithCancel(context.Background())
	first := execAsync(ctx, eng, "import time; time.sleep(60)")
	defer func() { cancel(); <-first }()
	waitRunning(t, eng)
	t0 := time.Now()
	_, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "print(1)"})
	if !errors.Is(err, engine.ErrBusy) {
		t.Fatalf("second execution while one runs under max_concurrent 1: got %v, want ErrBusy", err)
	}
	if el := time.Since(t0); el < wait {
		t.Errorf("busy after %s, want a wait of execution.queue_timeout (%s) first", el, wait)
	}
	for _, s := range []string{"execution.max_concurrent", "execution.queue_timeout", "retry"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("busy error %q does not mention %q", err, s)
		}
	}
}

func TestConcurrencyCapQueues(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.Execution.MaxConcurrent, c.Execution.QueueTimeout = 1, profiles.Duration(time.Minute)
	})
	first := execAsync(context.Background(), eng, "import time; time.sleep(2); print('first')")
	waitRunning(t, eng)
	// A caller that gives up while queued gets its own cancellation back.
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := eng.Execute(short, engine.Request{Principal: engine.LocalPrincipal, Code: "print(1)"}); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, engine.ErrBusy) {
		t.Errorf("queued call whose context ends: got %v, want context.DeadlineExceeded", err)
	}
	// The first holds its slot for 2 s after its sandbox went live, and the
	// second starts at most ~0.1 s after that: it must wait over a second.
	t0 := time.Now()
	res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "print('second')"})
	if err != nil || res.Stdout != "second\n" {
		t.Fatalf("second execution with a long queue timeout: %v %+v", err, res)
	}
	if el := time.Since(t0); el < time.Second {
		t.Errorf("second execution returned after %s, want over 1s: it did not wait for the first's slot", el)
	}
	if o := <-first; o.err != nil || o.res.Stdout != "first\n" {
		t.Fatalf("first execution: %v %+v", o.err, o.res)
	}
}
