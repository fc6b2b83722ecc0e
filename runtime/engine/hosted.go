package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// What runtime/hosted needs of the engine: sandboxes with forge's own
// snapshots mounted read-only, inside the engine's admission and limits.
// The hosted package keeps its own pools (keyed by the tools module) and
// decides what runs in them; the engine only starts and removes sandboxes.

// StartHosted starts a sandbox of image (images.allowed applies) with binds
// mounted read-only under /run/forge and limits tightened to memory (0 =
// the default). In zygote mode it is a child of a template that has the
// binds mounted and imported warm (forge's own modules, from the binds:
// never the tools module itself), for ctx's tenant (HostedContext). The
// caller owns it: Discard it when done.
func (e *Engine) StartHosted(ctx context.Context, image string, memory int64, binds []sandbox.Bind, warm []string) (*sandbox.Sandbox, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.inflight.Add(-1)
	plan, err := e.validate(Request{Principal: LocalPrincipal, Image: image, Memory: memory})
	if err != nil {
		return nil, refuse(err)
	}
	sb, err := e.startSandbox(context.WithValue(ctx, templateBindsKey{}, hostedStart{warm: warm}), plan.Image, binds...)
	if err != nil {
		return nil, refuse(err)
	}
	if err := sb.SetLimits(plan.Limits); err != nil {
		e.destroy(sb)
		return nil, err
	}
	return sb, nil
}

// templateBindsKey marks the context of a hosted sandbox's start: in
// zygote mode it is forked from a template that has its binds mounted
// (sandbox.Config.TemplateBinds), one per tools snapshot and tenant.
type templateBindsKey struct{}

// hostedStart is the value of templateBindsKey: warm is what the template
// imports (sandbox.Config.TemplateWarm).
type hostedStart struct{ warm []string }

func templateBinds(ctx context.Context) (warm []string, ok bool) {
	h, ok := ctx.Value(templateBindsKey{}).(hostedStart)
	return h.warm, ok
}

// HostedContext is ctx for the hosted sandboxes of p's calls: with
// templates per tenant (TenantPools), they fork from p's tenant's own.
func (e *Engine) HostedContext(ctx context.Context, p Principal) context.Context {
	return withTenant(ctx, p)
}

// RetireHosted retires the zygote templates that have source (a tools
// snapshot no longer served) mounted; their live children finish.
func (e *Engine) RetireHosted(source string) { e.rt.RetireBinds(source) }

// Discard destroys a sandbox StartHosted made, off the caller's path.
func (e *Engine) Discard(sb *sandbox.Sandbox) { e.destroy(sb) }

// Admit takes an execution slot (execution.max_concurrent) for one hosted
// call, as a stateless run would; release gives it back.
func (e *Engine) Admit(ctx context.Context) (release func(), err error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	if err := e.admit(ctx); err != nil {
		e.inflight.Add(-1)
		return nil, refuse(err)
	}
	return func() { <-e.slots; e.inflight.Add(-1) }, nil
}

// CallTimeout caps a hosted tool's timeout at execution.max_timeout; 0
// means def.
func (e *Engine) CallTimeout(t, def time.Duration) time.Duration {
	if t <= 0 {
		t = def
	}
	if m := time.Duration(e.cfg.Execution.MaxTimeout); m > 0 && t > m {
		t = m
	}
	return t
}

// Audit is the engine's audit log.
func (e *Engine) Audit() *audit.Logger { return e.audit }

// CheckImage says whether image may run (images.allowed).
func (e *Engine) CheckImage(image string) error {
	if image == "" {
		image = e.cfg.Images.Default
	}
	if !e.cfg.Images.Allowed(image) {
		return refuse(fmt.Errorf("%w: image %q is not allowed; allowed: %s (images.allowed)", ErrInvalidRequest, image, strings.Join(e.cfg.Images.AllowedPatterns, ", ")))
	}
	return nil
}

// HostedLimits are the cgroup limits of a hosted call with memory bytes (0
// = the default), checked against the maxima.
func (e *Engine) HostedLimits(memory int64) (cgroups.Limits, error) {
	plan, err := e.validate(Request{Principal: LocalPrincipal, Memory: memory})
	return plan.Limits, refuse(err)
}

// HostedImageID is the store ID of the image a hosted sandbox of image
// runs (the default image for ""): a cached tool table is keyed by it, so
// that a new image reads the table again.
func (e *Engine) HostedImageID(ctx context.Context, image string) (string, error) {
	plan, err := e.validate(Request{Principal: LocalPrincipal, Image: image})
	if err != nil {
		return "", refuse(err)
	}
	img, err := e.store.Lookup(ctx, plan.Image)
	if err != nil {
		return "", err
	}
	return img.ID, nil
}
