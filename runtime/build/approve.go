package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/build/policy"
)

// Approver asks a person whether one build may install packages that
// match environment_builder.approval_packages (environment_builder.approval:
// elicit). The face supplies one per request, since only it knows whether
// its client can ask anyone (MCP elicitation); runtime/ stays free of it.
type Approver interface {
	// ApproveBuild asks about a. An error wrapping ErrCannotAsk means
	// nobody could be asked (the client lacks the capability); any other
	// error is a failure of the asking.
	ApproveBuild(ctx context.Context, a Approval) (Decision, error)
}

// ErrCannotAsk: the request's client cannot ask a person (an MCP client
// without the elicitation capability, the CLI, the REST API).
var ErrCannotAsk = errors.New("the client cannot ask a person")

// Approval is what a person is asked to approve.
type Approval struct {
	Principal   string
	Environment string   // the environment's name
	Image       string   // its image, forge/custom...:NAME
	Packages    []string // the normalized names that need approval
	Patterns    []string // the approval pattern that matched each
	Requested   []string // every requirement of the build
}

// Decision is the person's answer.
type Decision struct {
	Approved bool
	Action   string // the client's word for it: accept, decline, cancel
	By       string // who answered, for the audit log (the client's name)
}

// approvedLabel lists the packages a person approved for the build that
// made the image: a later request for the same environment (a preset
// used again, a cache hit) is not asked twice.
const approvedLabel = "forge.env.approved"

// approve gets a person's approval of the plan's pending packages, or the
// refusal that says why not. hit is the cached image of the plan's hash,
// if any: what a person approved for it stays approved.
func (b *Builder) approve(ctx context.Context, req Request, p *plan, hitLabels map[string]string) error {
	var prior []string
	if hitLabels != nil {
		json.Unmarshal([]byte(hitLabels[approvedLabel]), &prior)
	}
	if !slices.ContainsFunc(p.pending, func(n string) bool { return !slices.Contains(prior, n) }) {
		p.approved = prior
		return nil
	}
	names := strings.Join(p.pending, ", ")
	refusal := func(detail string) error {
		return fmt.Errorf("%w: %w", ErrRefused, &policy.Refusal{Package: names, Rule: policy.RuleApproval,
			Pattern: strings.Join(p.patterns, ", "), Setting: policy.SettingApproval, Detail: detail})
	}
	if req.Approver == nil {
		return refusal(b.cannotAsk("this request comes from no MCP client that could ask"))
	}
	d, err := req.Approver.ApproveBuild(ctx, Approval{Principal: req.Principal, Environment: req.Name, Image: p.image,
		Packages: slices.Clone(p.pending), Patterns: slices.Clone(p.patterns), Requested: slices.Clone(p.specs)})
	if errors.Is(err, ErrCannotAsk) {
		return refusal(b.cannotAsk(err.Error()))
	}
	if err != nil {
		return fmt.Errorf("asking for approval of %s: %w", names, err)
	}
	ev := audit.Event{Event: audit.EventBuildApproved, Severity: audit.SeverityInfo, Principal: req.Principal, Client: req.Client,
		Image: p.image, Fields: map[string]any{"name": req.Name, "packages": names, "action": clip(d.Action, 20), "by": clip(d.By, 200)}}
	if !d.Approved {
		ev.Event, ev.Severity = audit.EventBuildDeclined, audit.SeverityWarning
		b.opts.Audit.Log(ev)
		return refusal(fmt.Sprintf("it matches the approval pattern %q (%s) and the person did not approve it when asked (%s); nothing was built",
			strings.Join(p.patterns, ", "), policy.SettingApprove, clip(d.Action, 20)))
	}
	b.opts.Audit.Log(ev)
	p.approved = slices.Clone(p.pending)
	return nil
}

func (b *Builder) cannotAsk(why string) string {
	return fmt.Sprintf("it matches environment_builder.approval_packages and needs a person's approval, which forge asks for through MCP elicitation, but %s: "+
		"use a client that supports elicitation, or add it to %s", why, policy.SettingApproved)
}
