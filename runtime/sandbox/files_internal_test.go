package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/test/testutil"
)

// TestOpenFilesReach: with CAP_SYS_RESOURCE forge may raise its descriptor
// limit past the hard one, up to the kernel's fs.nr_open, and asks no more
// than it needs; without (root on this VM), the hard limit is as far as
// it goes.
func TestOpenFilesReach(t *testing.T) {
	testutil.RequiresRoot(t)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "nr_open")
	if err := os.WriteFile(f, []byte("50000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := nrOpenFile
	nrOpenFile = f
	t.Cleanup(func() { nrOpenFile = old })
	need := OpenFilesFor(10000)
	if need != 10000*FilesPerSandbox+filesBase {
		t.Fatalf("OpenFilesFor(10000) = %d", need)
	}
	if got, want := OpenFilesReach(lim.Max+need), lim.Max+need; mayRaiseHardLimits() && got != want {
		t.Errorf("past the hard limit %d with CAP_SYS_RESOURCE: reach %d, want %d (up to fs.nr_open)", lim.Max, got, want)
	} else if !mayRaiseHardLimits() && got != lim.Max {
		t.Errorf("past the hard limit %d without CAP_SYS_RESOURCE: reach %d, want the hard limit", lim.Max, got)
	}
	if err := os.WriteFile(f, []byte("1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := OpenFilesReach(lim.Max + need); got != lim.Max {
		t.Errorf("fs.nr_open below the hard limit: reach %d, want the hard limit %d", got, lim.Max)
	}
	if got := OpenFilesReach(1); got != lim.Cur {
		t.Errorf("needing 1: reach %d, want the current limit %d (never lowered)", got, lim.Cur)
	}
}
