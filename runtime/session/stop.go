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
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(all)) {
					return
				}
				err := m.stopOne(ctx, all[i])
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
