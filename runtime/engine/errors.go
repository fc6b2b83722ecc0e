package engine

import "errors"

var (
	// ErrInvalidRequest is a request that breaks a configured limit or
	// allowlist; its message names the limit and what is allowed.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrClosed: the engine is shutting down.
	ErrClosed = errors.New("forge is shutting down")
	// ErrBusy: every execution slot (execution.max_concurrent) stayed taken
	// for execution.queue_timeout; the caller should retry later.
	ErrBusy = errors.New("forge is busy")
)
