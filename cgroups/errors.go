package cgroups

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidLimit is matched by every *LimitError: a limit that is
	// malformed, out of range or above its maximum.
	ErrInvalidLimit = errors.New("invalid limit")

	// ErrExceedsMaximum is matched by a *LimitError for a request above a
	// profile's maximum (it also matches ErrInvalidLimit).
	ErrExceedsMaximum = errors.New("limit exceeds the maximum")

	// ErrNoMemoryController means neither a cgroup v1 memory hierarchy nor a
	// cgroup v2 unified hierarchy is mounted: sandboxes cannot be limited.
	ErrNoMemoryController = errors.New("no memory cgroup controller mounted (need cgroup v1 memory or cgroup v2)")
)

// LimitError names a bad limit value and says what is accepted instead.
type LimitError struct {
	Field  string // "memory", "cpus" or "pids"
	Value  string // the value as given (or formatted, for Tighten)
	Max    string // set when Value exceeds a maximum
	Reason string // what is wrong and what is accepted, when Max is empty
}

func (e *LimitError) Error() string {
	if e.Max != "" {
		return fmt.Sprintf("%s %s exceeds the maximum %s", e.Field, e.Value, e.Max)
	}
	return fmt.Sprintf("invalid %s limit %q: %s", e.Field, e.Value, e.Reason)
}

// Unwrap lets errors.Is match ErrInvalidLimit, and ErrExceedsMaximum when Max is set.
func (e *LimitError) Unwrap() []error {
	if e.Max != "" {
		return []error{ErrInvalidLimit, ErrExceedsMaximum}
	}
	return []error{ErrInvalidLimit}
}
