package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/test/testenv"
)

// uniqueID is a session id no other test (or helper sharing the state dir) uses.
// It is destroyed when the test ends, also when it fails.
func uniqueID(t *testing.T, eng *engine.Engine, prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := prefix + "-" + hex.EncodeToString(b[:])
	t.Cleanup(func() { eng.DestroySession(context.Background(), engine.LocalPrincipal, id) })
	return id
}

// hibernatingEngine hibernates sessions idle for 300 ms; it returns the sessions dir.
func hibernatingEngine(t *testing.T) (*engine.Engine, string) {
	var dir string
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.Sessions.IdleTimeout = profiles.Duration(300 * time.Millisecond)
		c.Sessions.Persist = true
		dir = filepath.Join(c.StateDir, "sessions")
	})
	return eng, dir
}

// forgePickle replaces the agent's pickle_state handler (found through the globals of the
// agent's display function) with body, which gets req and must return a reply.
func forgePickle(body string) string {
	return "def _forged(req):\n" + body + "\ndisplay.__globals__['OPS']['pickle_state'] = _forged"
}

// waitStatus polls list_sessions until session id has status want.
func waitStatus(t *testing.T, eng *engine.Engine, id string, want session.Status, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		list, err := eng.ListSessions(context.Background(), engine.LocalPrincipal)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if s.ID == id && s.Status == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s not %s within %s: %+v", id, want, within, list)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lostReason reads a session's lost_reason from its meta.json (State would bring a lost
// session that is still held by this process up again).
func lostReason(t *testing.T, dir, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, id, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta session.Meta
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	return meta.LostReason
}

// TestHibernationRefusesFIFOState: a FIFO at the state path used to block hibernation (and
// with it the idle reaper, so every later hibernation) for good.
func TestHibernationRefusesFIFOState(t *testing.T) {
	eng, dir := hibernatingEngine(t)
	fifo := uniqueID(t, eng, "fifo")
	call(t, eng, fifo, "x = 1\n"+forgePickle(`    import os
    try:
        os.unlink(req['path'])
    except FileNotFoundError:
        pass
    os.mkfifo(req['path'])
    return {'saved': ['x'], 'failed': []}`))
	waitStatus(t, eng, fifo, session.Lost, 20*time.Second)
	why := lostReason(t, dir, fifo)
	t.Logf("lost_reason: %s", why)
	if !strings.Contains(why, "FIFO") {
		t.Errorf("lost_reason %q, want it to name the FIFO", why)
	}
	// The reaper is not stuck: the next session hibernates.
	next := uniqueID(t, eng, "next")
	call(t, eng, next, "y = 2")
	waitStatus(t, eng, next, session.Hibernated, 20*time.Second)
	if r := call(t, eng, next, "y"); fmt.Sprint(r.Result) != "2" {
		t.Errorf("after hibernation y = %v (error %+v)", r.Result, r.Error)
	}
	r := call(t, eng, fifo, "'x' in globals()")
	if r.Result != false || !strings.Contains(strings.Join(r.Notes, " "), "was lost") {
		t.Errorf("the lost session again: result %v notes %q", r.Result, r.Notes)
	}
}

// TestHibernationCapsStateFile: a 1 GiB sparse file at the state path used to become a 1 GiB
// state.pkl on the host.
func TestHibernationCapsStateFile(t *testing.T) {
	eng, dir := hibernatingEngine(t)
	id := uniqueID(t, eng, "sparse")
	call(t, eng, id, forgePickle(`    with open(req['path'], 'wb') as f:
        f.truncate(1 << 30)
    return {'saved': [], 'failed': []}`))
	waitStatus(t, eng, id, session.Lost, 20*time.Second)
	why := lostReason(t, dir, id)
	t.Logf("lost_reason: %s", why)
	if !strings.Contains(why, "over the limit") || !strings.Contains(why, "execution.tmp_size") {
		t.Errorf("lost_reason %q, want it to say the state file is over execution.tmp_size", why)
	}
	var total int64
	filepath.WalkDir(filepath.Join(dir, id), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	if total > 1<<20 {
		t.Errorf("the session dir holds %d bytes after a refused 1 GiB state file", total)
	}
}

// TestForgedInspectKillsSession: an inspect reply of millions of variables used to take forge
// from 49 MB to 1.4 GB and write a 321 MB meta.json.
func TestForgedInspectKillsSession(t *testing.T) {
	eng, dir := hibernatingEngine(t)
	ctx := context.Background()
	id := uniqueID(t, eng, "inspect")
	call(t, eng, id, "x = 1\ndisplay.__globals__['OPS']['inspect'] = lambda req: {'variables': [{}] * 3_000_000}")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := eng.DocumentState(ctx, engine.LocalPrincipal, id, map[string]string{"x": "one"}, "", false)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, kernel.ErrProtocol) {
		t.Fatalf("document_state: %v, want ErrProtocol", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d MB for the forged reply", alloc>>20)
	if alloc > 100<<20 {
		t.Errorf("forge allocated %d MB for the forged reply, want < 100 MB", alloc>>20)
	}
	fi, err := os.Stat(filepath.Join(dir, id, "meta.json"))
	if err != nil || fi.Size() > 64<<10 {
		t.Errorf("meta.json: %v, %v; want a small file", fi, err)
	}
	why := lostReason(t, dir, id)
	t.Logf("lost_reason: %s", why)
	if !strings.Contains(why, "protocol") {
		t.Errorf("lost_reason %q, want it to say the agent broke the protocol", why)
	}
	// The server is healthy: a stateless run and the session itself, fresh.
	if r, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: "1 + 1"}); err != nil || fmt.Sprint(r.Result) != "2" {
		t.Errorf("a stateless run after: %+v, %v", r, err)
	}
	if r := call(t, eng, id, "'x' in globals()"); r.Result != false {
		t.Errorf("the session after: result %v notes %q", r.Result, r.Notes)
	}
}
