package rootfs

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of the image store. Check them with errors.Is; the CLI
// maps ErrBadReference to exit code 2 and the others to 3.
var (
	// ErrBadReference: the image reference cannot be parsed or names a
	// transport forge does not accept.
	ErrBadReference = errors.New("bad image reference")
	// ErrRegistryUnreachable: a docker:// registry could not be reached.
	ErrRegistryUnreachable = errors.New("registry unreachable")
	// ErrImageNotFound: no image in the store (or archive) matches.
	ErrImageNotFound = errors.New("image not found")
	// ErrImageInUse: the image backs a shared rootfs held by a live process.
	ErrImageInUse = errors.New("image in use")
	// ErrCorruptArchive: an archive or layout is corrupt or truncated; the
	// import was rolled back.
	ErrCorruptArchive = errors.New("corrupt or truncated image archive")
	// ErrTooLarge: a committed layer would be over the maximum image size.
	ErrTooLarge = errors.New("image too large")
	// ErrUnknownSuite: bootstrap was asked for a Debian suite it does not
	// know (see Suites).
	ErrUnknownSuite = errors.New("unknown Debian suite")
)

// acceptedForms lists the reference forms ParseReference accepts; error
// messages repeat it so the user sees what to type.
const acceptedForms = `accepted forms: docker://NAME[:TAG|@DIGEST], oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE[:NAME:TAG]`

// RefError is a reference that cannot be used. It matches ErrBadReference.
type RefError struct {
	Ref        string
	Reason     string
	Suggestion string // a corrected reference, if one is likely
	Err        error  // underlying parse error, if any
}

func (e *RefError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bad image reference %q: %s", e.Ref, e.Reason)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Suggestion != "" {
		fmt.Fprintf(&b, "; did you mean %q?", e.Suggestion)
	}
	b.WriteString(" (" + acceptedForms + ")")
	return b.String()
}

func (e *RefError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrBadReference) true.
func (e *RefError) Is(target error) bool { return target == ErrBadReference }

// RegistryError reports that a registry could not be reached. It matches
// ErrRegistryUnreachable.
type RegistryError struct {
	Registry string
	Err      error
}

func (e *RegistryError) Error() string {
	return fmt.Sprintf("registry %s could not be reached (%v); `forge image import` of an archive (oci:, oci-archive:, docker-archive:) works offline", e.Registry, e.Err)
}

func (e *RegistryError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRegistryUnreachable) true.
func (e *RegistryError) Is(target error) bool { return target == ErrRegistryUnreachable }

// InUseError names who holds the image. It matches ErrImageInUse.
type InUseError struct {
	Image string
	// Users describes each holder, e.g. "this process (pid 42), 2 sandboxes".
	Users []string
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("image %s is in use by %s", e.Image, strings.Join(e.Users, "; "))
}

// Is makes errors.Is(err, ErrImageInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrImageInUse }
