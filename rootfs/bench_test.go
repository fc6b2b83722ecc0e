package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/test/testutil"
)

// BenchmarkImportPresent: Pull of an image that is already in the store.
func BenchmarkImportPresent(b *testing.B) {
	s, layout := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Pull(ctx, "oci:"+layout); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireRelease: the first holder mounts, the last unmounts, so
// every iteration is a full mount and unmount of the shared rootfs.
func BenchmarkAcquireRelease(b *testing.B) {
	s, _ := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		r, err := s.Acquire(ctx, "forge/test:1")
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireShared: Acquire and Release while another holder keeps
// the mount: the cost every sandbox pays after the first.
func BenchmarkAcquireShared(b *testing.B) {
	s, _ := benchStore(b)
	ctx := context.Background()
	keep, err := s.Acquire(ctx, "forge/test:1")
	if err != nil {
		b.Fatal(err)
	}
	defer keep.Release()
	for b.Loop() {
		r, err := s.Acquire(ctx, "forge/test:1")
		if err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
}

// BenchmarkOverlayMountFloor: a hand-made read-only overlay mount and
// unmount of two plain directories, the floor for AcquireRelease.
func BenchmarkOverlayMountFloor(b *testing.B) {
	testutil.RequiresRoot(b)
	dir := b.TempDir()
	lower1, lower2, mnt := filepath.Join(dir, "l1"), filepath.Join(dir, "l2"), filepath.Join(dir, "mnt")
	for _, d := range []string{lower1, lower2, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	mustWrite(b, filepath.Join(lower2, "etc/hello"), "x")
	for b.Loop() {
		if err := mountOverlay(mnt, lower1, lower2); err != nil {
			b.Fatal(err)
		}
		if err := unix.Unmount(mnt, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// benchStore is a fresh store holding a small test image, forge/test:1.
func benchStore(b *testing.B) (*Store, string) {
	b.Helper()
	layout := writeTestLayout(b, "forge/test:1", "hello\n")
	s := openStore(b, newStateDir(b))
	if _, err := s.Pull(context.Background(), "oci:"+layout); err != nil {
		b.Fatal(err)
	}
	return s, layout
}
