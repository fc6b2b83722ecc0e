package rootless_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// zygoteConfig writes a configuration of zygote mode that the user reads.
func (u *user) zygoteConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(u.home, "zygote.yaml")
	if err := os.WriteFile(p, []byte("sandbox:\n  mode: zygote\n  zygote_slots: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// zygoteRun runs code with `forge run --json` in zygote mode and fails
// unless a child was forked for it (not a container fallback).
func (u *user) zygoteRun(t *testing.T, cfg string, args ...string) runResult {
	t.Helper()
	out, errOut, _ := u.try(append([]string{"--config", cfg, "--log-level", "debug", "run", "--json"}, args...)...) // exit 1 on a failed cell
	var r runResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("forge run --json %v in zygote mode as %s: %v\nstdout: %s\nstderr: %s", args, u.name, err, out, errOut)
	}
	if !strings.Contains(errOut, "sandbox forked") || !strings.Contains(errOut, "zygote template ready") {
		t.Fatalf("forge run in zygote mode forked no child:\n%s", errOut)
	}
	return r
}

// zygoteProbe is what the host sees of a zygote run while it runs.
type zygoteProbe struct {
	uids    map[int]bool      // host uids of the zygote processes (template, children)
	cgroups map[string]string // children's own cgroups (v2) seen → "memory.max pids.max" (a pooled child's too)
}

// zygoteProbeRun runs invariantsPy in a zygote child with a 64 MiB limit,
// and while it runs reads from the host the uids of the zygote processes
// (the template, the child's pid 1 and agent) and a child's own cgroup.
func (u *user) zygoteProbeRun(t *testing.T, cfg string) (runResult, zygoteProbe) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout())
	defer cancel()
	c := u.cmd(ctx, "--config", cfg, "--log-level", "debug", "run", "--json", "--memory", "64m", invariantsPy+"import time\ntime.sleep(3)\n")
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	p := zygoteProbe{uids: map[int]bool{}, cgroups: map[string]string{}}
	for running := true; running; {
		select {
		case <-done: // forge ends the sandbox itself: killing it would leave its child forge
			running = false
		case <-time.After(50 * time.Millisecond):
		}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); !strings.Contains(string(cmd), "zygote.py") || !descends(pid, c.Process.Pid) {
				continue // other tests' zygotes (as root) may run meanwhile
			}
			if uid, err := procField(pid, "Uid:"); err == nil {
				p.uids[uid] = true
			}
			cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
			if dir, ok := strings.CutPrefix(strings.TrimSpace(string(cg)), "0::"); ok && sandboxID.MatchString(filepath.Base(dir)) {
				mem, err1 := os.ReadFile(filepath.Join(cgroupRoot, dir, "memory.max"))
				pids, err2 := os.ReadFile(filepath.Join(cgroupRoot, dir, "pids.max"))
				if err1 == nil && err2 == nil {
					p.cgroups[dir] = strings.TrimSpace(string(mem)) + " " + strings.TrimSpace(string(pids))
				}
			}
		}
	}
	var r runResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("forge run --json in zygote mode as %s: %v\nstdout: %s\nstderr: %s", u.name, err, &out, &errOut)
	}
	if !strings.Contains(errOut.String(), "sandbox forked") {
		t.Fatalf("forge run in zygote mode forked no child:\n%s", &errOut)
	}
	return r, p
}

// sandboxID matches a sandbox's cgroup name (not a template's, which ends in -z).
var sandboxID = regexp.MustCompile(`^[0-9]+-[0-9a-f]{12}$`)

// descends reports whether pid is root or a descendant of it.
func descends(pid, root int) bool {
	for range 64 {
		if pid == root {
			return true
		}
		pp, err := procField(pid, "PPid:")
		if err != nil || pp <= 1 {
			return false
		}
		pid = pp
	}
	return false
}

// procField is the first number of a line of /proc/PID/status (Uid: is the real uid).
func procField(pid int, name string) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == name {
			return strconv.Atoi(f[1])
		}
	}
	return 0, os.ErrNotExist
}

// checkZygote runs zygote mode rootless as u (forge started in u's cgroup,
// if set) and checks what holds whatever the limits are: children are
// forked, with the invariants, the template and its children run as ids
// of the user's subordinate range (none as the user's own uid), and doctor
// says zygote runs and how limits hold (want).
func checkZygote(t *testing.T, u *user, want string) (string, zygoteProbe) {
	t.Helper()
	cfg := u.zygoteConfig(t)
	r, p := u.zygoteProbeRun(t, cfg)
	checkInvariants(t, r.Stdout)
	if len(p.uids) < 2 {
		t.Errorf("host uids of the zygote processes seen while a child ran: %v, want the template's and the child's", p.uids)
	}
	for uid := range p.uids {
		if uid == u.uid || uid < int(u.sub.Start) || uid >= int(u.sub.Start+u.sub.Size) {
			t.Errorf("a zygote process runs as host uid %d, outside %s's subordinate range %d+%d", uid, u.name, u.sub.Start, u.sub.Size)
		}
	}
	doctor, _, _ := u.try("--config", cfg, "doctor", "--json")
	for _, w := range []string{`"sandbox mode","found":true`, "zygote (sandbox.mode, the default)", "rootless: 4 children per template", want} {
		if !strings.Contains(doctor, w) {
			t.Errorf("doctor in zygote mode rootless does not say %s:\n%s", w, doctor)
		}
	}
	return cfg, p
}

