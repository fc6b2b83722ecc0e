package session

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound: no session with that id, live or hibernated.
	ErrNotFound = errors.New("session not found")
	// ErrLimit: sessions.max_concurrent live sessions exist already, or
	// forge's parent cgroup has no room for another (capacity.go).
	ErrLimit = errors.New("too many sessions")
	// ErrQuota: the owner has the most sessions its quota (WithQuota)
	// allows; wrapped by every *QuotaError.
	ErrQuota = errors.New("session quota reached")
	// ErrBusy: another forge process owns the session.
	ErrBusy = errors.New("session in use by another forge process")
	// ErrBadID: a session id outside [A-Za-z0-9_-]{1,64}.
	ErrBadID = errors.New("invalid session id")
	// ErrNoOwner: a call without an owner; every session belongs to one.
	ErrNoOwner = errors.New("session call without an owner")
	// ErrClosed: the manager is shutting down.
	ErrClosed = errors.New("sessions are shutting down")
	// ErrHibernated: Hibernate of a session that has no sandbox (already
	// hibernated, or lost).
	ErrHibernated = errors.New("session is already hibernated")
	// ErrNoPersist: Hibernate while sessions.persist is off.
	ErrNoPersist = errors.New("sessions are not persisted (sessions.persist is off), so a session cannot hibernate")
)

var (
	// ErrNotRegular: a file read from a sandbox (its pickled state, a
	// workspace file) is a FIFO, device, socket or link where a regular
	// file belongs. Only code that subverted the agent makes one.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: a file or tree read from a sandbox is over its cap.
	ErrTooLarge = errors.New("over the size limit")
)

// FileError is a file of a sandbox that forge refused to copy out.
type FileError struct {
	Path        string // as the host opened it (through /proc/PID/root)
	Kind        string // for ErrNotRegular: "a FIFO", "a character device", ...
	Size, Limit int64  // for ErrTooLarge
	Err         error  // ErrNotRegular or ErrTooLarge
}

func (e *FileError) Error() string {
	if errors.Is(e.Err, ErrTooLarge) {
		return fmt.Sprintf("%s is %d bytes, over the limit of %d", e.Path, e.Size, e.Limit)
	}
	return fmt.Sprintf("%s is %s, %v", e.Path, e.Kind, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// ErrExists: fork_session named a new session id that is already taken.
var ErrExists = errors.New("session already exists")

// QuotaError refuses a new session of an owner that has Max already (its
// quota, from WithQuota): running, hibernated or lost, in this process or
// on disk.
type QuotaError struct {
	Owner string
	Max   int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%v: %d sessions exist, the most this principal may have; destroy one with destroy_session", ErrQuota, e.Max)
}

func (e *QuotaError) Unwrap() error { return ErrQuota }
