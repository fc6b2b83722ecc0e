package session

import "errors"

var (
	// ErrNotFound: no session with that id, live or hibernated.
	ErrNotFound = errors.New("session not found")
	// ErrLimit: sessions.max_concurrent live sessions exist already.
	ErrLimit = errors.New("too many sessions")
	// ErrBusy: another forge process owns the session.
	ErrBusy = errors.New("session in use by another forge process")
	// ErrBadID: a session id outside [A-Za-z0-9_-]{1,64}.
	ErrBadID = errors.New("invalid session id")
	// ErrNoOwner: a call without an owner; every session belongs to one.
	ErrNoOwner = errors.New("session call without an owner")
	// ErrClosed: the manager is shutting down.
	ErrClosed = errors.New("sessions are shutting down")
)
