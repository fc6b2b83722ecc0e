package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testutil"
)

// Every user.* ucount limit of the host is set, to the runtime's share, in
// the sandbox's own user namespace.
func TestSandboxKernelBudgets(t *testing.T) {
	rt, _ := setup(t)
	host, err := sandbox.ReadUserLimits("/proc")
	if err != nil {
		t.Fatal(err)
	}
	budgets := rt.Budgets()
	if len(budgets) != len(host) {
		t.Errorf("budgets %v, want one for each host limit %v", budgets, host)
	}
	res := run(t, "import os, json\nprint(json.dumps({n: int(open('/proc/sys/user/' + n).read()) for n in os.listdir('/proc/sys/user')}))",
		10e9, defaultLimits)
	var inside sandbox.UserLimits
	if err := json.Unmarshal([]byte(res.Stdout), &inside); err != nil {
		t.Fatalf("inside the sandbox: %v (stdout %q, error %+v)", err, res.Stdout, res.Error)
	}
	if d := cmp.Diff(budgets, inside); d != "" {
		t.Errorf("/proc/sys/user inside the sandbox (-want +got)\n%s", d)
	}
	if v := inside["max_inotify_instances"]; v < 1 || v >= host["max_inotify_instances"] {
		t.Errorf("max_inotify_instances %d inside, want at least 1 and below the host's %d", v, host["max_inotify_instances"])
	}
}

// The runtime writes the parent cgroup's limits at start, and they bind the
// sandboxes below it: a pids limit of the parent under the sandbox's own
// stops a fork loop. The parent has a name of its own so that other test
// processes sharing the host's "forge" cgroup are not affected.
func TestParentCgroupLimits(t *testing.T) {
	testutil.RequiresRoot(t)
	_, rootfs := setup(t)
	name := fmt.Sprintf("forge-test-parent-%d", os.Getpid())
	t.Cleanup(func() {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
		dirs = append(dirs, "/sys/fs/cgroup/"+name)
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				t.Errorf("removing test cgroup: %v", err)
			}
		}
	})
	const memory, pids = 1 << 30, 12
	rt, err := sandbox.NewRuntime(context.Background(), sandbox.Options{StateDir: testutil.StateDirPath(),
		CgroupParent: name, Parent: sandbox.ParentLimits{MemoryBytes: memory, Pids: pids}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	memFile, pidsFile := "/sys/fs/cgroup/memory/"+name+"/memory.limit_in_bytes", "/sys/fs/cgroup/pids/"+name+"/pids.max"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		memFile, pidsFile = "/sys/fs/cgroup/"+name+"/memory.max", "/sys/fs/cgroup/"+name+"/pids.max"
	}
	for file, want := range map[string]int64{memFile: memory, pidsFile: pids} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); got != want {
			t.Errorf("%s: got %s, want %d", file, b, want)
		}
	}
	if got, err := sandbox.ReadParentLimits(name); err != nil || got != (sandbox.ParentLimits{MemoryBytes: memory, Pids: pids}) {
		t.Errorf("ReadParentLimits: got %+v %v", got, err)
	}

	sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: rootfs, Limits: cgroups.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	res, err := sb.Exec(context.Background(), `
import subprocess
ps, err = [], None
for _ in range(30):
    try:
        ps.append(subprocess.Popen(['sleep', '30']))
    except OSError as e:
        err = e.errno
        break
for p in ps:
    p.kill()
    p.wait()
[len(ps), err]`, sandbox.ExecOptions{Timeout: 20e9})
	if err != nil {
		t.Fatal(err)
	}
	var started, errno int
	if _, err := fmt.Sscanf(fmt.Sprint(res.Result), "[%d %d]", &started, &errno); err != nil || started >= pids || errno != int(unix.EAGAIN) {
		t.Errorf("30 processes under a parent pids.max of %d (the sandbox's own: 64): got [started, errno] %v (error %+v), want fewer than %d, then EAGAIN",
			pids, res.Result, res.Error, pids)
	}
	t.Logf("started %d processes, then errno %d", started, errno)
}
