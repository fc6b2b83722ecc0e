package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// StopSaveTimeout is one session's deadline to be saved at a stop. Each
// session has its own: a deadline shared by all of them ran out after a
// minute's worth of sessions (about 1,700 here) and lost every later one.
const StopSaveTimeout = 60 * time.Second

// stopWorkers is how many sessions a stop saves at once: enough to overlap
// one session's pickling with another's disk copy and sandbox teardown,
// few enough that the pickles written at once (each the size of its
// session's state, held in its own sandbox's memory) fit in a parent cgroup
// that is nearly full.
func stopWorkers(n int) int { return max(1, min(n, 4*runtime.NumCPU(), 16)) }

// stopProgressEvery is how often a long stop logs how far it got.
const stopProgressEvery = 2 * time.Second

// stopAll hibernates (or destroys) every session in all, stopWorkers at a
// time, and logs progress and the time it took per session.
func (m *Manager) stopAll(ctx context.Context, all []*Session) error {
	if len(all) == 0 {
		return nil
	}
	start := time.Now()
	var (
		next, done, lost atomic.Int64
		mu               sync.Mutex
		errs             []error
		wg               sync.WaitGroup
	)
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(stopProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				m.log.Info("saving sessions at stop", "done", done.Load(), "of", len(all), "lost", lost.Load(), "elapsed", time.Since(start).Round(time.Millisecond))
			}
		}
	}()
	workers := stopWorkers(len(all))
	gate := newMemoryGate(m.opts.Headroom)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(all)) {
					return
				}
				release := gate.admit(all[i])
				err := m.stopOne(ctx, all[i])
				release()
				if err != nil {
					lost.Add(1)
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	took := time.Since(start)
	m.log.Info("sessions saved at stop", "sessions", len(all), "lost", lost.Load(), "workers", workers,
		"took", took.Round(time.Millisecond), "per_session", (took / time.Duration(len(all))).Round(time.Microsecond))
	return errors.Join(errs...)
}

// stopOne hibernates s (or destroys it without persistence) and forgets it.
// A first attempt that fails while the sandbox still lives (a deadline, a
// transient error under memory pressure) keeps it live; the second is
// forced, and the session is lost only if that one fails too.
func (m *Manager) stopOne(ctx context.Context, s *Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer m.release(s)
	if !m.opts.Persist {
		if s.sb != nil {
			_ = s.sb.Destroy()
			s.setSandbox(nil)
			os.RemoveAll(s.dir())
		}
		return nil
	}
	var first error
	for attempt, force := range []bool{false, true} {
		sctx, cancel := context.WithTimeout(ctx, StopSaveTimeout)
		err := s.hibernateLocked(sctx, force)
		cancel()
		if err == nil {
			if attempt > 0 {
				m.log.Warn("session saved at stop on a second attempt", "session", s.meta.ID, "first_err", first)
			}
			return nil
		}
		if s.sb == nil || ctx.Err() != nil {
			return fmt.Errorf("saving session %s at stop: %w", s.meta.ID, err)
		}
		first = err
	}
	return nil
}

// memoryGate lets a session's save start only when forge's parent cgroup
// has room for its pickle beside the saves in flight, or when none is in
// flight (one at a time always proceeds: each save ends by freeing its
// sandbox). Without it, a stop with the parent cgroup nearly full had the
// kernel kill sessions mid-pickle (lost) instead of waiting for memory.
type memoryGate struct {
	headroom func() (int64, bool)

	mu       sync.Mutex
	changed  *sync.Cond
	inflight int
	reserved int64 // bytes the saves in flight may still need
}

func newMemoryGate(headroom func() (int64, bool)) *memoryGate {
	g := &memoryGate{headroom: headroom}
	g.changed = sync.NewCond(&g.mu)
	return g
}

// saveNeed estimates what saving s charges: its state twice (the pickled
// values, then the file in its /tmp) plus slack. Its sandbox's memory
// charge bounds its state.
func saveNeed(s *Session) int64 {
	const slack = 4 << 20
	if s.sb == nil {
		return 0
	}
	mem, err := s.sb.MemoryCurrent()
	if err != nil {
		return slack
	}
	return 2*int64(mem) + slack
}

// admit waits until s may be saved and returns the function that releases
// its reservation.
func (g *memoryGate) admit(s *Session) (release func()) {
	if g.headroom == nil {
		return func() {}
	}
	s.mu.Lock()
	need := saveNeed(s)
	s.mu.Unlock()
	g.mu.Lock()
	for g.inflight > 0 {
		free, ok := g.headroom()
		if !ok || free-g.reserved >= need {
			break
		}
		g.changed.Wait()
	}
	g.inflight++
	g.reserved += need
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.inflight--
		g.reserved -= need
		g.changed.Broadcast()
		g.mu.Unlock()
	}
}
