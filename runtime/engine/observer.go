package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/pool"
)

// Modes of an execution, as metrics label them.
const (
	ModeWarm    = "warm"    // a stateless run in a sandbox from the warm pool
	ModeCold    = "cold"    // a stateless run in a sandbox started for it
	ModeSession = "session" // a call of a session
)

// Outcomes of an execution, as metrics label them.
const (
	OutcomeOK        = "ok"        // the code ran to the end
	OutcomeError     = "error"     // the code raised or exited non-zero
	OutcomeTimeout   = "timeout"   // killed or interrupted at its timeout
	OutcomeOOM       = "oom"       // killed by the memory limit
	OutcomeRefused   = "refused"   // a *RefusedError: the caller's to fix
	OutcomeCancelled = "cancelled" // the caller went away
	OutcomeFailed    = "failed"    // forge or the sandbox broke
)

// Observer is told about every execution when it is over. The metrics of
// the faces implement it; runtime/ cannot import them. It must not block.
type Observer interface {
	ObserveExecution(ExecutionStats)
}

// ExecutionStats describe one finished (or refused) execution.
type ExecutionStats struct {
	Principal Principal
	Mode      string // one of the Mode constants; "" when refused before a sandbox
	Outcome   string // one of the Outcome constants
	Duration  time.Duration
}

// callBox carries out to Execute what the calls below it learn: the mode
// (the pool says whether a sandbox was warm), and the pool whose refill the
// run holds back (see holdRefill).
type callBox struct {
	mu   sync.Mutex
	mode string
	held *pool.Pool
}

type callKey struct{}

func withCall(ctx context.Context, b *callBox) context.Context {
	return context.WithValue(ctx, callKey{}, b)
}

// setMode records m unless a mode is already known (a session's sandbox
// may come from the pool: it stays a session call).
func setMode(ctx context.Context, m string) {
	if b, ok := ctx.Value(callKey{}).(*callBox); ok {
		b.mu.Lock()
		if b.mode == "" {
			b.mode = m
		}
		b.mu.Unlock()
	}
}

func (b *callBox) get() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mode
}

func (e *Engine) observe(req Request, mode string, start time.Time, res *kernel.Result, err error) {
	if e.observer == nil {
		return
	}
	e.observer.ObserveExecution(ExecutionStats{Principal: req.Principal, Mode: mode, Outcome: outcomeOf(res, err), Duration: time.Since(start)})
}

func outcomeOf(res *kernel.Result, err error) string {
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		return OutcomeRefused
	case errors.Is(err, context.Canceled):
		return OutcomeCancelled
	case err != nil || res == nil:
		return OutcomeFailed
	case res.OOMKilled:
		return OutcomeOOM
	case res.TimedOut:
		return OutcomeTimeout
	case !res.Success:
		return OutcomeError
	}
	return OutcomeOK
}
