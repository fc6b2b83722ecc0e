package engine

import (
	"context"
	"fmt"

	"github.com/mcp-forge/forge/runtime/egress"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// EgressProxy is the process's one egress proxy: builds reach their
// package index through it too (with a policy of that index's hosts).
func (e *Engine) EgressProxy() *egress.Proxy { return e.proxy }

// EgressPolicy is the default profile's egress allowlist
// (execution.egress): what a request's Egress must stay within.
func (e *Engine) EgressPolicy() egress.Policy { return e.egress }

// egressPossible reports whether any execution can have egress, which
// gives every sandbox a bridge directory for the socket.
func (e *Engine) egressPossible() bool { return !e.egress.IsNone() }

// setEgress gives sb the policy pol (none turns egress off).
func (e *Engine) setEgress(ctx context.Context, sb *sandbox.Sandbox, pol egress.Policy, who egress.Who) error {
	if pol.IsNone() && sb.EgressPolicy().IsNone() {
		return nil
	}
	if err := sb.SetEgress(ctx, &sandbox.Egress{Proxy: e.proxy, Policy: pol, Who: who}); err != nil {
		return fmt.Errorf("egress of sandbox %s: %w", sb.ID(), err)
	}
	return nil
}

// sessionEgress is the policy of a session call: the request's when it
// names one (which then becomes the session's), else the one the session
// was given before, else the profile's. A stored policy is kept within
// the profile's as the configuration is now: a narrowed config narrows
// old sessions too.
func (e *Engine) sessionEgress(req Request, plan Plan, stored []string) (egress.Policy, []string, error) {
	if req.Egress != nil {
		return plan.Egress, plan.Egress.Strings(), nil
	}
	if stored == nil {
		return plan.Egress, nil, nil
	}
	pol, err := egress.ParsePolicy(stored)
	if err != nil {
		return egress.Policy{}, stored, fmt.Errorf("the session's saved egress policy %q: %w", stored, err)
	}
	return e.egress.Narrow(pol), stored, nil
}
