package sandbox_test

import (
	"strings"
	"testing"

	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// TestRootlessZygoteSlots: rootless, a template's slots are cut until two
// templates fit in the user's range beside a few containers, and zygote
// mode cannot run (sandboxes start as containers), saying why and what to
// add, without a range or with one too small for a template.
func TestRootlessZygoteSlots(t *testing.T) {
	useradd := idmap.Range{Start: 1, Size: 65533} // as sandbox.RootlessIDs gives useradd's 65536
	for _, c := range []struct {
		name  string
		ids   idmap.Range
		block uint32
		asked int
		want  int
		err   string
	}{
		{"useradd's range, the default slots", useradd, 1024, 32, 27, ""},
		{"fewer asked", useradd, 1024, 4, 4, ""},
		{"smaller blocks", useradd, 256, 32, 32, ""},
		{"no range", idmap.Range{}, 1, 32, 0, "needs a subordinate id range"},
		{"a range of 5 blocks", idmap.Range{Start: 1, Size: 5 * 1024}, 1024, 32, 0, "too few for a template"},
		{"the smallest that fits", idmap.Range{Start: 1, Size: 6 * 1024}, 1024, 32, 1, ""},
	} {
		got, err := sandbox.RootlessZygoteSlots(c.ids, c.block, c.asked)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "/etc/sub")):
			t.Errorf("%s: %d, %v; want an error saying %q and what to add to /etc/subuid and /etc/subgid", c.name, got, err, c.err)
		}
		if got > 0 && 2*(got+1) > int(c.ids.Size/c.block) {
			t.Errorf("%s: two templates of %d slots do not fit in %d blocks", c.name, got, c.ids.Size/c.block)
		}
	}
}
