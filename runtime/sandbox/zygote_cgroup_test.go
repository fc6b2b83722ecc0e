package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
)

// unified reports whether this host's cgroups are pure v2 (the v2 guest,
// scripts/v2-guest.sh), not v1 or hybrid (this machine).
func unified() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// hostCgroup is the directory of pid's cgroup on the host: on v2 its one
// cgroup, on v1 the one of controller's hierarchy.
func hostCgroup(t testing.TB, pid int, controller string) string {
	t.Helper()
	for _, line := range strings.Split(readFile(fmt.Sprintf("/proc/%d/cgroup", pid)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if unified() && f[0] == "0" {
			return filepath.Join("/sys/fs/cgroup", f[2])
		}
		for _, c := range strings.Split(f[1], ",") {
			if !unified() && c == controller {
				return filepath.Join("/sys/fs/cgroup", controller, f[2])
			}
		}
	}
	t.Fatalf("no %s cgroup of pid %d in %q", controller, pid, readFile(fmt.Sprintf("/proc/%d/cgroup", pid)))
	return ""
}

// sandboxCgroupDir is where the cgroup of sandbox id would be (for the
// leak checks): /sys/fs/cgroup/forge/ID on v2, the pids hierarchy's on v1.
func sandboxCgroupDir(id string) string {
	if unified() {
		return "/sys/fs/cgroup/forge/" + id
	}
	return "/sys/fs/cgroup/pids/forge/" + id
}

// TestZygoteChildCgroup: the host makes each child a cgroup of its own
// (the fs2 manager on cgroup v2, where the v2 guest runs this) with the
// request's limits, and moves the child in before any user code: the
// sandbox's processes are there, pids.max stops a fork loop with the
// process-limit error, memory use is read back, memory.max ends in an OOM
// kill the result reports, and the cgroup goes with the sandbox.
func TestZygoteChildCgroup(t *testing.T) {
	rt, root := testenv.ZygoteRuntime(t)
	lim := cgroups.Limits{MemoryBytes: 96 << 20, CPUs: 1, Pids: 16}
	ctx := context.Background()
	sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	if ppid(t, sb.Pid()) == os.Getpid() {
		t.Fatalf("sandbox %s is no zygote child", sb.ID())
	}
	dir := hostCgroup(t, sb.Pid(), "pids")
	if filepath.Base(dir) != sb.ID() {
		t.Fatalf("the child's pid 1 is in cgroup %s, want its own (%s)", dir, sb.ID())
	}
	if !unified() {
		// Its own cgroup where its limits, usage and freezer are; its
		// template's in the hierarchies a sandbox sets nothing in, and in
		// devices, where the template's cgroup has a container's rules.
		for _, c := range []string{"memory", "cpu", "cpuacct", "pids", "freezer"} {
			if d := hostCgroup(t, sb.Pid(), c); filepath.Base(d) != sb.ID() {
				t.Errorf("the child's %s cgroup is %s, want its own", c, d)
			}
		}
		for _, c := range []string{"cpuset", "blkio", "devices"} {
			if d := hostCgroup(t, sb.Pid(), c); !strings.HasSuffix(d, sandbox.TemplateIDSuffix) {
				t.Errorf("the child's %s cgroup is %s, want its template's", c, d)
			}
		}
		rules := readFile(filepath.Join(hostCgroup(t, sb.Pid(), "devices"), "devices.list"))
		if strings.Contains(rules, "a *:* rwm") || !strings.Contains(rules, "c 1:3 rwm") {
			t.Errorf("the child's devices cgroup allows %q, want a container's rules (/dev/null, not all)", rules)
		}
	}
	mem := filepath.Join(dir, "memory.max")
	if !unified() {
		mem = filepath.Join(hostCgroup(t, sb.Pid(), "memory"), "memory.limit_in_bytes")
	}
	if got := strings.TrimSpace(readFile(mem)); got != strconv.Itoa(96<<20) {
		t.Errorf("%s of the child's cgroup: %q, want %d", mem, got, 96<<20)
	}
	if got := strings.TrimSpace(readFile(filepath.Join(dir, "pids.max"))); got != "16" {
		t.Errorf("pids.max of the child's cgroup: %q, want 16", got)
	}
	// The CPU limit, and on v1 memory+swap (no swap): as a container's.
	want := map[string]string{filepath.Join(dir, "cpu.max"): "100000 100000"}
	if !unified() {
		want = map[string]string{
			filepath.Join(hostCgroup(t, sb.Pid(), "cpu"), "cpu.cfs_quota_us"):               "100000",
			filepath.Join(hostCgroup(t, sb.Pid(), "cpu"), "cpu.cfs_period_us"):              "100000",
			filepath.Join(hostCgroup(t, sb.Pid(), "memory"), "memory.memsw.limit_in_bytes"): strconv.Itoa(96 << 20),
		}
	}
	for f, w := range want {
		if got := strings.TrimSpace(readFile(f)); got != w {
			t.Errorf("%s of the child's cgroup: %q, want %q", f, got, w)
		}
	}
	r, err := sb.Exec(ctx, `import os, time
b = bytearray(40 << 20)
for i in range(10000):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)`, sandbox.ExecOptions{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Error == nil || r.Error.Type != sandbox.ErrTypeProcessLimit {
		t.Errorf("a fork loop under pids.max 16: error %+v, want %s", r.Error, sandbox.ErrTypeProcessLimit)
	}
	if r.MemoryPeakBytes < 40<<20 {
		t.Errorf("memory peak read back %d, want at least the 40 MiB the code held", r.MemoryPeakBytes)
	}
	procs := strings.Fields(readFile(filepath.Join(dir, "cgroup.procs")))
	if len(procs) < 3 || len(procs) > 16 {
		t.Errorf("the child's cgroup holds %d processes, want its reaper, agent and forks, at most 16", len(procs))
	}
	u, err := sb.Usage()
	if err != nil || u.MemoryPeakBytes < 40<<20 {
		t.Errorf("Usage: %+v, %v; want a peak of at least 40 MiB", u, err)
	}
	r, err = sb.Exec(ctx, "x = []\nwhile True: x.append(bytearray(8 << 20))", sandbox.ExecOptions{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OOMKilled || r.Error == nil || r.Error.Type != sandbox.ErrTypeOutOfMemory {
		t.Errorf("allocating past memory.max 96m: oom_killed %v error %+v", r.OOMKilled, r.Error)
	}
	if err := sb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the child's cgroup %s is left after Destroy (%v)", dir, err)
	}
}
