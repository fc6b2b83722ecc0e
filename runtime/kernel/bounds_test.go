package kernel

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// forgeHandler is user code that replaces the agent's handler of op, reached through
// the globals of the agent's own display function, with one that returns reply.
func forgeHandler(op, reply string) string {
	return fmt.Sprintf("display.__globals__['OPS'][%q] = lambda req: %s", op, reply)
}

// allocatedBy reports the bytes the Go heap allocated while f ran.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestForgedInspectReplyIsBounded is the attack of issue 11: user code makes the agent answer
// inspect with millions of (empty) variables. The reply must break the client without the host
// decoding them all.
func TestForgedInspectReplyIsBounded(t *testing.T) {
	a := startAgent(t)
	if r := a.exec(t, forgeHandler("inspect", "{'variables': [{}] * 3_000_000}")); !r.Success {
		t.Fatalf("replacing the handler: %+v", r.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var vars []Variable
	var err error
	alloc := allocatedBy(func() { vars, err = a.c.Inspect(ctx) })
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "inspect") {
		t.Fatalf("got %d variables, %v; want ErrProtocol naming inspect", len(vars), err)
	}
	t.Logf("allocated %d MB", alloc>>20)
	if alloc > 100<<20 {
		t.Errorf("the host allocated %d MB for a forged 9 MB inspect reply, want < 100 MB", alloc>>20)
	}
	if a.c.Err() == nil {
		t.Error("the client is still usable after a forged reply")
	}
}

// TestRepliesCheckedPerOp feeds each op a reply an honest agent never sends.
func TestRepliesCheckedPerOp(t *testing.T) {
	long := strings.Repeat("x", 3000)
	tests := []struct {
		name, op, reply string
	}{
		{"1001 variables", "inspect", "{'variables': [{'name': 'x', 'type': 'int', 'kind': 'value', 'size_bytes': 0, 'repr': '1'}] * 1001}"},
		{"a long variable name", "inspect", fmt.Sprintf("{'variables': [{'name': %q, 'type': 'int', 'kind': 'value', 'repr': ''}]}", long)},
		{"a long repr", "inspect", fmt.Sprintf("{'variables': [{'name': 'x', 'type': 'int', 'kind': 'value', 'repr': %q}]}", long)},
		{"an unknown kind", "inspect", "{'variables': [{'name': 'x', 'type': 'int', 'kind': 'evil', 'repr': ''}]}"},
		{"variables not a list", "inspect", "{'variables': 5}"},
		{"a huge inspect line", "inspect", "{'variables': [], 'pad': 'x' * (20 << 20)}"},
		{"a huge ping line", "ping", "{'pong': True, 'pad': 'x' * (2 << 20)}"},
		{"1001 saved names", "pickle_state", "{'saved': ['a'] * 1001, 'failed': []}"},
		{"a long failed name", "pickle_state", fmt.Sprintf("{'saved': [], 'failed': [%q]}", long)},
		{"1001 restored names", "restore_state", "{'restored': ['a'] * 1001, 'failed': []}"},
		{"a module not asked for", "warm", "{'imported': ['json', 'evil']}"},
		{"1001 files", "list_files", "{'files': [{'path': 'a', 'size': 1, 'symlink': False}] * 1001}"},
		{"a long error type", "ping", fmt.Sprintf("{'pong': True, 'error': {'type': %q, 'message': ''}}", long)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := startAgent(t)
			if r := a.exec(t, forgeHandler(tt.op, tt.reply)); !r.Success {
				t.Fatalf("replacing the handler: %+v", r.Error)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			switch tt.op {
			case "inspect":
				_, err = a.c.Inspect(ctx)
			case "ping":
				err = a.c.Ping(ctx)
			case "pickle_state":
				_, err = a.c.PickleState(ctx, "/tmp/x")
			case "restore_state":
				_, err = a.c.RestoreState(ctx, "/tmp/x")
			case "warm":
				_, err = a.c.Warm(ctx, []string{"json"})
			case "list_files":
				_, err = a.c.ListFiles(ctx)
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("got %v, want ErrProtocol", err)
			}
		})
	}
}

// TestHonestRepliesAtTheCaps: what the agent clips itself to passes the host's checks.
func TestHonestRepliesAtTheCaps(t *testing.T) {
	a := startAgent(t)
	r := a.exec(t, `import json
class E(Exception): pass
# The worst names first: inspect and pickle_state list the first 1000.
globals()['\u00e9' * 400] = type('T' * 400, (), {})()
globals()['\udcff' * 400] = '\x01' * 300
globals()['\x02' * 400] = 0
for i in range(1500):
    globals()['v%d_' % i + 'n' * 300] = 'r' * 1000
for i in range(1200):
    display(i)
E.__name__ = 'E' * 500
raise E('\udcff' * 100000)`)
	if r.Error == nil || len(r.Error.Type) > maxNameBytes || len(r.Display) != maxDisplayItems || !r.Truncated {
		t.Fatalf("exec at the caps: error type %d bytes, %d display items, truncated %v", len(r.Error.Type), len(r.Display), r.Truncated)
	}
	ctx := context.Background()
	vars, err := a.c.Inspect(ctx)
	if err != nil || len(vars) != maxInspectVariables {
		t.Fatalf("inspect at the caps: %d variables, %v", len(vars), err)
	}
	rep, err := a.c.PickleState(ctx, t.TempDir()+"/state.pkl")
	if err != nil || len(rep.Saved) != maxStateNames {
		t.Fatalf("pickle_state at the caps: %+v, %v", rep, err)
	}
	if err := a.c.Ping(ctx); err != nil {
		t.Errorf("ping after: %v", err)
	}
}

// TestLateExecReplyMayBeLong: the line limit of a reply that is still to come after a
// timeout is the larger of the two ops', so a long late exec reply does not break a ping.
func TestLateExecReplyMayBeLong(t *testing.T) {
	a := startAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := a.c.Exec(ctx, ExecRequest{Code: "import time\ntime.sleep(1)\nprint('x' * ((1 << 20) - 10))"}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if err := a.c.Ping(ctx2); err != nil {
		t.Errorf("ping after a long late exec reply: %v", err)
	}
}

// TestHugeHelloRefused: the first line is refused by its size before it is decoded.
func TestHugeHelloRefused(t *testing.T) {
	line := `{"op":"hello","python":"3.11.2","pid":1,"modules":{"numpy":false},"pad":"` + strings.Repeat("x", 1<<20) + `"}` + "\n"
	c := fakeAgent(t, strings.NewReader(line), Options{})
	if _, err := c.Hello(context.Background()); !errors.Is(err, ErrProtocol) {
		t.Fatalf("got %v, want ErrProtocol", err)
	}
}
