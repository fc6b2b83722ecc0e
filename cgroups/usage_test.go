package cgroups

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	ocg "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"

	"github.com/mcp-forge/forge/test/testutil"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeCgroupfs lets the cgroups library read files outside /sys/fs/cgroup.
func fakeCgroupfs(t *testing.T) {
	ocg.TestMode = true
	t.Cleanup(func() { ocg.TestMode = false })
}

func TestReadUsageV1Files(t *testing.T) {
	fakeCgroupfs(t)
	mem, cpu := t.TempDir(), t.TempDir()
	writeFiles(t, mem, map[string]string{
		"memory.max_usage_in_bytes": "67108864\n",
		"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
	})
	writeFiles(t, cpu, map[string]string{"cpuacct.usage": "1500000000\n"})
	got, err := readUsageV1(mem, cpu)
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{MemoryPeakBytes: 64 << 20, CPUTime: 1500 * time.Millisecond, OOMKills: 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := readUsageV1("", cpu); err == nil {
		t.Error("readUsageV1 without a memory path: got nil error")
	}
}

func TestReadUsageV2Files(t *testing.T) {
	fakeCgroupfs(t)
	events := "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n"
	stat := "usage_usec 250000\nuser_usec 200000\nsystem_usec 50000\nnr_periods 0\n"
	tests := []struct {
		name  string
		files map[string]string
		want  Usage
	}{
		{"memory.peak", map[string]string{"memory.peak": "1000\n", "memory.current": "10\n", "memory.events": events, "cpu.stat": stat},
			Usage{MemoryPeakBytes: 1000, CPUTime: 250 * time.Millisecond, OOMKills: 1}},
		{"no memory.peak before 5.19", map[string]string{"memory.current": "10\n", "memory.events": events, "cpu.stat": stat},
			Usage{MemoryPeakBytes: 10, CPUTime: 250 * time.Millisecond, OOMKills: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			got, err := readUsageV2(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := readUsageV2(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty dir: got %v, want ErrNotExist", err)
	}
}

func TestVersionAndControllers(t *testing.T) {
	v, err := Version()
	testutil.Require(t, err == nil, fmt.Sprintf("no cgroup memory controller: %v", err))
	if v != 1 && v != 2 {
		t.Fatalf("Version() = %d", v)
	}
	cs, err := Controllers()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup v%d, controllers %v", v, cs)
	for _, want := range []string{"memory", "pids"} {
		if !slices.Contains(cs, want) {
			t.Errorf("Controllers() = %v, missing %s", cs, want)
		}
	}
}

// newCgroup creates a real cgroup with l applied (devices left alone) and
// destroys it when the test ends.
func newCgroup(t *testing.T, l Limits) ocg.Manager {
	t.Helper()
	testutil.RequiresRoot(t)
	r := l.Resources()
	r.SkipDevices = true
	m, err := manager.New(&ocg.Cgroup{Path: fmt.Sprintf("/forge-test-%d-%x", os.Getpid(), rand.Uint32()), Resources: r})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(-1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Destroy(); err != nil {
			t.Errorf("destroying cgroup: %v", err)
		}
	})
	if err := m.Set(r); err != nil {
		t.Fatal(err)
	}
	return m
}

// runIn starts python3 code, moves it into m before it does anything but
// start up (it waits for a byte on stdin), and waits for it.
func runIn(t *testing.T, m ocg.Manager, code string) error {
	t.Helper()
	py, err := exec.LookPath("python3")
	testutil.Require(t, err == nil, "python3 not on PATH")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", "import sys; sys.stdin.read(1)\n"+code)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	return cmd.Wait()
}

func TestReadUsageOOM(t *testing.T) {
	const limit = 64 << 20
	m := newCgroup(t, Limits{MemoryBytes: limit, CPUs: 1, Pids: 16})
	err := runIn(t, m, "b = b'x' * (200 << 20)")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("got %v, want the process to be killed", err)
	}
	// syscall.WaitStatus, not unix.WaitStatus (FIELD-NOTES).
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("got %v, want killed by SIGKILL", ee)
	}
	u, err := ReadUsage(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("usage %+v", u)
	if u.OOMKills < 1 {
		t.Errorf("OOMKills = %d, want >= 1", u.OOMKills)
	}
	if u.MemoryPeakBytes < limit/2 || u.MemoryPeakBytes > limit {
		t.Errorf("MemoryPeakBytes = %d, want between %d and %d", u.MemoryPeakBytes, limit/2, limit)
	}
}

func TestReadUsageCPU(t *testing.T) {
	m := newCgroup(t, Limits{MemoryBytes: 256 << 20, CPUs: 0.5, Pids: 16})
	start := time.Now()
	// Spin for one second of wall-clock time; the quota allows half of it.
	if err := runIn(t, m, "import time\nt = time.monotonic() + 1\nwhile time.monotonic() < t: pass"); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	u, err := ReadUsage(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("usage %+v over %v", u, wall)
	if u.CPUTime < 100*time.Millisecond || u.CPUTime > 800*time.Millisecond {
		t.Errorf("CPUTime = %v, want about 0.5 s (quota 0.5 CPUs for 1 s)", u.CPUTime)
	}
	if u.OOMKills != 0 {
		t.Errorf("OOMKills = %d, want 0", u.OOMKills)
	}
}

// TestResourcesApplied checks that Resources lands in the kernel's files as
// intended, swap included.
func TestResourcesApplied(t *testing.T) {
	m := newCgroup(t, Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 16})
	type file struct{ ctrl, name, want string }
	files := []file{
		{"memory", "memory.limit_in_bytes", "67108864"},
		{"memory", "memory.memsw.limit_in_bytes", "67108864"},
		{"cpu", "cpu.cfs_quota_us", "50000"},
		{"cpu", "cpu.cfs_period_us", "100000"},
		{"pids", "pids.max", "16"},
	}
	if ocg.IsCgroup2UnifiedMode() {
		files = []file{
			{"", "memory.max", "67108864"}, {"", "memory.swap.max", "0"},
			{"", "cpu.max", "50000 100000"}, {"", "pids.max", "16"},
		}
	}
	for _, f := range files {
		got, err := ocg.ReadFile(m.Path(f.ctrl), f.name)
		if err != nil {
			t.Errorf("%s: %v", f.name, err)
			continue
		}
		if got = strings.TrimSpace(got); got != f.want {
			t.Errorf("%s = %q, want %q", f.name, got, f.want)
		}
	}
}

func TestReadPidsLimitHits(t *testing.T) {
	fakeCgroupfs(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"pids.events": "max 3\n"})
	if n, err := readPidsLimitHits(dir); err != nil || n != 3 {
		t.Errorf("got %d, %v, want 3", n, err)
	}
	if _, err := readPidsLimitHits(""); err == nil {
		t.Error("no pids path: got nil error")
	}
}
