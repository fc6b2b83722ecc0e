package server

import (
	"net"
	"sync"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
)

// Budgets of audited HTTP refusals (bad tokens, refused Host or Origin) in
// each refusalWindow: past them a refusal is only counted, and the counts
// go into one summary event at the window's end. A flood of bad requests
// thus writes a bounded number of lines and cannot rotate the operators'
// events out of the audit log.
const (
	refusalWindow    = time.Minute
	refusalPerSource = 10   // per remote address
	refusalTotal     = 100  // over every source
	refusalSources   = 4096 // addresses tracked in a window; more share the total only
)

// refusalLog decides which refusals are audited and keeps the counts of the rest.
type refusalLog struct {
	audit *audit.Logger
	now   func() time.Time

	mu         sync.Mutex
	start      time.Time      // of the current window
	bySource   map[string]int // refusals per source in the window
	total      int            // refusals in the window
	notAudited int            // of them, counted only
}

func newRefusalLog(a *audit.Logger) *refusalLog {
	return &refusalLog{audit: a, now: time.Now, bySource: map[string]int{}}
}

// admit counts a refusal from remote (host:port) and reports whether it is
// to be audited and logged.
func (l *refusalLog) admit(remote string) bool {
	src := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		src = h
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); now.Sub(l.start) >= refusalWindow {
		l.flushLocked()
		l.start = now
	}
	l.total++
	n, tracked := l.bySource[src]
	if tracked || len(l.bySource) < refusalSources {
		l.bySource[src] = n + 1
	}
	if l.total > refusalTotal || n >= refusalPerSource {
		l.notAudited++
		return false
	}
	return true
}

// flushLocked writes the summary of the window when some refusals of it
// were not audited, and starts a new count.
func (l *refusalLog) flushLocked() {
	if l.notAudited > 0 {
		l.audit.Log(audit.Event{Event: audit.EventHTTPRefusedSummary, Severity: audit.SeverityWarning,
			Reason: "HTTP requests refused (invalid token, Host or Origin) past the audit budget were counted, not audited one by one",
			Fields: map[string]any{"refused": l.total, "not_audited": l.notAudited, "sources": len(l.bySource),
				"since": l.start.UTC().Format(time.RFC3339), "window_seconds": int(refusalWindow / time.Second)}})
	}
	clear(l.bySource)
	l.total, l.notAudited = 0, 0
}

// run writes summaries at the end of each window until the returned stop
// is called, which writes the last one.
func (l *refusalLog) run() (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(refusalWindow)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-done:
				l.mu.Lock()
				l.flushLocked()
				l.mu.Unlock()
				return
			}
			l.mu.Lock()
			if l.now().Sub(l.start) >= refusalWindow {
				l.flushLocked()
				l.start = l.now()
			}
			l.mu.Unlock()
		}
	}()
	return func() { close(done); <-finished }
}
