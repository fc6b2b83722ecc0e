package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, v := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestReadUserLimits(t *testing.T) {
	proc := t.TempDir()
	writeFiles(t, proc, map[string]string{
		"sys/user/max_inotify_instances":    "128\n",
		"sys/user/max_inotify_watches":      "192530\n",
		"sys/user/max_user_namespaces":      "96363\n",
		"sys/user/max_fanotify_groups":      "128\n",
		"sys/fs/inotify/max_user_instances": "100\n", // differs: the smaller wins
		"sys/fs/inotify/max_user_watches":   "192530\n",
		"sys/fs/inotify/max_queued_events":  "16384\n", // per instance, not per user
		"sys/user/README":                   "not a limit",
	})
	got, err := ReadUserLimits(proc)
	if err != nil {
		t.Fatal(err)
	}
	want := UserLimits{"max_inotify_instances": 100, "max_inotify_watches": 192530, "max_user_namespaces": 96363, "max_fanotify_groups": 128}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
	if _, err := ReadUserLimits(t.TempDir()); err == nil {
		t.Error("a /proc without sys/user: got no error")
	}
}

func TestBudgetDivide(t *testing.T) {
	host := UserLimits{"max_inotify_instances": 128, "max_inotify_watches": 192530, "max_fanotify_groups": 128,
		"max_user_namespaces": 96363, "max_mnt_namespaces": 96363}
	tests := []struct {
		name string
		b    Budget
		want UserLimits
	}{
		{"22 sandboxes, a quarter kept", Budget{Sandboxes: 22, Reserve: 0.25},
			UserLimits{"max_inotify_instances": 4, "max_inotify_watches": 6563, "max_fanotify_groups": 4, "max_user_namespaces": 0, "max_mnt_namespaces": 0}},
		{"more sandboxes than instances: at least 1", Budget{Sandboxes: 1000, Reserve: 0.5},
			UserLimits{"max_inotify_instances": 1, "max_inotify_watches": 96, "max_fanotify_groups": 1, "max_user_namespaces": 0, "max_mnt_namespaces": 0}},
		{"nested namespaces for a zygote", Budget{Sandboxes: 10, NestedNamespaces: 4},
			UserLimits{"max_inotify_instances": 12, "max_inotify_watches": 19253, "max_fanotify_groups": 12, "max_user_namespaces": 4, "max_mnt_namespaces": 4}},
		{"no number given: the default", Budget{},
			UserLimits{"max_inotify_instances": 4, "max_inotify_watches": 6016, "max_fanotify_groups": 4, "max_user_namespaces": 0, "max_mnt_namespaces": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.b.Divide(host)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
			// Together the sandboxes stay within what the reserve leaves
			// (unless the floor of 1 each is more).
			n := int64(tc.b.Sandboxes)
			if n == 0 {
				n = DefaultBudgetSandboxes
			}
			for name, v := range got {
				if left := float64(host[name]) * (1 - tc.b.Reserve); v > 1 && float64(n*v) > left {
					t.Errorf("%s: %d sandboxes x %d exceed the host's %d less the reserve", name, n, v, host[name])
				}
			}
		})
	}
	for _, bad := range []Budget{{Sandboxes: -1}, {Reserve: 1}, {Reserve: -0.1}, {NestedNamespaces: -1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v): got nil, want an error", bad)
		}
	}
}

