//go:build !linux || !cgo || !seccomp

package seccomp

// Enabled is false: this build cannot install seccomp filters.
const Enabled = false

// Check returns ErrUnsupported: a build without seccomp fails closed and
// never runs a sandbox unfiltered.
func Check() error {
	return ErrUnsupported
}
