package session

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/runtime/sandbox"
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
	f := holdLock(t, m.dir(key{"local", "taken"}), Active)
	defer f.Close()
	_, err = m.Call(context.Background(), "local", "taken", "img", true, nil)
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
	dir := m.dir(key{"local", "sleepy"})
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

// TestOwnersAreSeparate: a session saved by one owner is invisible to
// another: not listed, and every call answers exactly as for an id that
// does not exist.
func TestOwnersAreSeparate(t *testing.T) {
	m, err := NewManager(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	dir := m.dir(key{"alice", "shared"})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeMeta(dir, &Meta{ID: "shared", Owner: "alice", Status: Hibernated}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if l, err := m.List(ctx, "alice"); err != nil || len(l) != 1 {
		t.Fatalf("alice lists %v, %v; want her one session", l, err)
	}
	if l, err := m.List(ctx, "bob"); err != nil || len(l) != 0 {
		t.Errorf("bob lists %v, %v; want nothing", l, err)
	}
	if _, err := m.State(ctx, "alice", "shared"); err != nil {
		t.Errorf("alice reads her state: %v", err)
	}
	calls := map[string]func(id string) error{
		"state":    func(id string) error { _, err := m.State(ctx, "bob", id); return err },
		"document": func(id string) error { _, err := m.Document(ctx, "bob", id, nil, "", false); return err },
		"destroy":  func(id string) error { return m.Destroy(ctx, "bob", id) },
		"call": func(id string) error {
			_, err := m.Call(ctx, "bob", id, "", false, func(*sandbox.Sandbox, *Meta) error { return nil })
			return err
		},
	}
	for name, f := range calls {
		theirs, missing := f("shared"), f("nosuch")
		if !errors.Is(theirs, ErrNotFound) || strings.ReplaceAll(theirs.Error(), "shared", "ID") != strings.ReplaceAll(missing.Error(), "nosuch", "ID") {
			t.Errorf("%s of another owner's session: got %v; want the error of a missing id (%v)", name, theirs, missing)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("bob's calls touched alice's session: %v", err)
	}
	if _, err := m.List(ctx, ""); !errors.Is(err, ErrNoOwner) {
		t.Errorf("List without an owner: got %v, want ErrNoOwner", err)
	}
}

// TestLegacySessionsAreLocal: a session an older forge saved directly in
// the sessions dir belongs to LocalOwner, and to nobody else.
func TestLegacySessionsAreLocal(t *testing.T) {
	root := t.TempDir()
	old := filepath.Join(root, "s-old")
	os.MkdirAll(old, 0o700)
	writeMeta(old, &Meta{ID: "s-old", Status: Hibernated})
	m, err := NewManager(Options{Dir: root, LocalOwner: "local"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	if l, _ := m.List(context.Background(), "local"); len(l) != 1 || l[0].ID != "s-old" {
		t.Errorf("local lists %+v; want s-old", l)
	}
	meta, err := m.State(context.Background(), "local", "s-old")
	if err != nil || meta.ID != "s-old" {
		t.Errorf("state of the old session: %+v, %v", meta, err)
	}
	other := "listener:127.0.0.1:8080"
	if l, _ := m.List(context.Background(), other); len(l) != 0 {
		t.Errorf("another principal lists %+v; want nothing", l)
	}
	if _, err := m.State(context.Background(), other, "s-old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another principal reads the old session: %v; want ErrNotFound", err)
	}
	// Another principal's directory is never listed as a local session.
	dir := m.dir(key{other, "theirs"})
	os.MkdirAll(dir, 0o700)
	writeMeta(dir, &Meta{ID: "theirs", Owner: other, Status: Hibernated})
	if l, _ := m.List(context.Background(), "local"); len(l) != 1 {
		t.Errorf("local lists %+v; want only s-old", l)
	}
	if l, _ := m.List(context.Background(), other); len(l) != 1 || l[0].ID != "theirs" {
		t.Errorf("%s lists %+v; want theirs", other, l)
	}
}

func TestNewIDIs128Bits(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewID()
		raw, err := hex.DecodeString(strings.TrimPrefix(id, "s-"))
		if err != nil || len(raw) < 16 || ValidID(id) != nil {
			t.Fatalf("NewID() = %q: want s- and at least 128 bits in hex, a valid id", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}
