package seccomp

import "errors"

var (
	// ErrUnsupported is returned by Check in builds without seccomp support:
	// the sandbox runtime must refuse to start rather than run unfiltered.
	ErrUnsupported = errors.New("forge was built without seccomp support; refusing to start sandboxes (build with -tags seccomp)")

	// ErrKernelUnsupported is returned by Check when the kernel lacks seccomp filters.
	ErrKernelUnsupported = errors.New("the kernel does not support seccomp filters (CONFIG_SECCOMP_FILTER); refusing to start sandboxes")

	// ErrInvalidProfile wraps every problem found in a custom profile.
	ErrInvalidProfile = errors.New("invalid seccomp profile")

	// ErrUnsupportedArch is returned when forge does not know the seccomp
	// architecture of the CPU it was built for.
	ErrUnsupportedArch = errors.New("no seccomp architecture known for this GOARCH")
)
