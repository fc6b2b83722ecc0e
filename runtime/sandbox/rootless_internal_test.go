package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/runtime/idmap"
)

// RootlessIDs cuts the user's mapped range into blocks that cover the
// sandbox uid and skips the overflow id, which every unmapped host process
// shows in forge's /proc.
func TestRootlessIDs(t *testing.T) {
	for _, tc := range []struct {
		uidMap     string
		block, uid uint32
		want       idmap.Range
		wantBlock  uint32
		err        string
	}{
		{"0 1001 1\n1 165536 65536\n", 65536, 1000, idmap.Range{Start: 1, Size: overflowID - 1}, RootlessBlockSize, ""},
		{"0 1001 1\n1 165536 65536\n", 2000, 1999, idmap.Range{Start: 1, Size: overflowID - 1}, 2000, ""},
		{"0 1001 1\n1 165536 65536\n", 512, 100, idmap.Range{Start: 1, Size: overflowID - 1}, 512, ""},
		{"0 1001 1\n1 100000 3000\n", 65536, 1000, idmap.Range{Start: 1, Size: 3000}, RootlessBlockSize, ""},
		{"0 1001 1\n1 100000 500\n", 65536, 1000, idmap.Range{}, 0, "holds no block of 1024"},
		{"0 1001 1\n", 65536, 1000, idmap.Range{}, 1, ""},
	} {
		proc := t.TempDir()
		os.MkdirAll(filepath.Join(proc, "self"), 0o755)
		os.WriteFile(filepath.Join(proc, "self", "uid_map"), []byte(tc.uidMap), 0o644)
		r, block, err := RootlessIDs(proc, tc.block, tc.uid)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: got %v, want an error saying %q", tc.uidMap, err, tc.err)
			}
			continue
		}
		if err != nil || r != tc.want || block != tc.wantBlock {
			t.Errorf("%q block %d: got %v/%d %v, want %v/%d", tc.uidMap, tc.block, r, block, err, tc.want, tc.wantBlock)
		}
	}
}

// FindDelegated takes the cgroup this process runs in (or the parent of
// its supervisor leaf) when the controllers the limits need are there, and
// says what is missing otherwise. The tree is fake (the test runs as root,
// so every file is writable: the real check runs in the v2 guest,
// test/rootless TestRootlessDelegatedCgroup).
func TestFindDelegated(t *testing.T) {
	for _, tc := range []struct {
		name, own, controllers string
		v1                     bool
		want                   Delegation
		err                    string
	}{
		{name: "service", own: "/user.slice/forge.service", controllers: "cpuset cpu io memory pids", want: Delegation{Root: "/user.slice/forge.service", Move: true}},
		{name: "supervisor leaf", own: "/user.slice/forge.service/supervisor", controllers: "cpu memory pids", want: Delegation{Root: "/user.slice/forge.service"}},
		{name: "no cpu", own: "/user.slice/forge.service", controllers: "memory pids", err: "lacks the controllers cpu"},
		{name: "root cgroup", own: "/", controllers: "cpu memory pids", err: "runs in the root cgroup"},
		{name: "cgroup v1", own: "/user.slice", v1: true, err: "is not a cgroup v2 tree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			os.MkdirAll(filepath.Join(proc, "self"), 0o755)
			os.WriteFile(filepath.Join(proc, "self", "cgroup"), []byte("0::"+tc.own+"\n"), 0o644)
			if !tc.v1 {
				os.WriteFile(filepath.Join(cg, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
			}
			for _, d := range []string{tc.own, filepath.Dir(tc.own)} {
				if tc.v1 && d == "/" {
					continue
				}
				os.MkdirAll(filepath.Join(cg, d), 0o755)
				for _, f := range []string{"cgroup.procs", "cgroup.subtree_control"} {
					os.WriteFile(filepath.Join(cg, d, f), nil, 0o644)
				}
				os.WriteFile(filepath.Join(cg, d, "cgroup.controllers"), []byte(tc.controllers+"\n"), 0o644)
			}
			d, err := FindDelegated(proc, cg)
			if tc.err != "" {
				if !errors.Is(err, ErrNoDelegation) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want ErrNoDelegation saying %q", d, err, tc.err)
				}
				return
			}
			if err != nil || d != tc.want {
				t.Fatalf("got %+v, %v; want %+v", d, err, tc.want)
			}
			// Prepare makes the supervisor leaf (when moving) and the
			// sandboxes' parent, and enables the controllers in both.
			os.WriteFile(filepath.Join(cg, d.Root, "cgroup.procs"), []byte("4242\n"), 0o644)
			os.MkdirAll(filepath.Join(cg, d.Root, "forge"), 0o755) // the kernel makes its files
			os.WriteFile(filepath.Join(cg, d.Root, "forge", "cgroup.subtree_control"), nil, 0o644)
			if err := d.Prepare(cg, "forge"); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(cg, d.Root, SupervisorCgroup, "cgroup.procs")); d.Move && string(b) != "4242" {
				t.Errorf("supervisor's cgroup.procs %q, want the process moved there", b)
			}
			for _, dir := range []string{d.Root, filepath.Join(d.Root, "forge")} {
				if b, _ := os.ReadFile(filepath.Join(cg, dir, "cgroup.subtree_control")); string(b) != "+memory +pids +cpu" {
					t.Errorf("%s cgroup.subtree_control %q, want the controllers enabled", dir, b)
				}
			}
		})
	}
}
