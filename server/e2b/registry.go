package e2b

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/session"
)

// Sandbox is the record of one E2B sandbox: a forge session of Owner with
// what E2B adds (its access token, end time, template name, metadata).
// Records are kept in memory and in <state_dir>/e2b/<owner hash>/<id>.json
// (0600), so that a restarted forge keeps its sandboxes.
type Sandbox struct {
	ID        string `json:"id"`    // the session id
	Owner     string `json:"owner"` // engine.Principal.Tenant
	TokenHash string `json:"access_token_sha256"`
	// Template is the templateID the client asked for; Image the forge
	// image or environment name it runs ("" = images.default).
	Template string            `json:"template"`
	Image    string            `json:"image"`
	Created  time.Time         `json:"created"`
	EndAt    time.Time         `json:"end_at"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// EnvVars are create's envVars: the environment of every run and
	// command of the sandbox (a call's own envs on top).
	EnvVars map[string]string `json:"env_vars,omitempty"`
	// Paused: hibernated by pause, until connect or the next use.
	Paused bool `json:"paused,omitempty"`
	// Executions counts /execute calls (number_of_executions).
	Executions int `json:"executions"`
}

// Principal is the engine principal owning the sandbox.
func (s *Sandbox) Principal() engine.Principal { return engine.Principal{Tenant: s.Owner} }

// registry holds the records of every principal's sandboxes.
type registry struct {
	dir string

	mu   sync.Mutex
	byID map[string]*Sandbox
}

func openRegistry(dir string) (*registry, error) {
	r := &registry{dir: dir, byID: map[string]*Sandbox{}}
	owners, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, o := range owners {
		if !o.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(dir, o.Name()))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(dir, o.Name(), f.Name()))
			if err != nil {
				return nil, err
			}
			var s Sandbox
			if json.Unmarshal(b, &s) != nil || session.ValidID(s.ID) != nil || f.Name() != s.ID+".json" {
				continue // not ours, or a write cut short: the session is still listed by forge
			}
			r.byID[s.ID] = &s
		}
	}
	return r, nil
}

// path is where the record of id of owner is kept; owners are any strings,
// so they are named by hash.
func (r *registry) path(owner, id string) string {
	h := sha256.Sum256([]byte(owner))
	return filepath.Join(r.dir, "o-"+hex.EncodeToString(h[:16]), id+".json")
}

// get returns a copy of the record of id.
func (r *registry) get(id string) (*Sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	if !ok {
		return nil, false
	}
	c := *s
	return &c, true
}

// owned returns a copy of p's record of id: another principal's answers
// like a missing one.
func (r *registry) owned(p engine.Principal, id string) (*Sandbox, bool) {
	s, ok := r.get(id)
	if !ok || s.Owner != p.Tenant {
		return nil, false
	}
	return s, true
}

// put stores a new record (saved first).
func (r *registry) put(s *Sandbox) error {
	if err := r.save(s); err != nil {
		return err
	}
	c := *s
	r.mu.Lock()
	r.byID[s.ID] = &c
	r.mu.Unlock()
	return nil
}

// update changes the record of id with f and saves it; f must replace
// maps, not change them (copies share them).
func (r *registry) update(id string, f func(*Sandbox)) (*Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", session.ErrNotFound, id)
	}
	c := *s
	f(&c)
	if err := r.save(&c); err != nil {
		return nil, err
	}
	*s = c
	return &c, nil
}

// remove forgets the record of id.
func (r *registry) remove(id string) {
	r.mu.Lock()
	s, ok := r.byID[id]
	delete(r.byID, id)
	r.mu.Unlock()
	if ok {
		_ = os.Remove(r.path(s.Owner, s.ID)) // a stale file: its session is gone, list drops it
	}
}

// list returns copies of owner's records ("" = everybody's), newest first.
func (r *registry) list(owner string) []*Sandbox {
	r.mu.Lock()
	out := make([]*Sandbox, 0, len(r.byID))
	for _, s := range r.byID {
		if owner == "" || s.Owner == owner {
			c := *s
			out = append(out, &c)
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// save writes s atomically, 0600.
func (r *registry) save(s *Sandbox) error {
	p := r.path(s.Owner, s.ID)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
