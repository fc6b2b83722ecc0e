package stress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

func mustRun(t *testing.T, eng *engine.Engine, req engine.Request) *kernel.Result {
	t.Helper()
	r, err := eng.Execute(context.Background(), req)
	if err != nil {
		t.Fatalf("Execute %q: %v", req.Code, err)
	}
	return r
}

// sandboxPids are the host pids of every process in a sandbox of this
// forge process.
func sandboxPids() []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), fmt.Sprintf("/forge/%d-", os.Getpid())) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A pooled sandbox whose processes are killed from outside (SIGKILL, while
// it waits paused) is dropped by the pool's health check: the next runs
// succeed, on a replacement.
func TestPooledSandboxKilled(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) { c.Pool.Enabled, c.Pool.Size = true, 2 })
	eng.Prewarm()
	ready := func() int {
		n := 0
		for _, st := range eng.PoolStats() {
			n += st.Ready
		}
		return n
	}
	testutil.Eventually(t, time.Minute, "the pool to fill", func() bool { return ready() == 2 })
	pids := sandboxPids()
	if len(pids) == 0 {
		t.Fatal("no processes found in the pooled sandboxes' cgroups")
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	for i := 0; i < 3; i++ {
		r := mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, Code: fmt.Sprintf("%d + 1", i)})
		if !r.Success || fmt.Sprint(r.Result) != fmt.Sprint(i+1) {
			t.Errorf("run %d after the pool's sandboxes were killed: %+v", i, r)
		}
	}
	var replaced uint64
	for _, st := range eng.PoolStats() {
		replaced += st.Replaced
	}
	if replaced == 0 {
		t.Errorf("pool stats %+v: no dead sandbox was replaced", eng.PoolStats())
	}
}

// A downstream MCP server that exits in the middle of a code-mode call: the
// Python call raises a clear error, forge stays up, and the next call
// (to a restarted server) works.
func TestDownstreamCrashMidCall(t *testing.T) {
	bin := testenv.MCPServer(t)
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.MCPTools = map[string]profiles.MCPToolServer{"test": {Command: bin}}
	})
	tools := []string{"crash", "add", "pid"}
	first := mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, Code: `pid()["pid"]`, MCPTools: tools})
	r := mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, Code: `try:
    crash()
    r = "no error"
except Exception as e:
    r = type(e).__name__ + ": " + str(e)
r`, MCPTools: tools})
	msg := fmt.Sprint(r.Result)
	if !strings.Contains(msg, "stopped during the call") || !strings.Contains(msg, "crash") {
		t.Errorf("Python saw %q, want an error saying the server stopped during the call of crash", msg)
	}
	r = mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, Code: `[add(a=20, b=22)["sum"], pid()["pid"]]`, MCPTools: tools})
	v, _ := r.Result.([]any)
	if !r.Success || len(v) != 2 || fmt.Sprint(v[0]) != "42" {
		t.Fatalf("call after the crash: %+v", r)
	}
	if fmt.Sprint(v[1]) == fmt.Sprint(first.Result) {
		t.Errorf("the server's pid did not change (%v): was it restarted?", v[1])
	}
	// Sessions too: the crash inside one does not end it.
	r = mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, Code: "k = 7\ntry:\n    crash()\nexcept Exception as e:\n    pass\nk + add(a=1, b=2)['sum']", SessionID: fmt.Sprintf("crash-%d", os.Getpid()), MCPTools: tools})
	if !r.Success || fmt.Sprint(r.Result) != "10" {
		t.Errorf("session with a crash mid-call: %+v", r)
	}
	if err := eng.DestroySession(context.Background(), engine.LocalPrincipal, fmt.Sprintf("crash-%d", os.Getpid())); err != nil {
		t.Error(err)
	}
}

// Filling /workspace to ENOSPC is a clear error of that call; the session,
// its variables and its files survive, and later calls work.
func TestWorkspaceFull(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) { c.Volumes.SessionQuota = 8 << 20 })
	id := fmt.Sprintf("full-%d", os.Getpid())
	defer eng.DestroySession(context.Background(), engine.LocalPrincipal, id)
	if r := mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Code: "keep = 42\nopen('/workspace/small.txt', 'w').write('small')"}); !r.Success {
		t.Fatalf("setup: %+v", r)
	}
	r := mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Code: "with open('/workspace/fill', 'wb') as f:\n    while True:\n        f.write(b'x' * 65536)"})
	if r.Success || r.Error == nil || r.Error.Type != "OSError" || !strings.Contains(r.Error.Message, "No space left on device") {
		t.Fatalf("filling /workspace: success %v error %+v, want OSError: No space left on device", r.Success, r.Error)
	}
	if len(r.Notes) > 0 {
		t.Errorf("notes %v: the session should not have been lost", r.Notes)
	}
	r = mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Code: "import os\nos.remove('/workspace/fill')\nopen('/workspace/after.txt', 'w').write('after')\n[keep, open('/workspace/small.txt').read(), sorted(os.listdir('/workspace'))]"})
	if got := fmt.Sprint(r.Result); !r.Success || got != "[42 small [after.txt small.txt]]" {
		t.Errorf("after ENOSPC: %v %+v", got, r.Error)
	}
}

