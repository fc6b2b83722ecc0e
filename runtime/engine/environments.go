package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-forge/forge/runtime/build"
)

// Builder builds and lists custom environments (runtime/build).
func (e *Engine) Builder() *build.Builder { return e.builder }

// Installer is what builds install with: uv, or pip when uv is missing.
func (e *Engine) Installer() string { return e.builder.Installer() }

// BuildEnvironment builds p's environment (or finds it in the cache).
// Errors the caller must fix (names, policy, limits) are *RefusedError.
func (e *Engine) BuildEnvironment(ctx context.Context, p Principal, req build.Request) (*build.Result, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	req.Principal = p.Tenant
	res, err := e.builder.Build(ctx, req)
	return res, refuse(err)
}

// ListEnvironments lists p's environments.
func (e *Engine) ListEnvironments(ctx context.Context, p Principal) ([]build.Environment, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	list, err := e.builder.List(ctx, p.Tenant)
	return list, refuse(err)
}

// Environment is p's environment name.
func (e *Engine) Environment(ctx context.Context, p Principal, name string) (*build.Environment, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	env, err := e.builder.Get(ctx, p.Tenant, name)
	return env, refuse(err)
}

// RemoveEnvironment removes p's environment name; the warm pool of an
// environment nobody else holds goes first.
func (e *Engine) RemoveEnvironment(ctx context.Context, p Principal, name string) error {
	if err := p.check(); err != nil {
		return refuse(err)
	}
	env, err := e.builder.Get(ctx, p.Tenant, name)
	if err != nil {
		return refuse(err)
	}
	e.dropPool(poolKey(env.Image, e.tenantOf(withTenant(ctx, p))))
	return refuse(e.builder.Remove(ctx, p.Tenant, name))
}

// GCEnvironments removes environments unused for age (0: the configured
// environment_builder.gc_age).
func (e *Engine) GCEnvironments(ctx context.Context, age time.Duration) ([]string, error) {
	return e.builder.GC(ctx, age)
}

// resolveImage turns the request's image (an image or an environment
// name) and preset into the image to run, building a preset's
// environment on first use when builds are enabled.
func (e *Engine) resolveImage(ctx context.Context, req *Request) error {
	if req.Environment != "" {
		if req.Image != "" {
			return fmt.Errorf("%w: custom_image %q and environment %q both name what to run in; give one", ErrInvalidRequest, req.Image, req.Environment)
		}
		img, err := e.presetImage(ctx, req)
		if err != nil {
			return err
		}
		req.Image = img
		return nil
	}
	if req.Image == "" {
		return nil
	}
	if env := build.ImageName(req.Principal.Tenant, req.Image); build.ValidName(req.Image) != nil || !e.cfg.Images.Allowed(env) {
		if !e.cfg.Images.Allowed(req.Image) {
			return nil // validate refuses it, naming images.allowed
		}
	}
	img, err := e.builder.Resolve(ctx, req.Principal.Tenant, req.Image)
	if err != nil {
		return err
	}
	if img != req.Image || isEnvironment(img) {
		e.builder.Touch(img)
	}
	req.Image = img
	return nil
}

func isEnvironment(image string) bool {
	return len(image) > len(build.Repo) && image[:len(build.Repo)] == build.Repo
}

// presetImage is the environment of the request's preset: the one
// built, or built now (a cache hit when its packages did not change).
func (e *Engine) presetImage(ctx context.Context, req *Request) (string, error) {
	name := req.Environment
	if _, ok := e.builder.Presets()[name]; !ok {
		_, err := e.builder.Packages(name, nil)
		return "", fmt.Errorf("%w: environment: %w", ErrInvalidRequest, err)
	}
	if !e.cfg.EnvironmentBuilder.Enabled {
		env, err := e.builder.Get(ctx, req.Principal.Tenant, name)
		if errors.Is(err, build.ErrNotFound) {
			return "", fmt.Errorf("%w: preset %q is not built and environment_builder.enabled is false; build it with `forge env build %s --preset %s`",
				ErrInvalidRequest, name, name, name)
		}
		if err != nil {
			return "", err
		}
		e.builder.Touch(env.Image)
		return env.Image, nil
	}
	res, err := e.builder.Build(ctx, build.Request{Principal: req.Principal.Tenant, Client: req.Client, Name: name,
		Preset: name, Progress: buildProgress(req.Progress), Description: "preset " + name, Approver: req.Approver})
	if err != nil {
		return "", fmt.Errorf("environment %q: %w", name, err)
	}
	return res.Image, nil
}

// dropPool closes the warm pool of key (poolKey), if there is one.
func (e *Engine) dropPool(key string) {
	e.mu.Lock()
	p := e.pools[key]
	delete(e.pools, key)
	delete(e.poolUsed, key)
	e.mu.Unlock()
	if p != nil {
		if err := p.Close(); err != nil {
			e.log.Warn("closing the warm pool", "image", poolImage(key), "err", err)
		}
	}
}

// shrinkIdlePools closes the warm pools of environments, and of tenants
// (with templates per tenant), unused for pool.max_idle_age: an environment
// or tenant used once should not hold sandboxes for ever. The default and
// data images keep their one shared pool.
func (e *Engine) shrinkIdlePools(now time.Time) {
	idle := time.Duration(e.cfg.Pool.MaxIdleAge)
	e.mu.Lock()
	var drop []string
	for key, used := range e.poolUsed {
		if (isEnvironment(poolImage(key)) || key != poolImage(key)) && now.Sub(used) > idle {
			drop = append(drop, key) // an environment's, or a tenant's (tenant.go)
		}
	}
	e.mu.Unlock()
	for _, key := range drop {
		e.log.Debug("idle warm pool shrinks to zero", "image", poolImage(key))
		e.dropPool(key)
	}
}

// shrinkLoop runs shrinkIdlePools until the engine closes.
func (e *Engine) shrinkLoop() {
	tick := time.NewTicker(max(time.Duration(e.cfg.Pool.MaxIdleAge)/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-e.done:
			return
		case now := <-tick.C:
			e.shrinkIdlePools(now)
		}
	}
}

// buildProgress reports a build's steps as a request's progress messages.
func buildProgress(report func(Progress)) func(step, total int, message string) {
	if report == nil {
		return nil
	}
	return func(step, total int, message string) {
		report(Progress{Message: fmt.Sprintf("building the environment (%d/%d): %s", step, total, message)})
	}
}
