package stress

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopSessions is how many live sessions TestStopSavesEverySession stops:
// FORGE_STOP_SESSIONS, or 300 (about a minute here).
func stopSessions(t *testing.T) int {
	t.Helper()
	v := os.Getenv("FORGE_STOP_SESSIONS")
	if v == "" {
		return 300
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("FORGE_STOP_SESSIONS=%q: want a positive number of sessions", v)
	}
	return n
}

// stopConfig lets n sessions live at once and never idles them out.
// Past what the default host id blocks hold (security.uid_map_size 65536:
// 3,968 zygote children, forge doctor's row) each sandbox maps 16384 ids,
// as docs/configuration.md tells an operator to do for that many sessions.
func stopConfig(n int) string {
	c := fmt.Sprintf(`pool:
  enabled: true
  size: 1
sessions:
  persist: true
  idle_timeout: 1h
  max_concurrent: %d
`, n+10)
	if n+10 > 3968 {
		c += "security:\n  uid_map_size: 16384\n"
	}
	return c
}

// slowState is a session's code: x is its number, and slow a value that
// takes slowPickle to pickle, standing in for a large state (a DataFrame
// of a few hundred MB takes as long). 300 such sessions are as much work
// for a stop as the 3,000 small ones that lost 1,310 at a SIGTERM, because
// the old stop gave all of them one minute together.
const slowState = `x = %d
class Slow:
    def __reduce__(self):
        import time
        time.sleep(%g)
        return (int, (7,))
slow = Slow()
`

const slowPickle = 250 * time.Millisecond

// TestStopSavesEverySession makes many live sessions, stops forge serve
// with SIGTERM, and starts it again: every session was hibernated (none
// lost) and answers with its own variables. A stop saves several sessions
// at once, each with its own deadline; the log says how long it took.
func TestStopSavesEverySession(t *testing.T) {
	n := stopSessions(t)
	stopAndRestart(t, n, stopConfig(n), func(i int) (string, string) {
		return fmt.Sprintf(slowState, i, slowPickle.Seconds()), fmt.Sprintf("[%d 7]", i)
	}, "[x, slow]", nil)
}

// TestStopSavesEverySessionUnderMemoryPressure is the same stop with forge's
// parent cgroup (its own, limits.cgroup_parent) filled to within a few MiB
// of its limit: saving a session needs memory for its pickle, and a stop
// that saved too many at once would have the kernel kill sessions (lost)
// instead of freeing memory by finishing them.
func TestStopSavesEverySessionUnderMemoryPressure(t *testing.T) {
	n := max(stopSessions(t)/3, 1)
	parent := fmt.Sprintf("forge-stress-%d", os.Getpid())
	t.Cleanup(func() { removeCgroup(parent) })
	config := stopConfig(n) + fmt.Sprintf("limits:\n  cgroup_parent: %s\n", parent)
	stopAndRestart(t, n, config, func(i int) (string, string) {
		return fmt.Sprintf("import os\nx = %d\ndata = os.urandom(4 << 20)", i), fmt.Sprintf("[%d 4194304]", i)
	}, "[x, str(len(data))]", func() {
		used, limitFile := cgroupMemory(t, parent)
		limit := used + pressureMargin()
		if err := os.WriteFile(limitFile, []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			t.Fatalf("limiting %s: %v", limitFile, err)
		}
		t.Logf("parent cgroup %s: %d MiB used, limit set to %d MiB", parent, used>>20, limit>>20)
	})
}

