package rootless_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/test/testutil"
)

// cgroupRoot is the cgroup2 mount the delegated test makes its cgroup in.
const cgroupRoot = "/sys/fs/cgroup"

// runResult is what the test reads of `forge run --json`.
type runResult struct {
	Stdout          string `json:"stdout"`
	OOMKilled       bool   `json:"oom_killed"`
	MemoryPeakBytes uint64 `json:"memory_peak_bytes"`
	Error           *struct {
		Type, Message string
	} `json:"error"`
}

func (u *user) runJSON(t *testing.T, args ...string) runResult {
	t.Helper()
	out, errOut, _ := u.try(append([]string{"run", "--json"}, args...)...) // exit 1 on a failed cell
	var r runResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("forge run --json %v as %s: %v\nstdout: %s\nstderr: %s", args, u.name, err, out, errOut)
	}
	return r
}

// startIn makes forge start in the cgroup dir (clone3 with CLONE_INTO_CGROUP).
func (u *user) startIn(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.cgroup != nil {
		u.cgroup.Close()
	}
	u.cgroup = f
}

// TestRootlessDelegatedCgroup: on cgroup v2, a rootless forge started in a
// cgroup delegated to its user (chowned as systemd's Delegate=yes does: the
// directory, cgroup.procs, cgroup.subtree_control, cgroup.threads) moves
// into a supervisor leaf and gives each sandbox a cgroup of its own there.
// A memory limit ends in an OOM kill the result reports, the pids limit is
// the cgroup's (named in the error), memory use is read back, the
// invariants hold, and doctor says the limits are cgroups. With rlimits
// (the code before delegation) the memory run gets MemoryError, no OOM,
// no usage and no process-limit message. On a host without cgroup v2 (this
// machine's hybrid tree) the same forge gets rlimits and doctor says why:
// that branch runs on the host, the other in the v2 guest
// (scripts/v2-guest.sh).
func TestRootlessDelegatedCgroup(t *testing.T) {
	u := newUser(t)
	u.importImage(t)
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		doctor, _, _ := u.try("doctor", "--json")
		for _, want := range []string{`"delegated cgroup v2 (rootless)","found":false`, "is not a cgroup v2 tree", "RLIMIT_DATA"} {
			if !strings.Contains(doctor, want) {
				t.Errorf("doctor on a host without cgroup v2 does not say %s:\n%s", want, doctor)
			}
		}
		return
	}
	b, _ := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"))
	for _, c := range []string{"memory", "pids", "cpu"} {
		testutil.Require(t, slices.Contains(strings.Fields(string(b)), c), "the root cgroup does not give its children the "+c+" controller (cgroup.subtree_control: "+strings.TrimSpace(string(b))+")")
	}
	dir := filepath.Join(cgroupRoot, u.name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, dir + "/cgroup.procs", dir + "/cgroup.subtree_control", dir + "/cgroup.threads"} {
		if err := os.Chown(p, u.uid, u.gid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if u.cgroup != nil {
			u.cgroup.Close()
		}
		if err := rmCgroup(dir); err != nil {
			t.Errorf("removing the delegated cgroup: %v", err)
		}
	})

	// The first forge starts in the delegated cgroup itself and moves out.
	u.startIn(t, dir)
	r := u.runJSON(t, "--memory", "64m", "b = b'x' * (256 << 20)\nprint(len(b))")
	if !r.OOMKilled {
		t.Errorf("256 MiB in a 64 MiB sandbox: not OOM-killed: %+v", r)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if got := strings.Fields(string(b)); !slices.Contains(got, "memory") || !slices.Contains(got, "pids") || !slices.Contains(got, "cpu") {
		t.Errorf("the delegated cgroup gives its children %q, want memory, pids, cpu", got)
	}
	for _, sub := range []string{"supervisor", "forge"} {
		if st, err := os.Stat(filepath.Join(dir, sub)); err != nil || !st.IsDir() {
			t.Errorf("no %s cgroup in the delegated one: %v", sub, err)
		}
	}

	// Later forges start in the supervisor leaf (systemd's
	// DelegateSubgroup=, or a second forge of the same unit).
	u.startIn(t, filepath.Join(dir, "supervisor"))
	r = u.runJSON(t, `
import os
for _ in range(300):
    if os.fork() == 0:
        import time; time.sleep(30); os._exit(0)`)
	if r.Error == nil || !strings.Contains(r.Error.Message, "process limit") {
		t.Errorf("300 forks with execution.max_pids 128: want the cgroup's process-limit error, got %+v", r)
	}
	r = u.runJSON(t, "keep = b'y' * (48 << 20)\n"+invariantsPy)
	checkInvariants(t, r.Stdout)
	if r.MemoryPeakBytes < 48<<20 {
		t.Errorf("memory peak read back %d bytes, want at least the 48 MiB the code held", r.MemoryPeakBytes)
	}
	doctor, _, _ := u.try("doctor", "--json")
	for _, want := range []string{`"delegated cgroup v2 (rootless)","found":true`, `"limit cpu (rootless)","found":true`, `"limit pause (rootless)","found":true`, "cgroup memory.max"} {
		if !strings.Contains(doctor, want) {
			t.Errorf("doctor in the delegated cgroup does not say %s:\n%s", want, doctor)
		}
	}
	// Each sandbox's cgroup went with it.
	ents, _ := os.ReadDir(filepath.Join(dir, "forge"))
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("a sandbox's cgroup is left: %s", e.Name())
		}
	}
	t.Run("Zygote", func(t *testing.T) { zygoteDelegated(t, u, dir) })
	t.Run("Session", func(t *testing.T) { delegatedSession(t, u, dir) })
	t.Run("SystemdScope", func(t *testing.T) { systemdScope(t, u, dir) })
}

// rmCgroup removes a cgroup directory tree, children first.
func rmCgroup(p string) error {
	ents, _ := os.ReadDir(p)
	for _, e := range ents {
		if e.IsDir() {
			if err := rmCgroup(filepath.Join(p, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
