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
const stopConfig = `pool:
  enabled: true
  size: 1
sessions:
  persist: true
  idle_timeout: 1h
  max_concurrent: %d
`

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
	state := dedicatedStateDir(t)
	config := filepath.Join(t.TempDir(), "forge.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(stopConfig, n+10)), 0o600); err != nil {
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
		_, err := a.executeErr(id, fmt.Sprintf(slowState, i, slowPickle.Seconds()))
		return err
	})
	t.Logf("%d sessions created in %s", n, time.Since(created).Round(time.Millisecond))

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
		r, err := b.executeErr(id, "[x, slow]")
		if err != nil {
			return err
		}
		if got, want := fmt.Sprint(r.Structured.Result), fmt.Sprintf("[%d 7]", i); got != want {
			return fmt.Errorf("session %s after the restart: %s, want %s (notes %v)", id, got, want, r.Structured.Notes)
		}
		return nil
	})
	b.terminate(10 * time.Minute)
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
