package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

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
	// OnOutput, if set, receives the code's output while it runs (kernel.ExecRequest.OnOutput).
	OnOutput func(kernel.Output)
}

// The error types of results that the host writes (ExecutionResult.error.type): one per way a
// run can end other than the code's own exception. docs/sandbox.md lists them.
const (
	// ErrTypeTimeout: the wall-clock limit was hit (timed_out).
	ErrTypeTimeout = "TimeoutError"
	// ErrTypeOutOfMemory: the kernel's OOM killer killed the agent (oom_killed).
	ErrTypeOutOfMemory = "OutOfMemoryError"
	// ErrTypeProcessLimit: the run failed and the cgroup refused a fork or thread at pids.max.
	ErrTypeProcessLimit = "ProcessLimitError"
	// ErrTypeSignal: the agent was killed by a signal that forge did not send.
	ErrTypeSignal = "KilledBySignal"
	// ErrTypeExited: the agent exited on its own (os._exit, a crash) mid-run.
	ErrTypeExited = "SandboxExited"
	// ErrTypeProtocol: the agent's reply broke the protocol (forged or oversized); forge
	// killed the sandbox.
	ErrTypeProtocol = "AgentProtocolError"
	// ErrTypeTemplateDied: the zygote template the sandbox was forked from died (an OOM
	// kill in its own cgroup, a kill from outside), and the sandbox with it.
	ErrTypeTemplateDied = "TemplateDied"
)

// exitGrace is how long Exec waits, after the agent's reply stream ended, for the sandbox's
// init to exit with the agent's status before it kills it (which would hide that status).
const exitGrace = 2 * time.Second

// Exec runs code in the sandbox and returns a complete result: timeouts,
// OOM kills and a dead agent are results, not errors. An error means the
// sandbox is unusable for reasons other than the code (it has been killed).
func (s *Sandbox) Exec(ctx context.Context, code string, opts ExecOptions) (*kernel.Result, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	start := time.Now()
	req := kernel.ExecRequest{Code: code, OutputLimit: opts.OutputLimit, OnOutput: opts.OnOutput}
	if opts.KeepAlive {
		req.Interrupt, req.InterruptGrace = s.Interrupt, opts.Grace
		if req.InterruptGrace <= 0 {
			req.InterruptGrace = 2 * time.Second
		}
	}
	ectx, cancel := context.WithTimeout(ctx, opts.Timeout)
	res, err := s.client.Exec(ectx, req)
	// Decided before cancel, which would make ectx.Err() non-nil whatever happened: only
	// the client's own timeout, with the caller's context still live, is the time limit.
	timedOut := errors.Is(err, kernel.ErrTimeout) && ctx.Err() == nil
	cancel()
	elapsed := time.Since(start)
	var broke error
	switch {
	case err == nil:
	case timedOut && res != nil:
		// Interrupted in time: the namespace survives.
		res.TimedOut, err = true, nil
	case timedOut:
		s.killFor(fmt.Sprintf("the code exceeded its time limit of %s", opts.Timeout))
		res, err = &kernel.Result{TimedOut: true}, nil
	case ctx.Err() != nil && res != nil:
		// The caller cancelled and the interrupted code answered within the grace
		// (KeepAlive): the namespace survives, as after a timeout.
		res.TimedOut, err = false, nil
		res.Notes = append(res.Notes, "the run was cancelled by the client (KeyboardInterrupt)")
	case ctx.Err() != nil:
		s.Kill()
		return nil, fmt.Errorf("sandbox %s: %w", s.id, ctx.Err())
	case errors.Is(err, kernel.ErrAgentExited):
		// The agent died (OOM, os._exit, a signal): let init exit with its status.
		s.awaitExit(exitGrace)
	case errors.Is(err, kernel.ErrProtocol):
		// It spoke garbage; the client's OnBreak has killed the sandbox already.
		broke = err
	}
	if err != nil {
		s.killFor("the agent stopped answering: " + err.Error())
		res = &kernel.Result{}
	}
	s.finish(res, elapsed, opts, broke)
	return res, nil
}

// awaitExit waits up to d for the sandbox's init to be reaped.
func (s *Sandbox) awaitExit(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
	}
}

