package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Fork is the reply of Manager.Fork.
type Fork struct {
	SessionID string `json:"session_id"`
	Source    string `json:"source_session_id"`
	// Copied are the variables (and imported modules) the fork has;
	// Uncopied those it could not get: not picklable in the source (an
	// open socket, a generator, a lock) or not unpicklable in the fork.
	Copied   []string `json:"copied"`
	Uncopied []string `json:"uncopied"`
	// WorkspaceBytes is the size of the /workspace copy.
	WorkspaceBytes int64    `json:"workspace_bytes"`
	ForkMillis     int64    `json:"fork_ms"`
	Notes          []string `json:"notes,omitempty"`
}

// Fork makes newID (a fresh id when empty) a copy of owner's session srcID:
// its variables and /workspace, through the same save and restore as
// hibernation, in a new sandbox of its own (and so its own host uid block).
// The source keeps running untouched. Another owner's srcID answers like an
// unknown one; nothing of a failed fork is left behind.
func (m *Manager) Fork(ctx context.Context, owner, srcID, newID string) (_ *Fork, retErr error) {
	start := time.Now()
	if newID == "" {
		newID = NewID()
	}
	for _, id := range []string{srcID, newID} {
		if err := ValidID(id); err != nil {
			return nil, err
		}
	}
	if srcID == newID {
		return nil, fmt.Errorf("%w: new_session_id %q is the source session itself", ErrExists, newID)
	}
	src, err := m.get(ctx, key{owner, srcID}, "", false)
	if err != nil {
		return nil, err
	}
	defer src.mu.Unlock()
	notes, err := src.ensureSandboxLocked(ctx)
	if err != nil {
		return nil, err
	}
	dst, err := m.claimNew(ctx, key{owner, newID}, src.meta.Image)
	if err != nil {
		return nil, err
	}
	defer dst.mu.Unlock()
	dst.fresh = false // undone below on failure, not by Call
	defer func() {
		if retErr != nil { // nothing half-made
			if dst.sb != nil {
				_ = dst.sb.Destroy()
				dst.setSandbox(nil)
			}
			os.RemoveAll(dst.dir())
			m.release(dst)
			m.opts.OnEvent("session.destroy", owner, newID)
		}
	}()
	// The source's save goes into the fork's directory, as if the fork had
	// hibernated; the source sandbox is paused after it, as after a call.
	if err := src.saveStateLocked(ctx, dst.dir()); err != nil {
		if !src.sb.Alive() {
			src.dropSandboxLocked(src.sb.DeathReason())
			_ = src.saveLocked()
		}
		return nil, fmt.Errorf("forking session %s: %w", srcID, err)
	}
	src.removeStateFileLocked()
	if err := src.saveLocked(); err != nil {
		m.log.Warn("saving session metadata", "session", srcID, "err", err)
	}
	unsaved := src.meta.Unsaved
	dst.meta.Unsaved = append([]string(nil), unsaved...)
	dst.meta.Variables = src.meta.Variables
	dst.meta.VariableCount = src.meta.VariableCount
	if d := src.meta.Documented; d != nil {
		cp := *d
		cp.Variables = make(map[string]string, len(d.Variables))
		for k, v := range d.Variables {
			cp.Variables[k] = v
		}
		dst.meta.Documented = &cp
	}
	if err := dst.saveLocked(); err != nil {
		return nil, err
	}
	if _, err := dst.ensureSandboxLocked(ctx); err != nil {
		return nil, fmt.Errorf("starting fork %s of session %s: %w", newID, srcID, err)
	}
	wsBytes := treeSize(filepath.Join(dst.dir(), "workspace"))
	// The copy is in the fork's sandbox now; on disk it would only be stale
	// (a live session's saved state is never brought back, see orphanedLocked).
	dropSaved(dst.dir())
	rep, err := dst.sb.Client().Inspect(ctx)
	if err == nil {
		dst.meta.Variables, dst.meta.VariableCount = rep, len(rep)
	}
	if err := dst.sb.Pause(); err != nil {
		return nil, err
	}
	dst.meta.LastActive = time.Now().UTC()
	if err := dst.saveLocked(); err != nil {
		return nil, err
	}
	f := &Fork{SessionID: newID, Source: srcID, Uncopied: dst.meta.Unrestored, Notes: notes, WorkspaceBytes: wsBytes}
	for _, v := range dst.meta.Variables {
		f.Copied = append(f.Copied, v.Name)
	}
	if f.Uncopied == nil {
		f.Uncopied = []string{}
	}
	if f.Copied == nil {
		f.Copied = []string{}
	}
	f.ForkMillis = time.Since(start).Milliseconds()
	m.log.Debug("session forked", "session", srcID, "fork", newID, "sandbox", dst.sb.ID(), "ms", f.ForkMillis)
	return f, nil
}

// claimNew takes the id k for a new session, locked; ErrExists if it is
// live here or on disk. It does not wait for a session another call holds
// (the caller holds its source's lock: waiting could deadlock).
func (m *Manager) claimNew(ctx context.Context, k key, image string) (*Session, error) {
	m.mu.Lock()
	_, live := m.sessions[k]
	m.mu.Unlock()
	if live {
		return nil, fmt.Errorf("%w: %s", ErrExists, k.id)
	}
	if _, err := readMeta(m.dir(k)); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, k.id)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading session %s: %w", k.id, err)
	}
	s, err := m.claim(ctx, k, image, true)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, k.id) // another call won
	}
	if _, err := readMeta(m.dir(k)); err == nil {
		// Another process created it between the check and the lock.
		s.mu.Unlock()
		m.release(s)
		return nil, fmt.Errorf("%w: %s", ErrExists, k.id)
	}
	return s, nil
}

// removeStateFileLocked deletes the pickle a save left in the sandbox's
// /tmp, where it would count against the session's tmpfs. unlinkat on a
// directory opened without following links: the sandbox cannot redirect it.
func (s *Session) removeStateFileLocked() {
	root := fmt.Sprintf("/proc/%d/root", s.sb.Pid())
	dir, err := os.OpenFile(root+filepath.Dir(statePath), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer dir.Close()
	_ = unix.Unlinkat(int(dir.Fd()), filepath.Base(statePath), 0)
}

// treeSize is the total size of the regular files under a host directory
// forge wrote itself.
func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
