package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
)

// A per-owner quota travels with the call that may create a session, so
// that the count and the creation happen here, under one lock: a face that
// counted first (List) and created afterwards let concurrent calls of one
// owner all see room for one more.

type quotaKey struct{}

// WithQuota returns ctx with a cap of max sessions for the owner of the
// calls made with it: Call with create, and Fork, refuse a new session with
// a *QuotaError when the owner has max already. max <= 0: no cap.
func WithQuota(ctx context.Context, max int) context.Context {
	return context.WithValue(ctx, quotaKey{}, max)
}

func quotaOf(ctx context.Context) int {
	n, _ := ctx.Value(quotaKey{}).(int)
	return n
}

// admitNew holds m.creating while a new session of k.owner is counted and
// registered, when ctx carries a quota: unlock must be called after the new
// session is in m.sessions (or its creation failed). It refuses the
// session when the owner is at its quota.
func (m *Manager) admitNew(ctx context.Context, k key) (unlock func(), err error) {
	max := quotaOf(ctx)
	if max <= 0 {
		return func() {}, nil
	}
	m.creating.Lock()
	n, err := m.countOwned(k)
	if err != nil {
		m.creating.Unlock()
		return nil, err
	}
	if n >= max {
		m.creating.Unlock()
		return nil, &QuotaError{Owner: k.owner, Max: max}
	}
	return m.creating.Unlock, nil
}

// countOwned counts k.owner's sessions other than k itself: those of this
// process (being created included) and those on disk with metadata
// (hibernated, lost, or held by another forge process), as List shows them.
func (m *Manager) countOwned(k key) (int, error) {
	seen := map[string]bool{}
	m.mu.Lock()
	for o := range m.sessions {
		if o.owner == k.owner && o.id != k.id {
			seen[o.id] = true
		}
	}
	m.mu.Unlock()
	dir := m.ownerDir(k.owner)
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || id == k.id || seen[id] || ValidID(id) != nil {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, id, "meta.json")); err == nil {
			seen[id] = true
		}
	}
	return len(seen), nil
}

// discardFreshLocked removes a session this call created whose first
// sandbox did not start: an id that never ran anything must not hold a
// place in its owner's quota (nor a directory) afterwards.
func (m *Manager) discardFreshLocked(s *Session) {
	if s.sb != nil {
		_ = s.sb.Destroy()
		s.setSandbox(nil)
	}
	os.RemoveAll(s.dir())
	m.release(s)
	m.opts.OnEvent("session.destroy", s.meta.Owner, s.meta.ID)
}
