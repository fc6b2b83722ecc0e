package sandbox

import (
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
