package rootless_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRootlessWarmRunner: an ordinary user's first forge run starts a warm
// runner in the user's own namespace; later runs are served by it from
// outside any namespace of their own (no re-exec), each a fresh sandbox
// that keeps the invariants that hold rootless; the runner exits by itself
// after FORGE_RUN_WARM.
func TestRootlessWarmRunner(t *testing.T) {
	u := newUser(t)
	u.importImage(t)
	env := func(args ...string) (string, string, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout())
		defer cancel()
		c := u.cmd(ctx, args...)
		c.Env = append(slices.DeleteFunc(c.Env, func(v string) bool { return strings.HasPrefix(v, "FORGE_RUN_WARM=") }), "FORGE_RUN_WARM=5s")
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		t0 := time.Now()
		if err := c.Run(); err != nil {
			t.Fatalf("forge %v as %s: %v\n%s\n%s", args, u.name, err, out.String(), errb.String())
		}
		if strings.Contains(errb.String(), "one-shot") {
			t.Fatalf("forge %v fell back to one-shot: %s", args, errb.String())
		}
		return out.String(), errb.String(), time.Since(t0)
	}
	dir := filepath.Join(u.home, ".local", "state", "forge", "run", "warm-"+strconv.Itoa(u.uid))
	runner := func() int {
		b, err := os.ReadFile(filepath.Join(dir, "lock"))
		if err != nil {
			return 0
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid <= 0 || syscall.Kill(pid, 0) != nil {
			return 0
		}
		return pid
	}
	if out, _, _ := env("run", "print(1)"); out != "1\n" {
		t.Fatalf("first run: %q", out)
	}
	pid := runner()
	if pid == 0 {
		t.Fatalf("no warm runner in %s after the first run", dir)
	}
	fi, err := os.Stat(filepath.Join(dir, "run.sock"))
	if err != nil || fi.Mode() != os.ModeSocket|0o600 || fi.Sys().(*syscall.Stat_t).Uid != uint32(u.uid) {
		t.Fatalf("runner socket: %v %v, want the user's, 0600", fi, err)
	}
	out, _, _ := env("run", invariantsPy)
	checkInvariants(t, out)
	var lat []time.Duration
	for range 7 {
		_, _, d := env("run", "print(1)")
		lat = append(lat, d)
	}
	slices.Sort(lat)
	t.Logf("rootless forge run through the warm runner: p50 %v", lat[3])
	if got := runner(); got != pid {
		t.Errorf("runner pid %d after later runs, want %d (the same runner)", got, pid)
	}
	deadline := time.Now().Add(60 * time.Second)
	for runner() != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling for its idle exit, with a deadline
	}
	if runner() != 0 {
		t.Errorf("the warm runner is still there a minute after its last run (FORGE_RUN_WARM=5s)")
	}
}
