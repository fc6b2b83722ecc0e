package engine

import (
	"errors"

	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
)

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

// RefusalKind says what about a request the caller has to change; faces map
// it to their own codes (a tool error, exit code 2, an HTTP status).
type RefusalKind string

// Refusal kinds. Add one when a new face needs to tell a case apart.
const (
	// RefusedInvalid: a limit, allowlist or argument the request breaks.
	RefusedInvalid RefusalKind = "invalid"
	// RefusedNotFound: no such image or session (for this principal).
	RefusedNotFound RefusalKind = "not_found"
	// RefusedLimit: a configured number of live objects is reached.
	RefusedLimit RefusalKind = "limit"
	// RefusedBusy: the object or forge is busy; the same call may succeed later.
	RefusedBusy RefusalKind = "busy"
)

// RefusedError is every "the caller must fix this" error at the engine's
// edge: each exported Engine method returns one for such cases, so that
// every face recognises them with one errors.As. Err keeps the cause (its
// sentinels stay matchable) and its message for the user.
type RefusedError struct {
	Kind RefusalKind
	Err  error
}

func (e *RefusedError) Error() string { return e.Err.Error() }

func (e *RefusedError) Unwrap() error { return e.Err }

// refusals map the sentinels of the layers below to their kind.
var refusals = []struct {
	err  error
	kind RefusalKind
}{
	{ErrInvalidRequest, RefusedInvalid},
	{rootfs.ErrBadReference, RefusedInvalid},
	{session.ErrBadID, RefusedInvalid},
	{session.ErrExists, RefusedInvalid}, // fork_session's new_session_id is taken
	{kernel.ErrRequest, RefusedInvalid}, // a bad path, a file too large, …
	{rootfs.ErrImageNotFound, RefusedNotFound},
	{session.ErrNotFound, RefusedNotFound},
	{session.ErrLimit, RefusedLimit},
	{session.ErrQuota, RefusedLimit}, // the principal's quota (session.WithQuota)
	{session.ErrBusy, RefusedBusy},
	{session.ErrHibernated, RefusedBusy},
	{session.ErrNoPersist, RefusedInvalid},
	{ErrBusy, RefusedBusy}, // execution.max_concurrent
	{build.ErrInvalid, RefusedInvalid},
	{build.ErrRefused, RefusedInvalid},
	{build.ErrDisabled, RefusedInvalid},
	{build.ErrTooLarge, RefusedInvalid},
	{build.ErrScan, RefusedInvalid},         // critical vulnerabilities in what was asked for
	{build.ErrUnresolvable, RefusedInvalid}, // a package the index does not have
	{build.ErrNotFound, RefusedNotFound},
	{build.ErrRateLimited, RefusedLimit},
	{build.ErrBusy, RefusedBusy},
	{build.ErrInUse, RefusedBusy},
}

// refuse wraps err in a *RefusedError when it is the caller's to fix; other
// errors (and nil) come back as they are.
func refuse(err error) error {
	if err == nil {
		return nil
	}
	var r *RefusedError
	if errors.As(err, &r) {
		return err
	}
	for _, c := range refusals {
		if errors.Is(err, c.err) {
			return &RefusedError{Kind: c.kind, Err: err}
		}
	}
	return err
}