// stopAndRestart creates n sessions with the code of code(i), calls
// pressure (if any), stops forge serve with SIGTERM, starts it again, and
// checks that every session was hibernated and answers check with the
// result code(i) named.
func stopAndRestart(t *testing.T, n int, configText string, code func(i int) (string, string), check string, pressure func()) {
	t.Helper()
	state := dedicatedStateDir(t)
	config := filepath.Join(t.TempDir(), "forge.yaml")
	if err := os.WriteFile(config, []byte(configText), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("stop-%d-%d", os.Getpid(), i)
	}
	t.Cleanup(func() {
		for _, id := range ids {
			os.RemoveAll(filepath.Join(state, "sessions", id))
		}
	})

	a := startServe(t, state, config)
	created := time.Now()
	forEach(t, ids, 8, func(i int, id string) error {
		c, _ := code(i)
		_, err := a.executeErr(id, c)
		return err
	})
	t.Logf("%d sessions created in %s", n, time.Since(created).Round(time.Millisecond))
	if pressure != nil {
		pressure()
	}

	stopped := time.Now()
	a.terminate(10 * time.Minute)
	took := time.Since(stopped)
	t.Logf("SIGTERM with %d live sessions: stopped in %s (%s per session)", n, took.Round(time.Millisecond), (took / time.Duration(n)).Round(time.Microsecond))
	if !strings.Contains(a.stderr.String(), "sessions saved at stop") {
		t.Errorf("the stop did not log how long saving the sessions took")
	}

	b := startServe(t, state, config)
	statuses := listSessions(t, b)
	lost := 0
	for _, id := range ids {
		if statuses[id] != "hibernated" {
			lost++
			if lost <= 5 {
				t.Errorf("session %s: status %q after the stop, want hibernated", id, statuses[id])
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d sessions not hibernated by a graceful stop", lost, n)
	}
	forEach(t, ids, 8, func(i int, id string) error {
		r, err := b.executeErr(id, check)
		if err != nil {
			return err
		}
		if _, want := code(i); fmt.Sprint(r.Structured.Result) != want {
			return fmt.Errorf("session %s after the restart: %v, want %s (notes %v)", id, r.Structured.Result, want, r.Structured.Notes)
		}
		return nil
	})
	b.terminate(10 * time.Minute)
}

// cgroupMemory is the memory used by parent cgroup name (cgroup v2 or the
// v1 memory controller) and the file of its limit.
func cgroupMemory(t *testing.T, name string) (int64, string) {
	t.Helper()
	cur, max := filepath.Join("/sys/fs/cgroup", name, "memory.current"), filepath.Join("/sys/fs/cgroup", name, "memory.max")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		cur, max = filepath.Join("/sys/fs/cgroup/memory", name, "memory.usage_in_bytes"), filepath.Join("/sys/fs/cgroup/memory", name, "memory.limit_in_bytes")
	}
	b, err := os.ReadFile(cur)
	if err != nil {
		t.Fatalf("reading the parent cgroup's memory: %v", err)
	}
	used, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", cur, err)
	}
	return used, max
}

// removeCgroup removes cgroup name and what is below it, in every
// hierarchy (v2, or each v1 controller). What a killed forge left there
// (sandboxes, perhaps blocked on the full cgroup) is let go and killed
// first: no forge cleans up a cgroup only this test knows.
func removeCgroup(name string) {
	roots := []string{"/sys/fs/cgroup"}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		roots, _ = filepath.Glob("/sys/fs/cgroup/*")
	}
	var dirs []string
	for _, root := range roots {
		_ = filepath.WalkDir(filepath.Join(root, name), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	for _, d := range dirs {
		_ = os.WriteFile(filepath.Join(d, "memory.limit_in_bytes"), []byte("-1"), 0o644)
		_ = os.WriteFile(filepath.Join(d, "memory.max"), []byte("max"), 0o644)
		_ = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0o644)
		_ = os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0o644)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		busy := false
		for _, d := range dirs {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					busy = true
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if !busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first
		_ = os.Remove(dirs[i])
	}
}

// forEach runs f for every id, workers at a time, and fails the test with
// the first few errors.
func forEach(t *testing.T, ids []string, workers int, f func(i int, id string) error) {
	t.Helper()
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i, ids[i]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if i == 5 {
			t.Errorf("... and %d more", len(errs)-5)
			break
		}
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
}

// executeErr runs code in session id and returns an error unless it
// succeeded; safe to call from several goroutines.
func (p *serveProc) executeErr(id, code string) (toolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var r toolResult
	raw, err := p.call(ctx, "tools/call", map[string]any{"name": "execute_python",
		"arguments": map[string]any{"code": code, "session_id": id}})
	if err != nil {
		return r, fmt.Errorf("session %s: %w", id, err)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("session %s: result %s: %w", id, raw, err)
	}
	if r.IsError || !r.Structured.Success {
		return r, fmt.Errorf("session %s: execute_python failed: %s", id, r.text())
	}
	return r, nil
}

// terminate sends SIGTERM (a graceful stop) and waits for the exit.
func (p *serveProc) terminate(within time.Duration) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(within):
		p.t.Fatalf("forge serve did not exit within %s of SIGTERM", within)
	}
}

// pressureMargin is how far below its limit the memory test fills the
// parent cgroup: FORGE_STOP_MARGIN_MIB, or 48 MiB (a few sessions' saves).
func pressureMargin() int64 {
	if n, err := strconv.Atoi(os.Getenv("FORGE_STOP_MARGIN_MIB")); err == nil && n > 0 {
		return int64(n) << 20
	}
	return 48 << 20
}