// TestRootlessZygote: zygote mode as an ordinary user without a delegated
// cgroup (this host's hybrid tree, or a v2 cgroup the user does not own):
// the children's limits are rlimits, as a container's are. A process that
// wants more memory than the sandbox has gets MemoryError, a fork loop
// stops at RLIMIT_NPROC. The delegated case is zygoteDelegated, run by
// TestRootlessDelegatedCgroup (in the v2 guest).
func TestRootlessZygote(t *testing.T) {
	u := newUser(t)
	u.importImage(t)
	cfg, p := checkZygote(t, u, "each child's limits are rlimits")
	if len(p.cgroups) > 0 {
		t.Errorf("zygote children without a delegated cgroup have cgroups of their own: %v", p.cgroups)
	}
	r := u.zygoteRun(t, cfg, "--memory", "128m", `
try:
    b = bytearray(512 << 20); print("allocated")
except MemoryError:
    print("memory-error")`)
	if !strings.Contains(r.Stdout, "memory-error") {
		t.Errorf("512 MiB in a 128 MiB zygote child: %+v", r)
	}
	r = u.zygoteRun(t, cfg, fork200Py)
	if !strings.Contains(r.Stdout, "refused after") {
		t.Errorf("200 forks in a zygote child with execution.max_pids 128: %+v", r)
	}
}

// zygoteDelegated: zygote mode rootless in the delegated cgroup dir of
// TestRootlessDelegatedCgroup: each child gets a cgroup of its own there,
// OOM-killed at its memory limit with the result saying so, memory use
// read back, and the children's cgroups go with them.
func zygoteDelegated(t *testing.T, u *user, dir string) {
	t0 := time.Now()
	defer func() { t.Logf("zygote mode in the delegated cgroup: %s", time.Since(t0).Round(time.Second)) }()
	cfg, p := checkZygote(t, u, "each child gets a cgroup of its own in the delegated subtree")
	// Each child has its own cgroup in the delegated subtree; the run's has
	// its limits (64m, execution.max_pids 128).
	run := false
	for cg, lim := range p.cgroups {
		if !strings.HasPrefix(filepath.Join(cgroupRoot, cg), filepath.Join(dir, "forge")+"/") {
			t.Errorf("a zygote child's cgroup %s is outside %s/forge", cg, dir)
		}
		run = run || lim == strconv.Itoa(64<<20)+" 128"
	}
	if !run {
		t.Errorf("zygote children's cgroups seen: %v; want one with memory.max %d and pids.max 128 (the run's)", p.cgroups, 64<<20)
	}
	r := u.zygoteRun(t, cfg, "--memory", "64m", "keep = b'y' * (24 << 20)\nb = b'x' * (256 << 20)\nprint(len(b))")
	if !r.OOMKilled || r.MemoryPeakBytes < 24<<20 {
		t.Errorf("256 MiB in a 64 MiB zygote child: oom %v, peak %d: %+v", r.OOMKilled, r.MemoryPeakBytes, r)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "forge"))
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("a cgroup is left in the delegated subtree: %s", e.Name())
		}
	}
}

// zygoteFallback: without a subordinate range, zygote mode cannot hold
// its invariants rootless (every child would be the user's own uid), so
// sandboxes start as containers: the run works, the log says why, and
// doctor says so.
func zygoteFallback(t *testing.T, u *user) {
	cfg := u.zygoteConfig(t)
	out, errOut, err := u.try("--config", cfg, "run", "print(1)")
	if err != nil || strings.TrimSpace(out) != "1" || !strings.Contains(errOut, "needs a subordinate id range") ||
		!strings.Contains(errOut, "sandboxes start as containers") {
		t.Errorf("zygote mode without a subordinate range: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	doctor, _, _ := u.try("--config", cfg, "doctor", "--json")
	if !strings.Contains(doctor, `"sandbox mode","found":false`) || !strings.Contains(doctor, "cannot run rootless here, so sandboxes start as containers") {
		t.Errorf("doctor does not say zygote mode falls back to containers without a range:\n%s", doctor)
	}
}
