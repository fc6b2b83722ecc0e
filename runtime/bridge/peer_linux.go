package bridge

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/audit"
)

// peer is the process at the other end of an accepted connection, as the
// kernel recorded it at connect(2).
type peer struct {
	pid, uid, gid int
	pidfd         int // -1 when the kernel has no SO_PEERPIDFD (before 6.5)
}

// peerOf reads the connection's SO_PEERCRED and, where the kernel has it,
// a pidfd of the same process (SO_PEERPIDFD), which tells whether the pid
// still names that process after its /proc entry was read.
func peerOf(c net.Conn) (peer, error) {
	p := peer{pidfd: -1}
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
		p.pid, p.uid, p.gid = int(cred.Pid), int(cred.Uid), int(cred.Gid)
		if soPeerPidfd != 0 {
			if fd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd); err == nil {
				p.pidfd = fd
			}
		}
	})
	return p, errors.Join(err, serr)
}

func (p peer) close() {
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
	}
}

// alive reports an error when the peer has exited: its pid may then name
// another process by now, and what was read about it proves nothing.
func (p peer) alive() error {
	if p.pidfd < 0 {
		return nil
	}
	if err := unix.PidfdSendSignal(p.pidfd, 0, nil, 0); err != nil {
		return fmt.Errorf("the connecting process exited before it was checked: %w", err)
	}
	return nil
}

// admit checks the peer of a new connection: it must be a process of the
// grant's sandbox (its cgroup) running as the sandbox user. Anyone else,
// such as a local user who got hold of the socket's uid or a process of
// another sandbox, has the connection closed and is audited.
func (g *Grant) admit(c net.Conn) bool {
	p, err := peerOf(c)
	defer p.close()
	if err == nil {
		err = g.checkPeer(p)
	}
	if err == nil {
		return true
	}
	c.Close()
	g.refuse(p, err)
	return false
}

func (g *Grant) checkPeer(p peer) error {
	if p.uid != g.sb.HostUID() || p.gid != g.sb.HostGID() {
		return fmt.Errorf("peer runs as host uid %d gid %d, not the sandbox user's %d:%d", p.uid, p.gid, g.sb.HostUID(), g.sb.HostGID())
	}
	ok, err := g.sb.OwnsProcess(p.pid)
	if err != nil {
		return fmt.Errorf("reading the peer's cgroup: %w", err)
	}
	if !ok {
		return errors.New("peer is not in the sandbox's cgroup")
	}
	return p.alive()
}

// refuse audits a refused connection; like ungranted calls, the first
// maxViolations are audited one by one, then one summary.
func (g *Grant) refuse(p peer, why error) {
	ev := audit.Event{Event: audit.EventSecurityViolation, Severity: audit.SeverityCritical, SandboxID: g.sandboxID,
		Reason: "connection to the sandbox's bridge socket from outside the sandbox refused: " + why.Error(),
		Fields: map[string]any{"peer_pid": p.pid, "peer_uid": p.uid, "peer_gid": p.gid}}
	if !g.auditCapped(&g.refusals, ev, "%d connections from outside the sandbox refused; further ones are refused without audit") {
		return
	}
	g.b.log.Warn("bridge: refused a connection from outside the sandbox", "sandbox", g.sandboxID,
		"peer_pid", p.pid, "peer_uid", p.uid, "err", why)
}
