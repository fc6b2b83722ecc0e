package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/sandbox"
)

// forge gc removes agent directories of other builds that nothing uses and
// compiled agents of images that are gone, and keeps everything else.
func TestCleanupAgents(t *testing.T) {
	rt, root := freshRuntime(t)
	base := filepath.Dir(rt.AgentDir())
	old := time.Now().Add(-2 * time.Hour)
	mk := func(name string, age time.Time) string {
		t.Helper()
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "agent.py")
		if err := os.WriteFile(f, []byte("# an older agent\n"), 0o444); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{f, dir} {
			if err := os.Chtimes(p, age, age); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	stale := mk("0000000000aa", old)
	recent := mk("0000000000bb", time.Now())
	used := mk("0000000000cc", old)
	// A sandbox of a live forge process (this one) whose state mounts `used`.
	state := filepath.Join(filepath.Dir(filepath.Dir(rt.AgentDir())), "containers", fmt.Sprintf("%d-agentgctest", os.Getpid()))
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte(`{"config":{"mounts":[{"source":"`+used+`"}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	gone, kept := fakeImageID(t), fakeImageID(t)
	for _, id := range []string{gone, kept} {
		p := filepath.Join(rt.AgentDir(), "agent-"+id+".pyc")
		if err := os.WriteFile(p, []byte("\x00\x00\r\nbytecode"), 0o444); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}

	rep, err := rt.CleanupAgents(func(id string) bool { return id != gone })
	if err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if exists(stale) || !exists(recent) || !exists(used) || !exists(rt.AgentDir()) {
		t.Errorf("after gc: stale %v (want gone), recent %v, in use %v, current %v (want kept)",
			exists(stale), exists(recent), exists(used), exists(rt.AgentDir()))
	}
	if exists(filepath.Join(rt.AgentDir(), "agent-"+gone+".pyc")) || !exists(filepath.Join(rt.AgentDir(), "agent-"+kept+".pyc")) {
		t.Error("bytecode of the removed image kept, or of the present one removed")
	}
	// (The shared test state dir may also hold real directories of older builds.)
	if !slices.Contains(rep.Dirs, stale) || slices.Contains(rep.Dirs, recent) || slices.Contains(rep.Dirs, used) ||
		!slices.Equal(rep.Bytecode, []string{filepath.Join(rt.AgentDir(), "agent-"+gone+".pyc")}) {
		t.Errorf("report %+v", rep)
	}

	// A runtime whose agent directory vanished writes it again at the next start.
	if err := os.RemoveAll(rt.AgentDir()); err != nil {
		t.Fatal(err)
	}
	sb := startOn(t, rt, root)
	if got := agentCmdline(t, sb); got == "" {
		t.Error("sandbox after the agent directory was removed does not run code")
	}
}

// startOn starts a sandbox of the base image on rt, destroyed when the test ends.
func startOn(t *testing.T, rt *sandbox.Runtime, root string) *sandbox.Sandbox {
	t.Helper()
	sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { sb.Destroy() })
	return sb
}
