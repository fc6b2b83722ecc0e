// Package peercred tells who is at the other end of a unix socket: the
// process the kernel recorded at connect(2) (SO_PEERCRED) and, where the
// kernel has it, a pidfd of that same process (SO_PEERPIDFD), so a check of
// the pid's /proc entry can be proven to be about the connecting process.
// runtime/bridge and runtime/egress admit only their sandbox's processes
// with it.
package peercred

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of an accepted connection.
type Peer struct {
	PID, UID, GID int
	pidfd         int // -1 when the kernel has no SO_PEERPIDFD (before 6.5)
}

// Of reads the connection's SO_PEERCRED and, where the kernel has it, a
// pidfd of the same process. Close the Peer when done.
func Of(c net.Conn) (Peer, error) {
	p := Peer{pidfd: -1}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return p, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return p, err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		var cred *unix.Ucred
		if cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); serr != nil {
			return
		}
		p.PID, p.UID, p.GID = int(cred.Pid), int(cred.Uid), int(cred.Gid)
		if soPeerPidfd != 0 {
			if fd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd); err == nil {
				p.pidfd = fd
			}
		}
	})
	return p, errors.Join(err, serr)
}

// Close releases the pidfd.
func (p Peer) Close() {
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
	}
}

// Alive reports an error when the peer has exited: its pid may then name
// another process by now, and what was read about it proves nothing.
func (p Peer) Alive() error {
	if p.pidfd < 0 {
		return nil
	}
	if err := unix.PidfdSendSignal(p.pidfd, 0, nil, 0); err != nil {
		return fmt.Errorf("the connecting process exited before it was checked: %w", err)
	}
	return nil
}

// Owner is what a peer must belong to: a sandbox's host uid/gid and its
// processes (*sandbox.Sandbox is one).
type Owner interface {
	HostUID() int
	HostGID() int
	// OwnsProcess reports whether a host pid is a process of the sandbox.
	OwnsProcess(pid int) (bool, error)
}

// Check reports why p is not a live process of o running as o's user, or
// nil when it is.
func (p Peer) Check(o Owner) error {
	if p.UID != o.HostUID() || p.GID != o.HostGID() {
		return fmt.Errorf("peer runs as host uid %d gid %d, not the sandbox user's %d:%d", p.UID, p.GID, o.HostUID(), o.HostGID())
	}
	ok, err := o.OwnsProcess(p.PID)
	if err != nil {
		return fmt.Errorf("reading the peer's cgroup: %w", err)
	}
	if !ok {
		return errors.New("peer is not in the sandbox's cgroup")
	}
	return p.Alive()
}
