package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-forge/forge/runtime/kernel"
)

// ExecOptions bound one execution.
type ExecOptions struct {
	// Timeout is the wall-clock limit, enforced by the host.
	Timeout time.Duration
	// OutputLimit caps stdout and stderr each (bytes); 0 = the agent's default.
	OutputLimit int
	// KeepAlive interrupts the code on timeout (KeyboardInterrupt) instead
	// of killing the sandbox, so a session keeps its namespace; if the agent
	// does not answer within Grace, the sandbox is killed anyway.
	KeepAlive bool
	Grace     time.Duration
}

// Exec runs code in the sandbox and returns a complete result: timeouts,
// OOM kills and a dead agent are results, not errors. An error means the
// sandbox is unusable for reasons other than the code (it has been killed).
func (s *Sandbox) Exec(ctx context.Context, code string, opts ExecOptions) (*kernel.Result, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	start := time.Now()
	req := kernel.ExecRequest{Code: code, OutputLimit: opts.OutputLimit}
	if opts.KeepAlive {
		req.Interrupt, req.InterruptGrace = s.Interrupt, opts.Grace
		if req.InterruptGrace <= 0 {
			req.InterruptGrace = 2 * time.Second
		}
	}
	ectx, cancel := context.WithTimeout(ctx, opts.Timeout)
	res, err := s.client.Exec(ectx, req)
	cancel()
	elapsed := time.Since(start)
	timedOut := err != nil && ectx.Err() != nil && ctx.Err() == nil
	switch {
	case err == nil:
	case timedOut && res != nil:
		// Interrupted in time: the namespace survives.
		res.TimedOut, err = true, nil
	case timedOut:
		s.Kill()
		res, err = &kernel.Result{TimedOut: true}, nil
	case ctx.Err() != nil:
		s.Kill()
		return nil, fmt.Errorf("sandbox %s: %w", s.id, ctx.Err())
	}
	if err != nil {
		// The agent died (OOM, os._exit, killed) or spoke garbage.
		if !errors.Is(err, kernel.ErrAgentExited) {
			s.rt.log.Warn("sandbox agent protocol error; killing it", "sandbox", s.id, "err", err)
		}
		s.Kill()
		res = &kernel.Result{}
	}
	s.finish(res, elapsed, opts)
	return res, nil
}

// finish fills in what only the host knows: timing, memory, OOM and exit
// status, and the error text of results the agent could not write itself.
func (s *Sandbox) finish(res *kernel.Result, elapsed time.Duration, opts ExecOptions) {
	res.ExecutionTimeMS = float64(elapsed.Microseconds()) / 1000
	if u, err := s.Usage(); err == nil {
		res.MemoryPeakBytes = u.MemoryPeakBytes
		res.OOMKilled = u.OOMKills > 0
	}
	code, exited := s.ExitStatus()
	switch {
	case res.TimedOut && exited:
		res.ExitCode = code
		res.Error = &kernel.ExecError{Type: "TimeoutError",
			Message: fmt.Sprintf("execution exceeded the time limit of %s and was killed", opts.Timeout)}
	case res.TimedOut:
		res.ExitCode = 1
		if res.Error == nil || res.Error.Type == "KeyboardInterrupt" {
			res.Error = &kernel.ExecError{Type: "TimeoutError",
				Message:   fmt.Sprintf("execution exceeded the time limit of %s and was interrupted; the session's namespace is kept", opts.Timeout),
				Traceback: tracebackOf(res.Error)}
		}
	case res.OOMKilled:
		res.ExitCode = code
		res.Error = &kernel.ExecError{Type: "MemoryError",
			Message: "the sandbox ran out of memory and was killed by the kernel (OOM); raise the memory limit or use less"}
	case exited:
		res.ExitCode = code
		if res.Error == nil {
			res.Error = &kernel.ExecError{Type: "SandboxExited",
				Message: fmt.Sprintf("the Python process exited with status %d before the code finished", code)}
		}
	case res.Error != nil:
		res.ExitCode = 1
	}
	res.Success = res.Error == nil
}

func tracebackOf(e *kernel.ExecError) string {
	if e == nil {
		return ""
	}
	return e.Traceback
}
