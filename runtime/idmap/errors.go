package idmap

import (
	"errors"
	"fmt"
)

var (
	// ErrOverlap: the reserved range shares ids with the host's subordinate
	// ranges or accounts (see OverlapError).
	ErrOverlap = errors.New("reserved host id range is not clear")
	// ErrExhausted: every block of the reserved range is leased, or still
	// has processes of a sandbox whose forge process died.
	ErrExhausted = errors.New("no free host id block")
	// ErrGeometry: another live forge process on the same state dir uses a
	// different reserved range or block size.
	ErrGeometry = errors.New("host id range differs from another forge process on this state dir")
	// ErrInvalid: a range or block size that cannot work.
	ErrInvalid = errors.New("invalid host id range")
)

// Settings names the configuration fields an error asks the user to change.
const Settings = "security.uid_range_start and security.uid_range_size"

// OverlapError is one range or id of the host that lies inside the
// reserved range.
type OverlapError struct {
	Reserved Range
	Other    Range  // the host's range (one id for an account)
	Source   string // file and line: "/etc/subuid:3"
	Owner    string // the user or group it belongs to
}

func (e *OverlapError) Error() string {
	what := "range " + e.Other.String()
	if e.Other.Size == 1 {
		what = fmt.Sprintf("id %d", e.Other.Start)
	}
	return fmt.Sprintf("reserved host id range %s overlaps %s of %q (%s): choose %s clear of /etc/subuid, /etc/subgid and every host uid/gid",
		e.Reserved, what, e.Owner, e.Source, Settings)
}

func (e *OverlapError) Unwrap() error { return ErrOverlap }
