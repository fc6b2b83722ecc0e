package hosted

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcp-forge/forge/runtime/engine"
)

// BenchFigures are the latencies Bench measured.
type BenchFigures struct {
	// Hosted and Exec are back-to-back calls: a hosted tool's, and warm
	// stateless execute_python runs of the same engine.
	Hosted, Exec []time.Duration
	// HostedIdle and ExecIdle are each the first call after idle.
	HostedIdle, ExecIdle []time.Duration
}

// Bench measures h's tool called back to back beside execute_python runs
// of code back to back, in the same run and interleaved (rounds of per
// calls each, so that the load of a shared host weighs on both alike), then
// the first call of each after idle (idleRounds times each). The first call
// of each is made untimed (a template's start). forge bench and the
// package's benchmark share it.
func Bench(ctx context.Context, eng *engine.Engine, h *Host, p engine.Principal, tool string, args json.RawMessage,
	code string, rounds, per, idleRounds int, idle time.Duration) (BenchFigures, error) {
	var f BenchFigures
	hostedCall := func() error {
		r, err := h.Call(ctx, p, tool, args)
		if err == nil && r.IsError {
			err = fmt.Errorf("hosted tool %s: %s", tool, r.Text)
		}
		return err
	}
	execRun := func() error {
		res, err := eng.Execute(ctx, engine.Request{Principal: p, Code: code, Client: "bench"})
		if err == nil && !res.Success {
			err = fmt.Errorf("execute_python: %+v", res.Error)
		}
		return err
	}
	timed := func(fn func() error, out *[]time.Duration) error {
		start := time.Now()
		if err := fn(); err != nil {
			return err
		}
		*out = append(*out, time.Since(start))
		return nil
	}
	if err := hostedCall(); err != nil {
		return f, err
	}
	if err := execRun(); err != nil {
		return f, err
	}
	for range rounds {
		for range per {
			if err := timed(hostedCall, &f.Hosted); err != nil {
				return f, err
			}
		}
		for range per {
			if err := timed(execRun, &f.Exec); err != nil {
				return f, err
			}
		}
	}
	wait := func() error {
		t := time.NewTimer(idle)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for range idleRounds {
		if err := wait(); err != nil {
			return f, err
		}
		if err := timed(hostedCall, &f.HostedIdle); err != nil {
			return f, err
		}
		if err := wait(); err != nil {
			return f, err
		}
		if err := timed(execRun, &f.ExecIdle); err != nil {
			return f, err
		}
	}
	return f, nil
}