func TestWithUserLimits(t *testing.T) {
	s, err := NewSpec(WithUserLimits(UserLimits{"max_inotify_instances": 4, "max_user_namespaces": 0}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"user.max_inotify_instances": "4", "user.max_user_namespaces": "0"}
	if d := cmp.Diff(want, s.Linux.Sysctl); d != "" {
		t.Errorf("sysctls (-want +got)\n%s", d)
	}
	if _, err := NewSpec(WithUserLimits(UserLimits{"../kernel/x": 1})); err == nil {
		t.Error("a name with a path: got no error")
	}
}

// The v2 path cannot run on this hybrid host: it runs on a fake root.
func TestParentCgroupV2(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":           "cpuset cpu io memory hugetlb pids rdma misc\n",
		"cgroup.subtree_control":       "cpu\n",
		"forge/cgroup.subtree_control": "",
		"forge/memory.max":             "max\n",
		"forge/pids.max":               "max\n",
	})
	pc := parentCgroup{root: root, name: "forge"}
	if !pc.unified() {
		t.Fatal("a root with cgroup.controllers: got v1, want v2")
	}
	if got, err := pc.read(); err != nil || got != (ParentLimits{MemoryBytes: -1, Pids: -1}) {
		t.Errorf("before: got %+v %v, want unlimited (-1)", got, err)
	}
	if err := pc.apply(ParentLimits{MemoryBytes: 3 << 30, Pids: 2048}); err != nil {
		t.Fatal(err)
	}
	// A real cgroupfs turns "+memory +pids" into the enabled list; the fake
	// keeps what was written, the controllers that were missing.
	for file, want := range map[string]string{
		"cgroup.subtree_control":       "+memory +pids",
		"forge/cgroup.subtree_control": "+memory +pids",
		"forge/memory.max":             "3221225472",
		"forge/pids.max":               "2048",
	} {
		if got := readTrim(t, filepath.Join(root, file)); got != want {
			t.Errorf("%s: got %q, want %q", file, got, want)
		}
	}
	if got, err := pc.read(); err != nil || got != (ParentLimits{MemoryBytes: 3 << 30, Pids: 2048}) {
		t.Errorf("after: got %+v %v", got, err)
	}
	// Controllers already enabled are not written again.
	writeFiles(t, root, map[string]string{"cgroup.subtree_control": "cpu memory pids\n"})
	if err := pc.apply(ParentLimits{Pids: 10}); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(root, "cgroup.subtree_control")); got != "cpu memory pids" {
		t.Errorf("root subtree_control rewritten: %q", got)
	}
	if got := readTrim(t, filepath.Join(root, "forge/memory.max")); got != "3221225472" {
		t.Errorf("a zero memory limit changed memory.max to %q; want it left alone", got)
	}
}

func TestParentCgroupV1Layout(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n", "pids/cgroup.procs": ""})
	pc := parentCgroup{root: root, name: "forge"}
	if pc.unified() {
		t.Fatal("a hybrid root: got v2, want v1")
	}
	if err := pc.apply(ParentLimits{MemoryBytes: 1 << 30, Pids: 99}); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(root, "memory/forge/memory.limit_in_bytes")); got != "1073741824" {
		t.Errorf("memory.limit_in_bytes: got %q", got)
	}
	if got := readTrim(t, filepath.Join(root, "pids/forge/pids.max")); got != "99" {
		t.Errorf("pids.max: got %q", got)
	}
}

// TestParentCgroupShared: a forge process whose parent cgroup has another
// live forge process's sandboxes below it raises the limits but never
// lowers them; alone, it sets them as asked.
func TestParentCgroupShared(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"memory/forge/memory.limit_in_bytes": "17179869184\n",
		"pids/forge/pids.max":                "642000\n",
	})
	pc := parentCgroup{root: root, name: "forge"}
	if pid := pc.other(os.Getpid()); pid != 0 {
		t.Fatalf("no sandboxes below: other = %d, want 0", pid)
	}
	// The sandbox of a live forge process (this test's parent, go test),
	// and one of a process long gone.
	writeFiles(t, root, map[string]string{
		fmt.Sprintf("pids/forge/%d-0123456789ab/pids.max", os.Getppid()): "128\n",
		"pids/forge/2147483646-0123456789ab/pids.max":                    "128\n",
	})
	if pid := pc.other(os.Getpid()); pid != os.Getppid() {
		t.Fatalf("other = %d, want the live process %d", pid, os.Getppid())
	}
	if pid := pc.other(os.Getppid()); pid != 0 {
		t.Errorf("other than the live one: %d, want 0 (the other is gone)", pid)
	}
	low := ParentLimits{MemoryBytes: 1 << 30, Pids: 2560}
	if got := pc.notLower(low); got != (ParentLimits{}) {
		t.Errorf("lower limits: %+v, want none written", got)
	}
	high := ParentLimits{MemoryBytes: 32 << 30, Pids: 1 << 20}
	if got := pc.notLower(high); got != high {
		t.Errorf("higher limits: %+v, want %+v", got, high)
	}
	writeFiles(t, root, map[string]string{"pids/forge/pids.max": "max\n"})
	if got := pc.notLower(high); got.Pids != 0 {
		t.Errorf("under an unlimited pids.max: %+v, want pids left alone", got)
	}
}
