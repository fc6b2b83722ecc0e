package build

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors of builds. The faces map ErrInvalid, ErrRefused and
// ErrNotFound to usage errors (exit 2, a tool error the agent can fix),
// ErrRateLimited and ErrBusy to retry-later tool errors, the rest to
// infrastructure errors (exit 3).
var (
	// ErrInvalid: a bad name, spec, preset or base image.
	ErrInvalid = errors.New("invalid build request")
	// ErrRefused: the package policy refused the request.
	ErrRefused = errors.New("build refused by policy")
	// ErrNotFound: no environment of this principal has the name.
	ErrNotFound = errors.New("environment not found")
	// ErrInUse: the environment backs a running sandbox.
	ErrInUse = errors.New("environment in use")
	// ErrRateLimited: the principal started too many builds in the period.
	ErrRateLimited = errors.New("too many builds")
	// ErrBusy: environment_builder.max_concurrent builds are running.
	ErrBusy = errors.New("too many builds running")
	// ErrInstall: the installer failed (a package the index lacks, an
	// index that cannot be reached, a package that does not build).
	ErrInstall = errors.New("installing packages failed")
	// ErrUnresolvable: the installer found no versions that satisfy the
	// request (a package the index does not have): the request's to fix.
	// It comes with ErrInstall.
	ErrUnresolvable = errors.New("no matching packages")
	// ErrTimeout: the build ran past environment_builder.build_timeout.
	ErrTimeout = errors.New("build timed out")
	// ErrTooLarge: the new layer is over environment_builder.max_image_size.
	ErrTooLarge = errors.New("environment too large")
	// ErrScan: the scanner found critical vulnerabilities.
	ErrScan = errors.New("vulnerability scan rejected the environment")
	// ErrNoSpace: a device the build writes to is full (ENOSPC) or over
	// its quota (EDQUOT). It comes with a *NoSpaceError.
	ErrNoSpace = errors.New("no space left on device")
	// ErrDisabled: environment_builder.enabled is false.
	ErrDisabled = errors.New("environment builds are disabled")
)

// RateLimitError says when the principal may build again. It matches
// ErrRateLimited.
type RateLimitError struct {
	Builds     int
	Period     time.Duration
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("%v: %d builds per %s (environment_builder.builds_per_period); retry in %s",
		ErrRateLimited, e.Builds, e.Period, e.RetryAfter.Round(time.Second))
}

func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// InstallError is the installer's own account of what failed, trimmed to
// the lines that matter. It matches ErrInstall.
type InstallError struct {
	Tool   string // uv or pip
	Status int
	Output string
	// Unresolvable: the index answered, without what was asked for.
	Unresolvable bool
}

func (e *InstallError) Error() string {
	return fmt.Sprintf("%v: %s exited with status %d: %s", ErrInstall, e.Tool, e.Status, e.Output)
}

func (e *InstallError) Unwrap() []error {
	if e.Unresolvable {
		return []error{ErrInstall, ErrUnresolvable}
	}
	return []error{ErrInstall}
}

// NoSpaceError names the full device a build wrote to: the image store
// (the scratch layer, the committed layer), the store's temp dir (the
// layer's diff on its way in), the uv cache, or the build sandbox's /tmp.
// It matches ErrNoSpace and the underlying error.
type NoSpaceError struct {
	What  string // "the image store", "the uv cache", ...
	Path  string // a host path on the full device ("" for the sandbox's /tmp)
	Hint  string // what to change besides freeing space
	Quota bool   // EDQUOT rather than ENOSPC
	Err   error
}

func (e *NoSpaceError) Error() string {
	why := "no space left on the device holding"
	if e.Quota {
		why = "disk quota exceeded on the device holding"
	}
	where := e.What
	if e.Path != "" {
		where += " (" + e.Path + ")"
	}
	return fmt.Sprintf("%s %s; free space there or %s; nothing was kept: %v", why, where, e.Hint, e.Err)
}

func (e *NoSpaceError) Unwrap() []error { return []error{ErrNoSpace, e.Err} }
