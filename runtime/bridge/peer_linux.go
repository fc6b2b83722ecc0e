package bridge

import (
	"net"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/internal/peercred"
)

// admit checks the peer of a new connection: it must be a process of the
// grant's sandbox (its cgroup) running as the sandbox user. Anyone else,
// such as a local user who got hold of the socket's uid or a process of
// another sandbox, has the connection closed and is audited.
func (g *Grant) admit(c net.Conn) bool {
	p, err := peercred.Of(c)
	defer p.Close()
	if err == nil {
		err = p.Check(g.sb)
	}
	if err == nil {
		return true
	}
	c.Close()
	g.refuse(p, err)
	return false
}

// refuse audits a refused connection; like ungranted calls, the first
// maxViolations are audited one by one, then one summary.
func (g *Grant) refuse(p peercred.Peer, why error) {
	ev := audit.Event{Event: audit.EventSecurityViolation, Severity: audit.SeverityCritical, SandboxID: g.sandboxID,
		Reason: "connection to the sandbox's bridge socket from outside the sandbox refused: " + why.Error(),
		Fields: map[string]any{"peer_pid": p.PID, "peer_uid": p.UID, "peer_gid": p.GID}}
	if !g.auditCapped(&g.refusals, ev, "%d connections from outside the sandbox refused; further ones are refused without audit") {
		return
	}
	g.b.log.Warn("bridge: refused a connection from outside the sandbox", "sandbox", g.sandboxID,
		"peer_pid", p.PID, "peer_uid", p.UID, "err", why)
}
