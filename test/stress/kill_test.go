package stress

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// serveConfig is forge serve's config for the process tests: a small pool,
// persistent sessions that never idle out during the test, and code mode
// (every sandbox gets a bridge dir in the state dir, which a killed process
// leaves behind).
const serveConfig = `pool:
  enabled: true
  size: 1
sessions:
  persist: true
  idle_timeout: 1h
mcp_tools:
  test:
    command: %q
`

// TestKilledServe kills forge serve with SIGKILL while an execution runs,
// then starts it again on the same state dir:
//   - the dead process's sandboxes, cgroups, processes, mounts and run dir
//     are gone once the new one is up;
//   - a session hibernated by an earlier graceful shutdown comes back with
//     its variables and /workspace files;
//   - a session that was live at the kill (its namespace and tmpfs
//     /workspace died with it) is listed as lost, and its next call says
//     so and why, instead of silently starting empty.
func TestKilledServe(t *testing.T) {
	state := dedicatedStateDir(t)
	config := filepath.Join(t.TempDir(), "forge.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(serveConfig, testenv.MCPServer(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	kept := fmt.Sprintf("kept-%d", os.Getpid())
	live := fmt.Sprintf("live-%d", os.Getpid())

	// 1. A session saved by a graceful shutdown.
	a := startServe(t, state, config)
	a.execute(kept, "x = 41\nopen('/workspace/kept.txt', 'w').write('kept')")
	a.stop()
	if err := testenv.LeftoversOf(state, a.pid()); err != nil {
		t.Errorf("after a graceful shutdown: %v", err)
	}

	// 2. A live session and a long execution, then SIGKILL.
	b := startServe(t, state, config)
	b.execute(live, "y = 1\nopen('/workspace/live.txt', 'w').write('live')")
	long := b.send("tools/call", map[string]any{"name": "execute_python",
		"arguments": map[string]any{"code": "import subprocess\nsubprocess.run(['sleep', '600'])"}})
	testutil.Eventually(t, time.Minute, "the long execution to run", func() bool { return sleepingIn(b.pid()) })
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	select {
	case r := <-long:
		t.Fatalf("the long execution answered although forge was killed: %+v", r)
	default:
	}
	// The orphans exist: the restart has something to clean up.
	if testenv.LeftoversOf(state, b.pid()) == nil {
		t.Fatal("forge serve was killed mid-run but left nothing behind; the test cannot tell whether a restart cleans up")
	}

	// 3. The restart. initialize is answered before the engine opens (fast
	// connect); a tool call waits for it, and opening it cleans up.
	c := startServe(t, state, config)
	statuses := listSessions(t, c)
	if err := testenv.LeftoversOf(state, b.pid()); err != nil {
		t.Errorf("after the restart, the killed process's orphans remain: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(state, "bridge")); err == nil {
		for _, d := range ents {
			if !strings.HasPrefix(d.Name(), fmt.Sprintf("%d-", c.pid())) {
				t.Errorf("after the restart, bridge dir %s is not the new process's", d.Name())
			}
		}
	}
	if got := statuses[live]; got != "lost" {
		t.Errorf("list_sessions: session live at the kill has status %q, want lost (all: %v)", got, statuses)
	}
	if got := statuses[kept]; got != "hibernated" {
		t.Errorf("list_sessions: hibernated session has status %q (all: %v)", got, statuses)
	}
	r := c.execute(kept, "import os\n[x, open('/workspace/kept.txt').read()]")
	if got := fmt.Sprint(r.Structured.Result); got != "[41 kept]" {
		t.Errorf("hibernated session after the restart: %v, want [41 kept]; notes %v", got, r.Structured.Result)
	}
	if notes := strings.Join(r.Structured.Notes, "\n"); !strings.Contains(notes, "restored") {
		t.Errorf("hibernated session: notes %q do not say it was restored", notes)
	}
	r = c.execute(live, "import os\n[globals().get('y'), os.listdir('/workspace')]")
	if got := fmt.Sprint(r.Structured.Result); got != "[<nil> []]" {
		t.Errorf("session live at the kill: %v, want a fresh namespace and workspace", got)
	}
	notes := strings.Join(r.Structured.Notes, "\n")
	want := fmt.Sprintf("forge process %d", b.pid())
	if !strings.Contains(notes, "lost") || !strings.Contains(notes, want) {
		t.Errorf("session live at the kill: notes %q, want it reported lost, naming %q", notes, want)
	}
	if !strings.Contains(r.text(), "lost") {
		t.Errorf("the model's text does not say the session was lost: %s", r.text())
	}
	for _, id := range []string{kept, live} {
		if r := c.tool("destroy_session", map[string]any{"session_id": id}); r.IsError {
			t.Errorf("destroy_session %s: %s", id, r.text())
		}
	}
	c.stop()
	if err := testenv.LeftoversOf(state, c.pid()); err != nil {
		t.Errorf("after the last shutdown: %v", err)
	}
	for _, id := range []string{kept, live} {
		if _, err := os.Stat(filepath.Join(state, "sessions", id)); err == nil {
			t.Errorf("session dir %s left behind", id)
		}
	}
}

// sleepingIn reports whether a `sleep` runs in a sandbox of forge process pid.
func sleepingIn(pid int) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		comm, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(comm)) != "sleep" {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		if err == nil && strings.Contains(string(cg), fmt.Sprintf("/forge/%d-", pid)) {
			return true
		}
	}
	return false
}

// listSessions maps session ids to their status, from list_sessions.
func listSessions(t *testing.T, p *serveProc) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, err := p.call(ctx, "tools/call", map[string]any{"name": "list_sessions", "arguments": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Structured struct {
			Sessions []struct {
				ID     string `json:"session_id"`
				Status string `json:"status"`
			} `json:"sessions"`
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("list_sessions %s: %v", raw, err)
	}
	out := map[string]string{}
	for _, s := range res.Structured.Sessions {
		out[s.ID] = s.Status
	}
	return out
}
