package sandbox

import (
	"context"
	"fmt"

	"github.com/mcp-forge/forge/runtime/egress"
)

// Egress is a sandbox's way out: its socket on the egress proxy, under a
// policy. A sandbox with one needs a BridgeDir (the socket is made there
// and seen inside as /run/forge/egress.sock).
type Egress struct {
	Proxy  *egress.Proxy
	Policy egress.Policy
	Who    egress.Who
}

// SetEgress gives the sandbox egress under e's policy: the first time it
// opens the sandbox's socket on e.Proxy and has the agent start its
// loopback forwarder and set HTTP_PROXY, HTTPS_PROXY (and lower case) for
// the code; later it only replaces the policy and who is audited. nil, or
// a policy that allows nothing, closes the socket and unsets the
// variables. The socket is closed when the sandbox is destroyed.
func (s *Sandbox) SetEgress(ctx context.Context, e *Egress) error {
	s.egressMu.Lock()
	defer s.egressMu.Unlock()
	if e == nil || e.Policy.IsNone() {
		if s.egress == nil {
			return nil
		}
		if _, err := s.client.Egress(ctx, ""); err != nil {
			return fmt.Errorf("turning off egress of sandbox %s: %w", s.id, err)
		}
		err := s.egress.Close()
		s.egress = nil
		return err
	}
	if s.egress != nil {
		s.egress.SetPolicy(e.Policy)
		s.egress.SetWho(e.Who)
		return nil
	}
	if s.bridgeDir == "" {
		return fmt.Errorf("egress for sandbox %s: it has no bridge directory (Config.BridgeDir): %w", s.id, ErrInvalidConfig)
	}
	l, err := e.Proxy.Serve(s, e.Policy, e.Who)
	if err != nil {
		return err
	}
	if _, err := s.client.Egress(ctx, egress.SandboxSocketPath); err != nil {
		l.Close()
		return fmt.Errorf("starting the egress forwarder of sandbox %s: %w", s.id, err)
	}
	s.egress = l
	return nil
}

// EgressPolicy is the policy of the sandbox's egress socket; the zero
// Policy when it has none.
func (s *Sandbox) EgressPolicy() egress.Policy {
	s.egressMu.Lock()
	defer s.egressMu.Unlock()
	if s.egress == nil {
		return egress.Policy{}
	}
	return s.egress.Policy()
}

// closeEgress closes the egress socket of a sandbox being destroyed.
func (s *Sandbox) closeEgress() {
	s.egressMu.Lock()
	l := s.egress
	s.egress = nil
	s.egressMu.Unlock()
	if l != nil {
		if err := l.Close(); err != nil {
			s.rt.log.Warn("closing the egress socket", "sandbox", s.id, "err", err)
		}
	}
}
