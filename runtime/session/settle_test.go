package session_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

func TestMain(m *testing.M) {
	if hooks.Reexec() {
		return
	}
	code := m.Run()
	if err := testenv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// manager is a session manager whose sessions are real sandboxes of the
// base image, paused settle after each call, hibernated after idle (0: no
// reaper).
func manager(t *testing.T, settle, idle time.Duration) *session.Manager {
	t.Helper()
	rt, root := testenv.Runtime(t)
	m, err := session.NewManager(session.Options{Dir: t.TempDir(), MaxConcurrent: 4, Persist: true, IdleTimeout: idle,
		Start: func(ctx context.Context, _ string) (*sandbox.Sandbox, error) {
			return rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: cgroups.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 64}})
		}})
	if err != nil {
		t.Fatal(err)
	}
	session.SetSettleDelay(m, settle)
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// run executes code in session id and returns the sandbox it ran in.
func run(t *testing.T, m *session.Manager, id, code string, change func(*session.Meta)) (*sandbox.Sandbox, any) {
	t.Helper()
	var sb *sandbox.Sandbox
	var result any
	_, err := m.Call(context.Background(), "local", id, "img", true, func(s *sandbox.Sandbox, meta *session.Meta) error {
		sb = s
		res, err := s.Exec(context.Background(), code, sandbox.ExecOptions{Timeout: 20 * time.Second, KeepAlive: true})
		if err != nil {
			return err
		}
		if res.Error != nil {
			return fmt.Errorf("%s: %s", res.Error.Type, res.Error.Message)
		}
		result = res.Result
		meta.VariableCount = res.Variables
		if change != nil {
			change(meta)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("call %q: %v", code, err)
	}
	return sb, result
}

func frozen(t *testing.T, sb *sandbox.Sandbox) bool {
	t.Helper()
	f, err := sb.Frozen()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSessionAnsweredBeforePause: a session call returns with its sandbox
// still running and meta.json not yet rewritten for its activity alone
// (both cost milliseconds at a few hundred live sessions, on the answer's
// path); a change of the metadata that must survive a crash (here the
// egress policy) is on disk when the call returns. With a settle delay
// longer than the test, nothing else would pause the sandbox.
func TestSessionAnsweredBeforePause(t *testing.T) {
	testutil.RequiresRoot(t)
	m := manager(t, time.Hour, 0)
	sb, _ := run(t, m, "a", "x = 41", nil)
	first, err := session.MetaOnDisk(m, "local", "a")
	if err != nil {
		t.Fatal(err)
	}
	sb2, res := run(t, m, "a", "x + 1", nil)
	if sb2 != sb || fmt.Sprint(res) != "42" {
		t.Fatalf("the second call: sandbox %p then %p, x + 1 = %v", sb, sb2, res)
	}
	if frozen(t, sb) {
		t.Error("the session's sandbox was frozen before its call returned: the answer waited for the freeze")
	}
	disk, err := session.MetaOnDisk(m, "local", "a")
	if err != nil {
		t.Fatal(err)
	}
	if !disk.LastActive.Equal(first.LastActive) {
		t.Errorf("meta.json was rewritten before the answer for the activity alone: last_active %s, then %s", first.LastActive, disk.LastActive)
	}
	run(t, m, "a", "1", func(meta *session.Meta) { meta.Egress = []string{"example.com"} })
	disk, err = session.MetaOnDisk(m, "local", "a")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(disk.Egress, []string{"example.com"}) {
		t.Errorf("meta.json when the call returned: egress %v, want [example.com] (a durable change is written before the answer)", disk.Egress)
	}
}

// TestSessionFrozenAfterCall: between calls a session's sandbox is frozen
// (docs/security.md, "Session frozen after the answer"), within moments of
// each call; the next call thaws it and finds its variables; the reaper
// (a tick of 6 s for an idle timeout of a minute) writes the calls'
// activity to meta.json.
func TestSessionFrozenAfterCall(t *testing.T) {
	testutil.RequiresRoot(t)
	m := manager(t, 10*time.Millisecond, time.Minute)
	sb, _ := run(t, m, "b", "import threading, time\ny = 1\nthreading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(int, 1)], daemon=True).start()", nil)
	testutil.Eventually(t, 5*time.Second, "the session's sandbox frozen after its call", func() bool { return frozen(t, sb) })
	before := time.Now()
	_, res := run(t, m, "b", "y + 1", nil)
	if fmt.Sprint(res) != "2" {
		t.Fatalf("after the freeze, y + 1 = %v", res)
	}
	testutil.Eventually(t, 5*time.Second, "the sandbox frozen again after the second call", func() bool { return frozen(t, sb) })
	testutil.Eventually(t, 15*time.Second, "meta.json with the second call's activity", func() bool {
		disk, err := session.MetaOnDisk(m, "local", "b")
		return err == nil && !disk.LastActive.Before(before) && disk.Status == session.Active
	})
}

// TestListWhileLocked: a session whose lock a call holds is listed as its
// last call left it (variables, memory), not as meta.json has it, which
// lacks the activity of calls answered before the pause (settle.go).
func TestListWhileLocked(t *testing.T) {
	m := manager(t, time.Hour, 0)
	run(t, m, "l", "x = 1", nil)
	run(t, m, "l", "y = 2", nil) // activity only: meta.json is not rewritten
	if disk, err := session.MetaOnDisk(m, "local", "l"); err != nil || disk.VariableCount == 2 {
		t.Fatalf("meta.json: %+v %v, want it without the calls' activity (settle.go)", disk, err)
	}
	held, free := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := m.Call(context.Background(), "local", "l", "img", false, func(*sandbox.Sandbox, *session.Meta) error {
			close(held)
			<-free
			return nil
		})
		done <- err
	}()
	<-held
	list, err := m.List(context.Background(), "local")
	close(free)
	if err != nil || len(list) != 1 {
		t.Fatalf("List: %+v %v", list, err)
	}
	if got := list[0]; got.VariableCount != 2 || got.MemoryBytes == 0 {
		t.Errorf("listed while a call held it: %+v, want the last call's 2 variables and its memory", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
