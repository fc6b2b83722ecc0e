package session

import (
	"encoding/json"
	"time"
)

// A session call is answered before its sandbox is paused, and meta.json is
// not rewritten for a call that changed only its activity (LastActive,
// VariableCount). Both were on every call's answer path: the freeze waits
// for the sandbox's tasks to be scheduled (1.1-1.4 ms at 200-1,000 live
// sessions here) and the write costs about 0.3 ms of CPU and a journalled
// rename (forge bench --density; docs/bench-log.md). The sandbox is still
// frozen between calls, settleDelay after each one (docs/security.md,
// "Session frozen after the answer"). The activity reaches meta.json at the
// reaper's next tick (at most a minute, or an idle timeout's tenth), at
// hibernation and at a stop; without a reaper, when the sandbox is paused.
// What a crash may lose is unchanged: a crash loses a live session's
// sandbox whatever meta.json says, and every other change of its metadata
// (egress policy, documented state, status, a cluster checkpoint) is still
// written before the answer.

// settleDelay is how long after a call its session's sandbox keeps running:
// long enough for the answer to be on its way, short enough that code the
// call left behind (a thread, a child) gets no more CPU than a moment; a
// call within it finds the sandbox running and pays no thaw.
const settleDelay = 10 * time.Millisecond

// settleLaterLocked pauses the sandbox settleDelay from now, or, when a
// call holds the session then, as soon as that call ends.
func (s *Session) settleLaterLocked() {
	if s.settle == nil {
		s.settle = time.AfterFunc(s.m.settleDelay, s.settleNow)
		return
	}
	s.settle.Reset(s.m.settleDelay)
}

// settleNow pauses an idle session's sandbox.
func (s *Session) settleNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone || s.sb == nil {
		return
	}
	// Off the answer's path: PauseIdle waits for the freeze without
	// spinning on the cores the other sandboxes' calls need.
	if err := s.sb.PauseIdle(); err != nil && s.sb.Alive() {
		s.m.log.Warn("pausing session sandbox", "session", s.meta.ID, "err", err)
	}
	if s.seen.Load() != nil && s.m.opts.IdleTimeout <= 0 {
		s.flushMetaLocked() // no reaper to do it
	}
}

// flushMetaLocked writes the activity a settled call left out of meta.json.
func (s *Session) flushMetaLocked() {
	if err := s.saveLocked(); err != nil {
		s.m.log.Warn("saving session metadata", "session", s.meta.ID, "err", err)
	}
}

// durableMeta is m without what every call changes (LastActive,
// VariableCount): a call that changed more is written before its answer.
func durableMeta(m *Meta) []byte {
	c := *m
	c.LastActive, c.VariableCount = time.Time{}, 0
	b, err := json.Marshal(&c)
	if err != nil {
		return nil // never equal to what was written: written at once
	}
	return b
}
