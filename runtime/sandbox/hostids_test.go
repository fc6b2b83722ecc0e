package sandbox_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// TestHostIDs: two live sandboxes map onto blocks of their own, inside the
// reserved range and outside every subordinate range, their processes run
// as their own host uid, and a block is given back once its sandbox is
// destroyed.
func TestHostIDs(t *testing.T) {
	rt, _ := setup(t)
	a := start(t, sandbox.Config{Limits: defaultLimits})
	b := start(t, sandbox.Config{Limits: defaultLimits})
	if a.IDs().Overlaps(b.IDs()) || a.HostUID() == b.HostUID() {
		t.Fatalf("sandboxes share host ids: %s and %s", a.IDs(), b.IDs())
	}
	reserved := rt.IDs().Reserved()
	subs := subordinateRanges(t)
	for _, sb := range []*sandbox.Sandbox{a, b} {
		if !reserved.Contains(sb.IDs().Start) || !reserved.Contains(sb.IDs().Start+sb.IDs().Size-1) {
			t.Errorf("block %s outside the reserved range %s", sb.IDs(), reserved)
		}
		for _, r := range subs {
			if r.Overlaps(sb.IDs()) {
				t.Errorf("block %s overlaps the subordinate range %s", sb.IDs(), r)
			}
		}
		if uid, gid := procIDs(t, sb.Pid()); uid != sb.HostUID() || gid != sb.HostGID() {
			t.Errorf("sandbox %s: init runs as %d:%d, want %d:%d", sb.ID(), uid, gid, sb.HostUID(), sb.HostGID())
		}
		if own, err := sb.OwnsProcess(sb.Pid()); !own || err != nil {
			t.Errorf("OwnsProcess(its init) = %v, %v", own, err)
		}
		if own, err := sb.OwnsProcess(os.Getpid()); own || err != nil {
			t.Errorf("OwnsProcess(the test) = %v, %v", own, err)
		}
	}
	if own, _ := a.OwnsProcess(b.Pid()); own {
		t.Errorf("sandbox %s owns %s's init", a.ID(), b.ID())
	}
	block := a.IDs()
	if !leased(t, block) {
		t.Fatalf("no live lease of %s", block)
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if rt.Mode() == sandbox.ModeZygote {
		// The block is the template's: given back to it, the next child gets it.
		if c := start(t, sandbox.Config{Limits: defaultLimits}); c.IDs() != block {
			t.Errorf("the next child got %s, want the block %s its template got back", c.IDs(), block)
		}
		return
	}
	if leased(t, block) {
		t.Errorf("lease of %s still live after Destroy", block)
	}
}

func leased(t *testing.T, r idmap.Range) bool {
	t.Helper()
	infos, err := idmap.Leases(testutil.StateDirPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range infos {
		if l.Range == r && l.Pid == os.Getpid() {
			return true
		}
	}
	return false
}

func subordinateRanges(t *testing.T) []idmap.Range {
	t.Helper()
	var out []idmap.Range
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			p := strings.Split(line, ":")
			if len(p) != 3 {
				continue
			}
			s, _ := strconv.ParseUint(p[1], 10, 32)
			c, _ := strconv.ParseUint(p[2], 10, 32)
			out = append(out, idmap.Range{Start: uint32(s), Size: uint32(c)})
		}
	}
	return out
}

func procIDs(t *testing.T, pid int) (uid, gid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			switch f[0] {
			case "Uid:":
				uid, _ = strconv.Atoi(f[1])
			case "Gid:":
				gid, _ = strconv.Atoi(f[1])
			}
		}
	}
	return uid, gid
}

func TestInCgroup(t *testing.T) {
	const cg = "/forge/12-abc"
	v1 := "12:pids:/forge/12-abc\n11:memory:/forge/12-abc\n0::/\n"
	tests := []struct {
		name    string
		content string
		unified bool
		want    bool
	}{
		{"v1 in", v1, false, true},
		{"v1 below", "3:cpu,pids:/forge/12-abc/sub\n", false, true},
		{"v1 other sandbox", "12:pids:/forge/12-abcd\n", false, false},
		{"v1 outside", "12:pids:/user.slice\n11:memory:/forge/12-abc\n", false, false},
		{"v1 no pids line", "11:memory:/forge/12-abc\n", false, false},
		{"hybrid: unified line is not the one", "12:pids:/\n0::/forge/12-abc\n", false, false},
		{"v2 in", "0::/forge/12-abc\n", true, true},
		{"v2 outside", "0::/forge\n", true, false},
		{"empty", "", true, false},
	}
	for _, tc := range tests {
		if got := sandbox.InCgroup(tc.content, cg, tc.unified); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLeftoversFindsLeakedLease: the check every sandbox test binary runs
// at exit fails on a host id lease that nothing gave back.
func TestLeftoversFindsLeakedLease(t *testing.T) {
	rt, _ := setup(t)
	l, err := rt.IDs().Allocate()
	if err != nil {
		t.Fatal(err)
	}
	err = testenv.Leftovers(nil, testutil.StateDirPath())
	if err == nil || !strings.Contains(err.Error(), "host id lease "+l.Range().String()) {
		t.Errorf("Leftovers with a leaked lease: got %v, want it named", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Leftovers(nil, testutil.StateDirPath()); err != nil {
		t.Errorf("after the release: %v", err)
	}
}
