// Package proc answers the questions about host processes that every layer
// asks when it cleans up after forge processes that died: is a pid alive,
// and did a dead forge process make this name ("<pid>-<random>", as forge
// names sandboxes and their bridge directories).
package proc

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Alive reports whether pid exists. A reused pid only makes clean-up keep
// garbage longer, never remove what a live process uses.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// OwnerPid is the forge process named at the start of name ("<pid>-…").
func OwnerPid(name string) (int, bool) {
	p, _, ok := strings.Cut(name, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pid > 0
}

// DeadOwner reports whether name was made by a forge process, other than
// this one, that is gone.
func DeadOwner(name string) bool {
	pid, ok := OwnerPid(name)
	return ok && pid != os.Getpid() && !Alive(pid)
}
