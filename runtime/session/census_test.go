package session

import (
	"context"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCounts: hibernated sessions are counted from the state dir by owner
// (legacy ones in the sessions dir are LocalOwner's), once per censusTTL
// unless this process changed one.
func TestCounts(t *testing.T) {
	m, err := NewManager(Options{Dir: t.TempDir(), LocalOwner: "local"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	write := func(owner, id string, st Status, metaOwner string) {
		t.Helper()
		dir := m.dir(key{owner, id})
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeMeta(dir, &Meta{ID: id, Owner: metaOwner, Status: st}); err != nil {
			t.Fatal(err)
		}
	}
	write("local", "s-old", Hibernated, "") // saved before owners existed
	write("local", "s-lost", Lost, "local")
	write("tenant:a", "one", Hibernated, "tenant:a")
	write("tenant:a", "two", Hibernated, "tenant:a")
	write("tenant:b", "three", Active, "tenant:b") // its process died: not hibernated
	want := map[string]Counts{"local": {Hibernated: 1}, "tenant:a": {Hibernated: 2}}
	if diff := cmp.Diff(want, m.Counts()); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
	write("tenant:b", "four", Hibernated, "tenant:b")
	if diff := cmp.Diff(want, m.Counts()); diff != "" {
		t.Errorf("Counts within censusTTL, read from the cache (-want +got):\n%s", diff)
	}
	m.census.invalidate() // as a hibernation, restore or removal in this process does
	want["tenant:b"] = Counts{Hibernated: 1}
	if diff := cmp.Diff(want, m.Counts()); diff != "" {
		t.Errorf("Counts after a change (-want +got):\n%s", diff)
	}
	if err := m.Destroy(context.Background(), "tenant:a", "one"); err != nil {
		t.Fatal(err)
	}
	want["tenant:a"] = Counts{Hibernated: 1}
	if diff := cmp.Diff(want, m.Counts()); diff != "" {
		t.Errorf("Counts after Destroy (-want +got):\n%s", diff)
	}
}
