package sandbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// agentGCAge is how long an agent directory of another forge build must have
// been left untouched before GC removes it.
const agentGCAge = time.Hour

// AgentGCReport says what CleanupAgents removed.
type AgentGCReport struct {
	// Dirs are agent directories of other forge builds (agent/<hash>).
	Dirs []string `json:"dirs"`
	// Bytecode are compiled agents of images that are gone.
	Bytecode []string `json:"bytecode"`
}

// CleanupAgents removes what earlier forge builds and removed images left in
// StateDir/agent: the agent directories of other builds that no sandbox's
// state refers to and nothing touched for an hour, and this build's compiled
// agents of images for which imageExists says false. Nothing it removes is
// needed for correctness: a runtime whose agent directory went missing
// writes it again, and missing bytecode only means compiling again.
func (r *Runtime) CleanupAgents(imageExists func(id string) bool) (AgentGCReport, error) {
	var rep AgentGCReport
	base := filepath.Dir(r.agentDir)
	dirs, err := os.ReadDir(base)
	if err != nil {
		return rep, err
	}
	inUse, err := r.referencedPaths()
	if err != nil {
		return rep, err
	}
	var errs []error
	for _, d := range dirs {
		path := filepath.Join(base, d.Name())
		if !d.IsDir() || path == r.agentDir || inUse(path) || touchedWithin(path, agentGCAge) {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Dirs = append(rep.Dirs, path)
	}
	files, err := os.ReadDir(r.agentDir)
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	for _, f := range files {
		id, ok := strings.CutPrefix(f.Name(), "agent-")
		if id, ok = strings.CutSuffix(id, ".pyc"); !ok || !imageIDPattern.MatchString(id) || imageExists(id) {
			continue
		}
		path := filepath.Join(r.agentDir, f.Name())
		if err := os.Remove(path); err != nil {
			errs = append(errs, err)
			continue
		}
		r.pycMu.Lock()
		delete(r.pyc, id) // compiled again should the image come back
		r.pycMu.Unlock()
		rep.Bytecode = append(rep.Bytecode, path)
	}
	return rep, errors.Join(errs...)
}

// referencedPaths reads every sandbox's libcontainer state (of this and of
// other forge processes) and reports whether a path appears in any.
func (r *Runtime) referencedPaths() (func(string) bool, error) {
	ents, err := os.ReadDir(r.root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var states [][]byte
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(r.root, e.Name(), "state.json"))
		if err == nil {
			states = append(states, b)
		}
	}
	return func(path string) bool {
		for _, s := range states {
			if bytes.Contains(s, []byte(`"`+path+`"`)) || bytes.Contains(s, []byte(`"`+path+`/`)) {
				return true
			}
		}
		return false
	}, nil
}

// touchedWithin reports whether dir or a file in it changed within d.
func touchedWithin(dir string, d time.Duration) bool {
	cutoff := time.Now().Add(-d)
	st, err := os.Stat(dir)
	if err != nil || st.ModTime().After(cutoff) {
		return true
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, e := range ents {
		if fi, err := e.Info(); err != nil || fi.ModTime().After(cutoff) {
			return true
		}
	}
	return false
}