// With the state dir's filesystem full (a 1 MiB tmpfs over the sessions
// dir), hibernating a session whose /workspace does not fit fails with an
// error naming ENOSPC; meta.json stays readable; an idle hibernation keeps
// the session live (its earlier save intact), a forced one at shutdown
// marks it lost with the reason; and the half-written copy does not stay
// behind filling the disk.
func TestStateDirFull(t *testing.T) {
	state := dedicatedStateDir(t)
	sessions := filepath.Join(state, "sessions")
	if err := os.MkdirAll(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sessions, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Fatalf("mounting a small tmpfs over %s: %v", sessions, err)
	}
	t.Cleanup(func() { // after the engine's Close (registered later)
		if err := unix.Unmount(sessions, 0); err != nil {
			t.Errorf("unmounting %s: %v", sessions, err)
		}
	})
	eng, logs := engineAt(t, state, func(c *profiles.Config) {
		c.Sessions.Persist = true
		c.Sessions.IdleTimeout = profiles.Duration(300 * time.Millisecond)
		c.Volumes.SessionQuota = 16 << 20
	})
	id := fmt.Sprintf("statefull-%d", os.Getpid())
	dir := filepath.Join(sessions, id)
	status := func() session.Status {
		list, err := eng.ListSessions(context.Background(), engine.LocalPrincipal)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			if in.ID == id {
				return in.Status
			}
		}
		return ""
	}
	mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Code: "x = 1\nopen('/workspace/small.txt', 'w').write('small')"})
	testutil.Eventually(t, time.Minute, "the idle session to hibernate", func() bool { return status() == session.Hibernated })

	r := mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Code: "import os\nx += 1\nopen('/workspace/big.bin', 'wb').write(os.urandom(3 << 20))\nx"})
	if !r.Success || fmt.Sprint(r.Result) != "2" {
		t.Fatalf("restored session: %+v", r)
	}
	testutil.Eventually(t, time.Minute, "an idle hibernation to fail", func() bool {
		return strings.Contains(logs.String(), "hibernating idle session") && strings.Contains(logs.String(), "no space left on device")
	})
	meta := readMetaFile(t, dir)
	if meta.Status != session.Active {
		t.Errorf("after the failed idle hibernation meta.json says %q, want active (kept live)", meta.Status)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "workspace", "small.txt")); err != nil || string(b) != "small" {
		t.Errorf("the earlier save's workspace: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.pkl")); err != nil {
		t.Errorf("the earlier save's variables: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".save")); err == nil {
		t.Error("the half-written save is left in the session dir")
	}
	r = mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Code: "import os\n[x, os.path.getsize('/workspace/big.bin')]"})
	if got := fmt.Sprint(r.Result); !r.Success || got != fmt.Sprint([]int{2, 3 << 20}) {
		t.Errorf("the session after the failed hibernation: %v %+v", got, r.Error)
	}

	// Shutdown must hibernate: it fails, and says so.
	err := closeEngine(eng)
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("engine.Close with a full state dir: %v, want an error naming ENOSPC", err)
	}
	meta = readMetaFile(t, dir)
	if meta.Status != session.Lost || !strings.Contains(meta.LostReason, "no space left on device") {
		t.Errorf("after the failed shutdown hibernation: status %q reason %q, want lost with the reason", meta.Status, meta.LostReason)
	}
	if _, err := os.Stat(filepath.Join(dir, ".save")); err == nil {
		t.Error("the half-written save is left in the session dir")
	}
}

func readMetaFile(t *testing.T, dir string) session.Meta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m session.Meta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("meta.json is corrupt: %v\n%s", err, b)
	}
	return m
}

// An image used by a live session and a pooled sandbox cannot be removed,
// neither through the store of the same process nor by `forge image rm` of
// another; it stays usable.
func TestImageRemovedWhileInUse(t *testing.T) {
	state := dedicatedStateDir(t)
	eng, _ := engineAt(t, state, func(c *profiles.Config) { c.Pool.Enabled, c.Pool.Size = true, 1 })
	ctx := context.Background()
	imgs, err := eng.Store().Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		if len(im.Names) > 1 {
			// Remove would only drop one name: the refusal would not be tested.
			t.Fatalf("image %s has several names %v", im.ID, im.Names)
		}
	}
	id := fmt.Sprintf("inuse-%d", os.Getpid())
	mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Code: "v = 'still here'"})
	defer eng.DestroySession(ctx, engine.LocalPrincipal, id)
	eng.Prewarm()
	testutil.Eventually(t, time.Minute, "the pool to fill", func() bool {
		st := eng.PoolStats()
		return len(st) == 1 && st[0].Ready >= 1 // a miss (the session's start) may have grown it
	})

	err = eng.Store().Remove(ctx, testenv.BaseImage)
	if !errors.Is(err, rootfs.ErrImageInUse) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Store.Remove of an image in use: %v, want ErrImageInUse", err)
	}
	cmd := exec.Command(forgeBin(t), "--state-dir", state, "image", "rm", testenv.BaseImage)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "in use") {
		t.Errorf("forge image rm of an image in use: %v, output %q; want exit 3 and an in-use error", err, out)
	}
	if r := mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Code: "v"}); fmt.Sprint(r.Result) != "still here" {
		t.Errorf("the session after the refused removals: %+v", r)
	}
	if r := mustRun(t, eng, engine.Request{Principal: engine.LocalPrincipal, Code: "1 + 1"}); fmt.Sprint(r.Result) != "2" {
		t.Errorf("a stateless run after the refused removals: %+v", r)
	}
	if _, err := eng.Store().Lookup(ctx, testenv.BaseImage); err != nil {
		t.Errorf("the image is gone: %v", err)
	}
}
