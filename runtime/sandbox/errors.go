package sandbox

import "errors"

var (
	// ErrInvalidConfig is a sandbox configuration that would break an invariant.
	ErrInvalidConfig = errors.New("invalid sandbox configuration")
	// ErrTimeout means the code ran past its wall-clock limit and was killed.
	ErrTimeout = errors.New("execution timed out")
	// ErrSandboxBroken means the agent stopped answering or spoke garbage;
	// the sandbox was killed.
	ErrSandboxBroken = errors.New("sandbox broken")
	// ErrClosed is returned by operations on a destroyed sandbox.
	ErrClosed = errors.New("sandbox destroyed")
	// ErrSeccompUnsupported: a build without seccomp never runs sandboxes.
	ErrSeccompUnsupported = errors.New("seccomp unsupported")
)
