package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true}, {"s-0123abcd", true}, {"A_b-9", true},
		{"", false}, {"../x", false}, {"a/b", false}, {"a b", false}, {string(make([]byte, 65)), false},
	} {
		if err := ValidID(tc.id); (err == nil) != tc.ok {
			t.Errorf("ValidID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

// holdLock takes the session's lock the way another forge process would,
// with meta.json saying status.
func holdLock(t *testing.T, dir string, status Status) *os.File {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeMeta(dir, &Meta{ID: filepath.Base(dir), Status: status, OwnerPid: 4242}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSessionOwnedElsewhereIsBusy(t *testing.T) {
	m, err := NewManager(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	f := holdLock(t, m.dir("taken"), Active)
	defer f.Close()
	_, err = m.Call(context.Background(), "taken", "img", true, nil)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("got %v, want ErrBusy naming the owner", err)
	}
}

func TestWaitsForHibernation(t *testing.T) {
	m, err := NewManager(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	dir := m.dir("sleepy")
	f := holdLock(t, dir, Hibernating)
	go func() {
		time.Sleep(300 * time.Millisecond)
		writeMeta(dir, &Meta{ID: "sleepy", Status: Hibernated})
		f.Close()
	}()
	start := time.Now()
	lock, err := m.lock(context.Background(), dir, "sleepy")
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	defer lock.Close()
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("got the lock after %s, before the other process finished hibernating", el)
	}
	meta, err := readMeta(dir)
	if err != nil || meta.Status != Hibernated {
		t.Errorf("meta after waiting: %+v, %v", meta, err)
	}
}

func TestCopyRefusesToFollowLinks(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("a"), 0o644)
	os.Symlink(secret, filepath.Join(src, "link"))
	os.Symlink(filepath.Dir(secret), filepath.Join(src, "dirlink"))
	if err := copyOut(src, dst, 1<<20); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != secret {
		t.Errorf("symlink not copied as a link: %q %v", target, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(b) != "a" {
		t.Errorf("a.txt = %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "dirlink")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("a symlinked directory must be copied as a link, not descended: %v %v", fi, err)
	}
	big := t.TempDir()
	os.WriteFile(filepath.Join(big, "f"), make([]byte, 2<<20), 0o644)
	if err := copyOut(big, filepath.Join(t.TempDir(), "o"), 1<<20); err == nil {
		t.Error("copyOut past its limit succeeded")
	}
}
