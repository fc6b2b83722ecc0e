package rootfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testutil"
	"golang.org/x/sys/unix"
)

// TestOpenWaitsForSamePid: a forge process with this pid in another pid
// namespace (pid 1 of the old container of a force-deleted Kubernetes pod)
// still holds the state dir's run/<pid>: Open waits for it to exit instead
// of sharing run/<pid>, then cleans what it left.
func TestOpenWaitsForSamePid(t *testing.T) {
	testutil.RequiresRoot(t)
	stateDir := newStateDir(t)
	run := filepath.Join(stateDir, "run")
	pid := strconv.Itoa(os.Getpid())
	old := filepath.Join(run, pid, "rootfs", "left-by-the-old-process")
	if err := os.MkdirAll(old, 0o711); err != nil {
		t.Fatal(err)
	}
	// The other process's lock: a flock on another open file description
	// conflicts even within one process, as across namespaces.
	other, err := os.OpenFile(filepath.Join(run, pid+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := unix.Flock(int(other.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if s, err := Open(ctx, Options{StateDir: stateDir}); err == nil {
		s.Close()
		t.Fatal("Open shared run/<pid> with a live process holding it, want it to wait")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open: %v, want a wait that ends with the context", err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("the waiting Open touched the holder's run dir: %v", err)
	}

	other.Close() // the old process exits
	s := openStore(t, stateDir)
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead holder's run dir content is still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(s.runDir, "owner")); err != nil {
		t.Errorf("run dir not set up after cleaning: %v", err)
	}
}
