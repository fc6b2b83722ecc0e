//go:build linux && cgo && seccomp

package seccomp

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Enabled is true in builds that can install seccomp filters (the `seccomp`
// build tag with cgo and libseccomp).
const Enabled = true

// Check reports whether sandboxes can be filtered: nil here unless the
// kernel lacks seccomp filter support.
func Check() error {
	// PR_GET_SECCOMP fails with EINVAL when the kernel has no seccomp at all.
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return ErrKernelUnsupported
		}
		return fmt.Errorf("probing seccomp support: %w", err)
	}
	return nil
}
