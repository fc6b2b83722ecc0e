package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/sandbox"
)

// TestQuotaCountedWhereSessionsAreMade: ten concurrent creates of one
// owner with a quota of 3, who has 1 session on disk already, let exactly 2
// through to a sandbox start, whatever the order; the others get a
// *QuotaError. Another owner's sessions do not count. Creates whose first
// sandbox failed leave nothing that counts.
func TestQuotaCountedWhereSessionsAreMade(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	errNoSandbox := errors.New("no sandbox in this test")
	m, err := NewManager(Options{Dir: t.TempDir(), Start: func(ctx context.Context, image string) (*sandbox.Sandbox, error) {
		started.Add(1)
		<-release
		return nil, errNoSandbox
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	for owner, ids := range map[string][]string{"o": {"old"}, "other": {"x1", "x2", "x3", "x4", "x5"}} {
		for _, id := range ids {
			dir := m.dir(key{owner, id})
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := writeMeta(dir, &Meta{ID: id, Owner: owner, Status: Hibernated}); err != nil {
				t.Fatal(err)
			}
		}
	}

	ctx := WithQuota(context.Background(), 3)
	const n = 10
	errs := make([]error, n)
	var refused atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Call(ctx, "o", fmt.Sprintf("new%d", i), "img", true, nil)
			if errors.Is(errs[i], ErrQuota) {
				refused.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for started.Load()+refused.Load() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling, with the deadline above
	}
	if got := started.Load(); got != 2 {
		t.Errorf("%d creates reached a sandbox start, want 2 (quota 3, 1 session on disk)", got)
	}
	close(release)
	wg.Wait()
	for i, err := range errs {
		var q *QuotaError
		switch {
		case errors.Is(err, errNoSandbox):
		case errors.As(err, &q):
			if q.Max != 3 || q.Owner != "o" {
				t.Errorf("create %d: %+v, want owner o, max 3", i, q)
			}
		default:
			t.Errorf("create %d: %v, want the start's error or a *QuotaError", i, err)
		}
	}
	if refused.Load() != n-2 {
		t.Errorf("%d creates refused, want %d", refused.Load(), n-2)
	}

	// The failed creates are gone: the owner has its one session again and
	// may make up to two more.
	if got, err := m.countOwned(key{"o", ""}); err != nil || got != 1 {
		t.Errorf("after failed creates the owner has %d sessions (%v), want 1", got, err)
	}
	for i := range n {
		if _, err := os.Stat(m.dir(key{"o", fmt.Sprintf("new%d", i)})); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the directory of failed create new%d: %v, want none", i, err)
		}
	}
	if _, err := m.Call(ctx, "o", "again", "img", true, nil); !errors.Is(err, errNoSandbox) {
		t.Errorf("a create after the failed ones: %v, want it to reach the start", err)
	}
	// Without a quota nothing is counted.
	if _, err := m.Call(context.Background(), "o", "unlimited", "img", true, nil); !errors.Is(err, errNoSandbox) {
		t.Errorf("a create without a quota: %v, want it to reach the start", err)
	}
}