// finish fills in what only the host knows: timing, memory, OOM and exit
// status, and the error of results the agent could not write itself. The
// cgroup's OOM and pids counters are compared with what the last run left, so
// a session's earlier events do not colour later runs.
func (s *Sandbox) finish(res *kernel.Result, elapsed time.Duration, opts ExecOptions, broke error) {
	res.ExecutionTimeMS = float64(elapsed.Microseconds()) / 1000
	if u, err := s.Usage(); err == nil {
		res.MemoryPeakBytes = u.MemoryPeakBytes
		res.OOMKilled = u.OOMKills > s.seen.oomKills
		s.seen.oomKills = u.OOMKills
	}
	pidsHit := false
	if n, err := s.PidsLimitHits(); err == nil {
		pidsHit = n > s.seen.pidsHits
		s.seen.pidsHits = n
	}
	code, exited := s.ExitStatus()
	switch {
	case res.TimedOut && exited:
		res.ExitCode = code
		res.Error = &kernel.ExecError{Type: ErrTypeTimeout,
			Message: fmt.Sprintf("execution exceeded the time limit of %s and was killed; make the code faster or pass a larger timeout (up to the maximum)", opts.Timeout)}
	case res.TimedOut:
		res.ExitCode = 1
		if res.Error == nil || res.Error.Type == "KeyboardInterrupt" {
			res.Error = &kernel.ExecError{Type: ErrTypeTimeout,
				Message:   fmt.Sprintf("execution exceeded the time limit of %s and was interrupted; the session's namespace is kept", opts.Timeout),
				Traceback: tracebackOf(res.Error)}
		}
	case broke != nil:
		res.ExitCode = code
		res.Error = &kernel.ExecError{Type: ErrTypeProtocol,
			Message: "the sandbox's agent sent a reply that breaks forge's protocol (" + broke.Error() +
				"), so forge killed the sandbox; code that writes to the agent's reply channel or replaces its handlers ends the sandbox. Run again: a session starts fresh"}
	case exited && s.child != nil && s.child.tplDied.Load() != nil:
		res.ExitCode = code
		res.Error = &kernel.ExecError{Type: ErrTypeTemplateDied,
			Message: "the sandbox was killed because " + *s.child.tplDied.Load() +
				"; neither the code nor a limit of this sandbox caused it. Its state is gone: run again (a session starts fresh)"}
	case res.OOMKilled && exited:
		res.ExitCode = code
		res.Error = &kernel.ExecError{Type: ErrTypeOutOfMemory,
			Message: "the sandbox ran out of memory and the kernel killed it (OOM); use less memory or pass a larger memory limit (up to the maximum)"}
	case pidsHit && (exited || res.Error != nil):
		res.ExitCode = max(code, 1)
		msg := fmt.Sprintf("the code hit the sandbox's process limit (%d processes and threads): starting a process or thread failed; start fewer of them (a pool of workers rather than one per item)", s.pidsLimit())
		tb := tracebackOf(res.Error)
		if res.Error != nil {
			tb += "\n"
		}
		res.Error = &kernel.ExecError{Type: ErrTypeProcessLimit, Message: msg, Traceback: tb + ErrTypeProcessLimit + ": " + msg}
	case exited && killedBySignal(code):
		res.ExitCode = code
		res.Error = &kernel.ExecError{Type: ErrTypeSignal,
			Message: endingText(code) + ", sent by the code itself or from outside the sandbox; no limit of forge's was hit. Its state is gone: a session starts fresh"}
	case exited:
		res.ExitCode = code
		res.Error = &kernel.ExecError{Type: ErrTypeExited,
			Message: fmt.Sprintf("the Python process exited with status %d before the code finished (os._exit, or a crash of the interpreter or an extension); its state is gone: a session starts fresh", code)}
	case res.Error != nil:
		res.ExitCode = 1
	}
	res.Success = res.Error == nil
}

func (s *Sandbox) pidsLimit() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limits.Pids
}

func tracebackOf(e *kernel.ExecError) string {
	if e == nil {
		return ""
	}
	return e.Traceback
}

// killedBySignal reports whether an exit status (128+signal, as the reaper
// passes on the agent's) says a signal ended the agent.
func killedBySignal(code int) bool { return code > 128 && code <= 128+64 }

// endingText says how an agent that exited with status code ended.
func endingText(code int) string {
	if killedBySignal(code) {
		sig := unix.Signal(code - 128)
		return fmt.Sprintf("the Python process was killed by signal %d (%s)", int(sig), unix.SignalName(sig))
	}
	return fmt.Sprintf("the Python process exited with status %d", code)
}
