package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/proc"
)

// Cluster mode: several forge processes (replicas, perhaps on other hosts)
// share the sessions dir. A session's file lock is its holder's lease: the
// kernel (or the NFSv4 server, when the holder's host dies) drops it with
// the process, so a lock that can be taken means nobody holds the session,
// and no heartbeat is needed. Its meta names the holder (Member) and where
// peers reach it (Advertise); every call is checkpointed before it returns,
// so a replica that takes over a dead holder's session restores its last
// answered call.

// clusterProbeWait is how long a claim waits out a lock that may be only
// another replica's probe (Holder, List) before it calls the session held.
const clusterProbeWait = 200 * time.Millisecond

// HeldError: another live replica holds the session; forward the call to
// Advertise. It wraps ErrBusy (retryable).
type HeldError struct {
	ID, Member, Advertise string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%v: session %s is held by replica %s (%s); retry, or send the call there", ErrBusy, e.ID, e.Member, e.Advertise)
}

func (e *HeldError) Unwrap() error { return ErrBusy }

// Holder reports which other replica holds owner's session id: nil when it
// is this process's, on disk with no holder, or missing (then this process
// serves the call: it restores, takes over or refuses it as usual). The
// lookup is one stat of the session's own directory and a lock probe.
func (m *Manager) Holder(owner, id string) *HeldError {
	if ValidID(id) != nil || owner == "" || m.opts.Member == "" {
		return nil
	}
	k := key{owner, id}
	m.mu.Lock()
	_, mine := m.sessions[k]
	m.mu.Unlock()
	if mine {
		return nil
	}
	dir := m.dir(k)
	meta, err := readMeta(dir)
	if err != nil || meta.Member == "" || meta.Member == m.opts.Member {
		return nil
	}
	if !locked(dir) {
		return nil
	}
	return &HeldError{ID: id, Member: meta.Member, Advertise: meta.Advertise}
}

// Released reports whether member has let go of owner's session id, and
// whether it did so by handing it over (it hibernated the session itself,
// as a stopping replica does once its running calls are answered) rather
// than by dying. A call a replica was sent and never answered before it
// handed the session over was never run there, so it may be sent again.
func (m *Manager) Released(owner, id, member string) (released, handedOver bool) {
	if ValidID(id) != nil || owner == "" {
		return true, false
	}
	dir := m.dir(key{owner, id})
	if locked(dir) {
		meta, err := readMeta(dir)
		return err == nil && meta.Member != member, false
	}
	meta, err := readMeta(dir)
	if err != nil {
		return true, false
	}
	return true, meta.Member == member && meta.Status == Hibernated
}

// locked reports whether a process holds the session dir's lock. The probe
// takes the lock for an instant when nobody does.
func locked(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	return errors.Is(err, unix.EWOULDBLOCK)
}

// ownerGone reports whether the process the meta names as live holder has
// ended without saving the session: in cluster mode by its lock (the pid
// is another host's), else by its pid.
func (m *Manager) ownerGone(dir string, meta *Meta) bool {
	if meta.Member != "" || m.opts.Member != "" {
		m.mu.Lock()
		_, mine := m.sessions[key{meta.Owner, meta.ID}]
		m.mu.Unlock()
		return !mine && !locked(dir)
	}
	return meta.OwnerPid != os.Getpid() && !proc.Alive(meta.OwnerPid)
}

// checkpointLocked saves the session's variables and /workspace after a
// call, before it is answered, and leaves the sandbox paused. When the save
// fails the session is no longer durable: its meta says so (a takeover then
// reports it lost rather than restoring an older state) and so do the notes.
func (s *Session) checkpointLocked(ctx context.Context) []string {
	err := s.saveStateLocked(ctx, s.dir())
	_ = s.sb.Pause()
	if err == nil {
		s.meta.Checkpointed = true
		return nil
	}
	s.meta.Checkpointed = false
	dropSaved(s.dir())
	s.m.log.Warn("checkpointing session", "session", s.meta.ID, "err", err)
	return []string{fmt.Sprintf("session %s could not be checkpointed (%v): it lives on in this replica, but would be lost if this replica died", s.meta.ID, err)}
}

func (m *Manager) logTakeover(meta *Meta) {
	if meta.TakenOver != "" {
		m.log.Info("taking over a session from a replica that stopped without handing it over", "session", meta.ID, "from", meta.Member)
	}
}
