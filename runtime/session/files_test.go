package session

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCopyFileRefusesSpecialFiles: a FIFO (or any non-regular file) where a regular file
// belongs is refused at once, without waiting for a writer.
func TestCopyFileRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := copyFile(fifo, filepath.Join(dir, "out"), 0o600, -1, 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		var fe *FileError
		if !errors.Is(err, ErrNotRegular) || !errors.As(err, &fe) || fe.Kind != "a FIFO" {
			t.Errorf("got %v, want a FileError of ErrNotRegular naming a FIFO", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("copyFile blocked on a FIFO")
	}
	if _, err := os.Lstat(filepath.Join(dir, "out")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused copy left its target: %v", err)
	}
	for _, special := range []string{"/dev/null", "/dev/zero", dir} {
		if _, err := copyFile(special, filepath.Join(t.TempDir(), "out"), 0o600, -1, -1); !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: got %v, want ErrNotRegular", special, err)
		}
	}
	link := filepath.Join(dir, "link")
	os.WriteFile(filepath.Join(dir, "real"), []byte("x"), 0o600)
	os.Symlink(filepath.Join(dir, "real"), link)
	if _, err := copyFile(link, filepath.Join(t.TempDir(), "out"), 0o600, -1, -1); !errors.Is(err, unix.ELOOP) {
		t.Errorf("symlink: got %v, want ELOOP", err)
	}
}

// TestCopyFileCapsSparseFile: a sparse file larger than the cap is refused from its size,
// before a byte is copied.
func TestCopyFileCapsSparseFile(t *testing.T) {
	dir := t.TempDir()
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out := filepath.Join(dir, "out")
	n, err := copyFile(sparse, out, 0o600, -1, 64<<20)
	if !errors.Is(err, ErrTooLarge) || n != 0 {
		t.Errorf("got %d bytes, %v; want ErrTooLarge and nothing copied", n, err)
	}
	if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused copy left its target: %v", err)
	}
	ws := t.TempDir()
	os.Rename(sparse, filepath.Join(ws, "big"))
	unix.Mkfifo(filepath.Join(ws, "fifo"), 0o600)
	if err := copyOut(ws, filepath.Join(t.TempDir(), "w"), 64<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("copyOut of a workspace with a sparse 1 GiB file: %v, want ErrTooLarge", err)
	}
}
