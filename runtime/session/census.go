package session

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Counts is how many sessions one owner has, by where they are.
type Counts struct {
	Live       int // with a sandbox in this process
	Hibernated int // saved on disk, no sandbox anywhere
}

// censusTTL bounds the age of the hibernated counts, which come from the
// sessions dir: other forge processes sharing it change them too. This
// process's own hibernations, restores and removals make the next read
// count again.
const censusTTL = 15 * time.Second

// census caches the hibernated sessions found on disk, so that a metrics
// scrape reads one file per session at most once per censusTTL.
type census struct {
	mu         sync.Mutex
	at         time.Time // zero: count again
	hibernated map[string]int
}

func (c *census) invalidate() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

// Counts reports every owner's sessions: live ones from this process's
// table, hibernated ones from the state dir (see census).
func (m *Manager) Counts() map[string]Counts {
	out := map[string]Counts{}
	m.mu.Lock()
	for k, s := range m.sessions {
		if s.hasSandbox() {
			c := out[k.owner]
			c.Live++
			out[k.owner] = c
		}
	}
	m.mu.Unlock()
	for owner, n := range m.hibernated() {
		c := out[owner]
		c.Hibernated = n
		out[owner] = c
	}
	return out
}

func (m *Manager) hibernated() map[string]int {
	c := &m.census
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) > censusTTL {
		c.hibernated, c.at = m.countHibernated(), time.Now()
	}
	return c.hibernated
}

// countHibernated reads the meta.json of every session in the state dir:
// LocalOwner's in Dir, the others' in Dir/.principals/o-*.
func (m *Manager) countHibernated() map[string]int {
	out := map[string]int{}
	dirs := []string{m.opts.Dir}
	if ents, err := os.ReadDir(filepath.Join(m.opts.Dir, principalsDir)); err == nil {
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "o-") {
				dirs = append(dirs, filepath.Join(m.opts.Dir, principalsDir, e.Name()))
			}
		}
	}
	for i, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || ValidID(e.Name()) != nil {
				continue
			}
			meta, err := readMeta(filepath.Join(dir, e.Name()))
			if err != nil || meta.Status != Hibernated {
				continue
			}
			owner := meta.Owner
			if i == 0 {
				owner = m.opts.LocalOwner // older metas name no owner
			}
			if owner != "" {
				out[owner]++
			}
		}
	}
	return out
}
