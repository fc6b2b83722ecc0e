// Package build makes custom environments: images forge/custom:NAME that
// are a base image plus Python packages installed with uv (or pip).
//
// The package policy (runtime/build/policy) is checked against the
// requested packages before any sandbox starts, and against the full
// resolved dependency set (extras included) before anything is installed:
// the build resolves, checks, then installs exactly the pinned set it
// checked (resolve.go). A build runs in a sandbox like any other (user namespace,
// seccomp, no capabilities, read-only root) whose only writable places are
// the directory the base image's Python imports from (a bind of that
// directory of a scratch layer on the base image) and the host's uv cache
// for that base, plus the static uv binary mounted read-only. Its only
// network is the egress proxy, allowing the index's hosts; offline builds
// get none. The scratch layer is committed as the environment's image with
// labels that say what was asked for, what got installed and from what.
//
// The content hash (policy.Hash: base digest, normalized specs, index,
// Python version) names a build: an environment with an equal hash is a
// cache hit and nothing is built. It covers the request, not the resolved
// pins: a cache hit must be found without a sandbox or the network, which
// resolving needs. The policy still holds for hits: it is applied to the
// cached environment's installed set (its resolved set) on every hit.
package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/internal/lazyre"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/build/policy"
	"github.com/mcp-forge/forge/runtime/egress"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// Options configure a Builder.
type Options struct {
	Store   *rootfs.Store
	Runtime *sandbox.Runtime
	Config  *profiles.Config
	Seccomp *specs.LinuxSeccomp
	// UV is the host path of the static uv binary; "" looks "uv" up in
	// PATH, "none" never uses uv (builds fall back to python3 -m pip).
	// environment_builder.installer pip overrides it.
	UV string
	// Proxy is the egress proxy builds reach the index through; nil
	// means builds have no network (only offline builds work).
	Proxy  *egress.Proxy
	Audit  *audit.Logger
	Logger *slog.Logger
	// Now is the clock of the rate limit (tests).
	Now func() time.Time
}

// Builder builds, lists and removes environments. Safe for concurrent use.
type Builder struct {
	opts  Options
	cfg   profiles.EnvironmentBuilderConfig
	rules policy.Rules
	uv    string // "" when uv is not available
	// caBundle is the host path of the CA bundle builds trust (caBundleOf).
	caBundle string
	dir      string // StateDir/build
	log      *slog.Logger
	slots    chan struct{}

	mu      sync.Mutex
	recent  map[string][]time.Time // build starts per principal, within the rate period
	bases   map[string]*sync.Mutex // held while a build of that base image id runs
	pythons map[string]string      // base image id → "3.11"
	pips    map[string]bool        // base image id → whether it has pip
	running map[string]bool        // image names being built
}

// New prepares a Builder: reads the policy's pattern files and finds uv.
func New(opts Options) (*Builder, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Audit == nil {
		opts.Audit = audit.Discard()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cfg := opts.Config.EnvironmentBuilder
	rules, err := rulesOf(cfg)
	if err != nil {
		return nil, err
	}
	b := &Builder{opts: opts, cfg: cfg, rules: rules, dir: filepath.Join(opts.Config.StateDir, "build"),
		log: opts.Logger, slots: make(chan struct{}, max(cfg.MaxConcurrent, 1)),
		recent: map[string][]time.Time{}, bases: map[string]*sync.Mutex{}, pythons: map[string]string{}, pips: map[string]bool{},
		running: map[string]bool{}}
	switch {
	case opts.UV == "none" || cfg.Installer == "pip":
	case opts.UV == "":
		b.uv, _ = exec.LookPath("uv")
	default:
		b.uv = opts.UV
	}
	b.caBundle = caBundleOf(cfg.CABundle, "/")
	if cfg.Installer == "uv" && b.uv == "" {
		return nil, fmt.Errorf("%w: environment_builder.installer is uv, but there is no uv on PATH; install it (scripts/install-deps.sh does) or set the installer to auto or pip", ErrInvalid)
	}
	if b.uv != "" {
		if b.uv, err = filepath.Abs(b.uv); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(b.dir, "cache"), 0o711); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(b.dir, "used"), 0o700); err != nil {
		return nil, err
	}
	return b, nil
}

func rulesOf(cfg profiles.EnvironmentBuilderConfig) (policy.Rules, error) {
	r := policy.Rules{Allow: slices.Clone(cfg.AllowedPackages), Block: slices.Clone(cfg.BlockedPackages),
		Approve: cfg.ApprovalPackages, Approved: cfg.ApprovedPackages, AllowDirect: cfg.AllowDirectReferences,
		MaxPackages: cfg.MaxPackages}
	for _, f := range cfg.AllowedPackagesFiles {
		pats, err := policy.ReadPatternFile(f, "environment_builder.allowed_packages_files")
		if err != nil {
			return r, err
		}
		r.Allow = append(r.Allow, pats...)
	}
	for _, f := range cfg.BlockedPackagesFiles {
		pats, err := policy.ReadPatternFile(f, "environment_builder.blocked_packages_files")
		if err != nil {
			return r, err
		}
		r.Block = append(r.Block, pats...)
	}
	if err := r.Validate(); err != nil {
		return r, err
	}
	return r, nil
}

// Installer names what builds install with: "uv" or "pip".
func (b *Builder) Installer() string {
	if b.uv != "" {
		return "uv"
	}
	return "pip"
}

// Request is one build.
type Request struct {
	Principal   string
	Client      string // for the audit log
	Name        string
	Packages    []string
	Preset      string // a name of environment_builder.presets
	BaseImage   string // "" = environment_builder.base_image, else images.default
	Description string
	// Progress, when set, hears each step (step of total).
	Progress func(step, total int, message string)
	// Approver asks a person about packages that need approval
	// (environment_builder.approval: elicit); nil: nobody can be asked.
	Approver Approver
}

// Result is a build's outcome.
type Result struct {
	Environment
	Cached   bool          `json:"cached"`
	Duration time.Duration `json:"-"`
	Millis   float64       `json:"build_time_ms"`
}

const progressSteps = 6

func (r *Request) progress(step int, format string, args ...any) {
	if r.Progress != nil {
		r.Progress(step, progressSteps, fmt.Sprintf(format, args...))
	}
}

// plan is a checked request.
type plan struct {
	req    Request
	image  string // forge/custom...:NAME
	reqs   []policy.Requirement
	specs  []string // normalized
	base   rootfs.Image
	python string
	hash   string
	index  string
	target string // site-packages inside the sandbox
	// pending are the packages that need a person's approval (approval:
	// elicit), with the pattern that matched each; approved are those a
	// person approved, recorded on the image.
	pending, patterns, approved []string
}

// Build makes the environment, or finds it in the cache.
func (b *Builder) Build(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	b.opts.Audit.Log(audit.Event{Event: audit.EventBuildRequest, Severity: audit.SeverityInfo, Principal: req.Principal,
		Client: req.Client, Fields: map[string]any{"name": clip(req.Name, 80), "packages": len(req.Packages), "preset": clip(req.Preset, 80)}})
	p, err := b.check(ctx, req)
	if err != nil {
		if errors.Is(err, ErrInvalid) || errors.Is(err, ErrRefused) || errors.Is(err, rootfs.ErrImageNotFound) {
			b.opts.Audit.Log(audit.Event{Event: audit.EventBuildRefused, Severity: audit.SeverityWarning,
				Principal: req.Principal, Client: req.Client, Reason: clip(err.Error(), 500)})
		} else {
			b.failed(req, "", err)
		}
		return nil, err
	}
	hit := b.lookup(ctx, p)
	if hit != nil {
		if err := b.checkCached(p, hit.Labels); err != nil {
			b.opts.Audit.Log(audit.Event{Event: audit.EventBuildRefused, Severity: audit.SeverityWarning,
				Principal: req.Principal, Client: req.Client, Reason: clip(err.Error(), 500)})
			return nil, err
		}
	}
	if len(p.pending) > 0 {
		var labels map[string]string
		if hit != nil {
			labels = hit.Labels
		}
		// Before any sandbox, like the rest of the policy.
		if err := b.approve(ctx, req, p, labels); err != nil {
			if errors.Is(err, ErrRefused) {
				b.opts.Audit.Log(audit.Event{Event: audit.EventBuildRefused, Severity: audit.SeverityWarning,
					Principal: req.Principal, Client: req.Client, Reason: clip(err.Error(), 500)})
			} else {
				b.failed(req, p.hash, err)
			}
			return nil, err
		}
	}
	if env, ok := b.named(ctx, p, hit); ok {
		req.progress(progressSteps, "cache hit: %s is already built (hash %s)", p.image, env.Hash[:12])
		b.Touch(p.image)
		res := &Result{Environment: *env, Cached: true, Duration: time.Since(start)}
		res.Millis = float64(res.Duration.Microseconds()) / 1000
		b.complete(req, res)
		return res, nil
	}
	if b.uv == "" {
		// A cache hit needs no pip; a build does, before it starts.
		if err := b.checkPip(ctx, &p.base, p.req.BaseImage, p.python); err != nil {
			b.opts.Audit.Log(audit.Event{Event: audit.EventBuildRefused, Severity: audit.SeverityWarning,
				Principal: req.Principal, Client: req.Client, Reason: clip(err.Error(), 500)})
			return nil, err
		}
	}
	release, err := b.admit(req.Principal, p.image)
	if err != nil {
		b.opts.Audit.Log(audit.Event{Event: audit.EventBuildRefused, Severity: audit.SeverityWarning,
			Principal: req.Principal, Client: req.Client, Reason: err.Error()})
		return nil, err
	}
	defer release()
	env, err := b.build(ctx, p)
	if errors.Is(err, ErrRefused) {
		b.opts.Audit.Log(audit.Event{Event: audit.EventBuildRefused, Severity: audit.SeverityWarning,
			Principal: req.Principal, Client: req.Client, Reason: clip(err.Error(), 500)})
		return nil, err
	}
	if err != nil {
		b.failed(req, p.hash, err)
		return nil, err
	}
	b.Touch(p.image)
	res := &Result{Environment: *env, Duration: time.Since(start)}
	res.Millis = float64(res.Duration.Microseconds()) / 1000
	req.progress(progressSteps, "built %s in %s", p.image, res.Duration.Round(time.Millisecond))
	b.complete(req, res)
	return res, nil
}

func (b *Builder) complete(req Request, res *Result) {
	b.opts.Audit.Log(audit.Event{Event: audit.EventBuildComplete, Severity: audit.SeverityInfo, Principal: req.Principal,
		Client: req.Client, Image: res.Image, Fields: map[string]any{"hash": res.Hash, "cached": res.Cached,
			"installed": len(res.Installed), "build_time_ms": res.Millis, "scan": res.Scan}})
}

func (b *Builder) failed(req Request, hash string, err error) {
	b.opts.Audit.Log(audit.Event{Event: audit.EventBuildFailed, Severity: audit.SeverityWarning, Principal: req.Principal,
		Client: req.Client, Reason: clip(err.Error(), 500), Fields: map[string]any{"name": clip(req.Name, 80), "hash": hash}})
}

// Packages expands a preset and extra packages into one list.
func (b *Builder) Packages(preset string, extra []string) ([]string, error) {
	var pkgs []string
	if preset != "" {
		t, ok := b.cfg.Presets[preset]
		if !ok {
			names := slices.Sorted(maps.Keys(b.cfg.Presets))
			return nil, fmt.Errorf("%w: unknown preset %q; configured: %s (environment_builder.presets)",
				ErrInvalid, clip(preset, 80), strings.Join(names, ", "))
		}
		pkgs = append(pkgs, t.Packages...)
	}
	pkgs = append(pkgs, extra...)
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%w: no packages: name at least one, or a preset", ErrInvalid)
	}
	return pkgs, nil
}

// Presets are the configured presets (environment_builder.presets).
func (b *Builder) Presets() map[string]profiles.Preset { return b.cfg.Presets }

// check validates the request and the policy; no sandbox starts before it
// passed.
func (b *Builder) check(ctx context.Context, req Request) (*plan, error) {
	if err := ValidName(req.Name); err != nil {
		return nil, err
	}
	if len(req.Description) > 1000 {
		return nil, fmt.Errorf("%w: description is %d bytes, at most 1000", ErrInvalid, len(req.Description))
	}
	pkgs, err := b.Packages(req.Preset, req.Packages)
	if err != nil {
		return nil, err
	}
	if max := b.cfg.MaxPackages; max > 0 && len(pkgs) > max {
		return nil, fmt.Errorf("%w: %d packages, over the limit of %d (environment_builder.max_packages)", ErrRefused, len(pkgs), max)
	}
	reqs, err := policy.ParseAll(pkgs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// With approval: elicit, packages that need approval pass here (every
	// other rule still applies) and a person is asked before anything runs.
	var pending, patterns []string
	var asked map[string]bool
	if b.cfg.Approval == "elicit" {
		pending, patterns = b.rules.Pending(reqs)
		asked = map[string]bool{}
		for _, n := range pending {
			asked[n] = true
		}
	}
	if err := b.rules.Check(reqs, asked); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	p := &plan{req: req, image: ImageName(req.Principal, req.Name), reqs: reqs, pending: pending, patterns: patterns}
	for _, r := range reqs {
		p.specs = append(p.specs, r.String())
	}
	slices.Sort(p.specs)
	if err := b.resolveBase(ctx, p); err != nil {
		return nil, err
	}
	p.index = b.cfg.IndexURL
	if b.cfg.Offline {
		p.index = "offline"
	}
	if b.cfg.Wheelhouse != "" {
		p.index += " find-links=" + b.cfg.Wheelhouse
	}
	p.hash = policy.Hash(p.base.Digest, reqs, p.index, p.python)
	return p, nil
}

// resolveBase finds the base image, which must be allowed and, when it is
// an environment, the principal's own.
func (b *Builder) resolveBase(ctx context.Context, p *plan) error {
	base := p.req.BaseImage
	if base == "" {
		base = b.cfg.BaseImage
	}
	if base == "" {
		base = b.opts.Config.Images.Default
	}
	images := b.opts.Config.Images
	if !images.Allowed(base) {
		return fmt.Errorf("%w: base image %q is not allowed; allowed: %s (images.allowed)", ErrInvalid, clip(base, 200), strings.Join(images.AllowedPatterns, ", "))
	}
	img, err := b.opts.Store.Lookup(ctx, base)
	if err != nil {
		return fmt.Errorf("base image: %w", err)
	}
	if owner, ok := img.Labels[LabelOwner]; ok && owner != p.req.Principal {
		return fmt.Errorf("base image: %w: %q (see `forge image ls`)", rootfs.ErrImageNotFound, base)
	}
	p.base = *img
	p.req.BaseImage = base
	p.python, err = b.pythonOf(ctx, img)
	return err
}

// checkPip refuses, before any sandbox starts, a pip build on a base
// image without pip (Debian's minimal images have none).
func (b *Builder) checkPip(ctx context.Context, img *rootfs.Image, name, python string) error {
	b.mu.Lock()
	ok, known := b.pips[img.ID]
	b.mu.Unlock()
	if !known {
		fs, err := b.opts.Store.Acquire(ctx, img.ID)
		if err != nil {
			return err
		}
		ok = pipIn(fs.Path(), python)
		fs.Release()
		b.mu.Lock()
		b.pips[img.ID] = ok
		b.mu.Unlock()
	}
	if ok {
		return nil
	}
	why := "environment_builder.installer is pip"
	if b.cfg.Installer != "pip" {
		why = "there is no uv on the host, so environment_builder.installer auto means pip"
	}
	return fmt.Errorf("%w: base image %q has no pip for python%s, and %s: build an environment of pip first (forge env build NAME pip) and use it as the base, or set environment_builder.installer to uv",
		ErrInvalid, clip(name, 200), python, why)
}

// pipIn tells whether the image's Python can run python3 -m pip: pip in
// one of the directories Debian's and python.org's Pythons import from.
func pipIn(root, python string) bool {
	for _, dir := range []string{"/usr/local/lib/python" + python + "/dist-packages", "/usr/local/lib/python" + python + "/site-packages",
		"/usr/lib/python3/dist-packages", "/usr/lib/python" + python + "/site-packages"} {
		p, err := securejoin.SecureJoin(root, dir+"/pip/__main__.py")
		if err != nil {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// lookup finds the principal's environment with the plan's hash, the one
// under the plan's name first.
func (b *Builder) lookup(ctx context.Context, p *plan) *rootfs.Image {
	imgs, err := b.opts.Store.Images(ctx)
	if err != nil {
		return nil
	}
	var hit *rootfs.Image
	for i, img := range imgs {
		if img.Labels[LabelHash] != p.hash || img.Labels[LabelOwner] != p.req.Principal {
			continue
		}
		if slices.Contains(img.Names, p.image) {
			return &imgs[i]
		}
		if hit == nil {
			hit = &imgs[i]
		}
	}
	return hit
}

// named is the cache hit img as the plan's environment. One under another
// name gets the plan's name too: the same packages on the same base are
// the same image.
func (b *Builder) named(ctx context.Context, p *plan, img *rootfs.Image) (*Environment, bool) {
	if img == nil {
		return nil, false
	}
	if !slices.Contains(img.Names, p.image) {
		if err := b.opts.Store.SetName(ctx, img.ID, p.image); err != nil {
			b.log.Warn("naming a cached environment", "image", img.ID, "name", p.image, "err", err)
			return nil, false
		}
	}
	env, ok := fromImage(*img, p.image)
	return &env, ok
}

// admit applies the rate limit and the concurrent-build limit.
func (b *Builder) admit(principal, image string) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running[image] {
		return nil, fmt.Errorf("%w: %s is being built right now; retry when that build is done", ErrBusy, image)
	}
	if len(b.slots) == cap(b.slots) {
		return nil, fmt.Errorf("%w: %d builds are running (environment_builder.max_concurrent); retry in a minute", ErrBusy, cap(b.slots))
	}
	now := b.opts.Now()
	if n, period := b.cfg.BuildsPerPeriod, time.Duration(b.cfg.RatePeriod); n > 0 {
		kept := b.recent[principal][:0]
		for _, t := range b.recent[principal] {
			if now.Sub(t) < period {
				kept = append(kept, t)
			}
		}
		b.recent[principal] = kept
		if len(kept) >= n {
			return nil, &RateLimitError{Builds: n, Period: period, RetryAfter: kept[0].Add(period).Sub(now)}
		}
	}
	b.slots <- struct{}{} // b.mu is held: nobody took the free slot
	if b.cfg.BuildsPerPeriod > 0 {
		b.recent[principal] = append(b.recent[principal], now)
	}
	b.running[image] = true
	return func() {
		<-b.slots
		b.mu.Lock()
		delete(b.running, image)
		b.mu.Unlock()
	}, nil
}

// baseLock serializes builds of one principal on one base image: they
// share a uv cache, which each build hands to its own sandbox's uid.
func (b *Builder) baseLock(id string) *sync.Mutex {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.bases[id]
	if m == nil {
		m = &sync.Mutex{}
		b.bases[id] = m
	}
	return m
}

var pythonLinkRE = lazyre.New(`^(?:/usr/bin/)?python(3\.[0-9]{1,2})$`)

// pythonOf reads the base image's Python version from its /usr/bin/python3
// link (Debian's python3 -> python3.11), without starting a sandbox.
func (b *Builder) pythonOf(ctx context.Context, img *rootfs.Image) (string, error) {
	b.mu.Lock()
	v, ok := b.pythons[img.ID]
	b.mu.Unlock()
	if ok {
		return v, nil
	}
	fs, err := b.opts.Store.Acquire(ctx, img.ID)
	if err != nil {
		return "", err
	}
	defer fs.Release()
	v, err = pythonIn(fs.Path())
	if err != nil {
		return "", fmt.Errorf("%w: base image %s: %w", ErrInvalid, img.ID[:12], err)
	}
	b.mu.Lock()
	b.pythons[img.ID] = v
	b.mu.Unlock()
	return v, nil
}

func pythonIn(root string) (string, error) {
	bin, err := securejoin.SecureJoin(root, "/usr/bin")
	if err != nil {
		return "", err
	}
	target, err := os.Readlink(filepath.Join(bin, "python3"))
	if err == nil {
		if m := pythonLinkRE.FindStringSubmatch(target); m != nil {
			return m[1], nil
		}
	}
	for minor := 20; minor >= 6; minor-- {
		v := fmt.Sprintf("3.%d", minor)
		if fi, err := os.Lstat(filepath.Join(bin, "python"+v)); err == nil && fi.Mode().IsRegular() {
			return v, nil
		}
	}
	return "", errors.New("no /usr/bin/python3.N: builds need the image's Python at /usr/bin/python3")
}

// sitePackages is where the image's Python imports installed packages
// from: Debian's /usr/local/lib/python3.N/dist-packages, or site-packages
// where the image has that (python.org builds).
func sitePackages(root, python string) string {
	site := "/usr/local/lib/python" + python + "/site-packages"
	if p, err := securejoin.SecureJoin(root, site); err == nil {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return site
		}
	}
	return "/usr/local/lib/python" + python + "/dist-packages"
}

// Fixed paths of a build sandbox.
const (
	buildDir     = "/opt/forge/build"
	uvMount      = buildDir + "/uv"
	cacheMount   = buildDir + "/cache"
	wheelsMount  = buildDir + "/wheels"
	caMount      = buildDir + "/ca.pem"
	outputLimit  = 1 << 20
	buildTmpSize = 512 << 20
)

// build runs the install in a sandbox on a scratch layer and commits it.
func (b *Builder) build(ctx context.Context, p *plan) (_ *Environment, retErr error) {
	timeout := time.Duration(b.cfg.BuildTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lock := b.baseLock(p.base.ID + "\x00" + p.req.Principal)
	lock.Lock()
	defer lock.Unlock()
	// Other forge processes on the state dir (forge env build beside a
	// server) use the same cache: hold its lock file too.
	unlock, err := lockFile(ctx, b.cacheDir(p)+".lock")
	if err != nil {
		return nil, b.timedOut(ctx, timeout, b.noSpace(fmt.Errorf("waiting for the uv cache: %w", err), b.dir))
	}
	defer unlock()
	p.req.progress(1, "preparing a writable layer on %s", p.req.BaseImage)
	scratch, err := b.opts.Store.NewScratch(ctx, p.base.ID)
	if err != nil {
		return nil, b.noSpace(err, b.opts.Store.StorageDir())
	}
	defer func() {
		if err := scratch.Discard(); err != nil {
			b.log.Warn("removing a build's scratch layer", "image", p.image, "err", err)
		}
	}()
	sb, target, _, err := b.startSandbox(ctx, p, scratch)
	if err != nil {
		return nil, b.timedOut(ctx, timeout, b.noSpace(err, b.opts.Config.StateDir))
	}
	defer sb.Destroy()
	// Resolve, check, then install pinned: the policy sees every package
	// that will be installed, dependencies and extras' included, before
	// any is.
	base, err := distsIn(target)
	if err != nil {
		return nil, err
	}
	p.req.progress(2, "resolving %d package(s) with %s", len(p.specs), b.Installer())
	set, err := b.resolve(ctx, p, sb)
	if err != nil {
		if ie := (*InstallError)(nil); errors.As(err, &ie) {
			err = b.installNoSpace(ie, p)
		}
		return nil, b.timedOut(ctx, timeout, err)
	}
	if err := b.checkResolved(ctx, p, set); err != nil {
		return nil, err
	}
	p.req.progress(3, "installing %d pinned package(s) with %s", len(set), b.Installer())
	installed, err := b.install(ctx, p, sb, set)
	if err != nil {
		if ie := (*InstallError)(nil); errors.As(err, &ie) {
			err = b.installNoSpace(ie, p)
		}
		return nil, b.timedOut(ctx, timeout, err)
	}
	if err := checkInstalled(installed, set, base); err != nil {
		return nil, err
	}
	// Nothing of the sandbox may run while its files are handed to root.
	if err := sb.Destroy(); err != nil {
		return nil, err
	}
	if err := chownTree(target, 0, 0); err != nil {
		return nil, b.noSpace(fmt.Errorf("handing the installed files to root: %w", err), b.opts.Store.StorageDir())
	}
	p.req.progress(4, "scanning")
	scan, err := b.scan(ctx, installed, target)
	if err != nil {
		return nil, err
	}
	p.req.progress(5, "committing %s", p.image)
	env := &Environment{Name: p.req.Name, Image: p.image, Owner: p.req.Principal, Description: p.req.Description,
		Preset: p.req.Preset, BaseImage: p.req.BaseImage, BaseDigest: p.base.Digest, Python: p.python,
		Requested: p.specs, Installed: installed, Hash: p.hash, Built: time.Now().UTC(), Scan: scan, Installer: b.Installer(),
		Approved: p.approved}
	img, err := scratch.Commit(ctx, rootfs.CommitOptions{Name: p.image, Labels: env.labels(),
		MaxSize: int64(b.cfg.MaxImageSize), Comment: "forge env build " + strings.Join(p.specs, " ")})
	if errors.Is(err, rootfs.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w (environment_builder.max_image_size)", ErrTooLarge, err)
	}
	if err != nil {
		return nil, b.timedOut(ctx, timeout, b.noSpace(err, b.opts.Store.StorageDir()))
	}
	env.ID, env.Size, env.LayerSize = img.ID, img.Size, img.LayerSize
	return env, nil
}

func (b *Builder) timedOut(ctx context.Context, timeout time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w after %s (environment_builder.build_timeout): %w", ErrTimeout, timeout, err)
	}
	return err
}

// startSandbox starts the build sandbox on the scratch layer: its root
// read-only, the site-packages directory and the uv cache writable.
func (b *Builder) startSandbox(ctx context.Context, p *plan, scratch *rootfs.Scratch) (*sandbox.Sandbox, string, string, error) {
	target := sitePackages(scratch.Path(), p.python)
	p.target = target
	hostTarget, err := scratch.MkdirAll(target)
	if err != nil {
		return nil, "", "", err
	}
	scratch.Keep(hostTarget)
	binds := []sandbox.BuildBind{{Source: hostTarget, Destination: target, Writable: true}}
	cache := b.cacheDir(p)
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return nil, "", "", err
	}
	if _, err := scratch.MkdirAll(cacheMount); err != nil {
		return nil, "", "", err
	}
	binds = append(binds, sandbox.BuildBind{Source: cache, Destination: cacheMount, Writable: true})
	if b.uv != "" {
		if err := scratch.Touch(uvMount); err != nil {
			return nil, "", "", err
		}
		binds = append(binds, sandbox.BuildBind{Source: b.uv, Destination: uvMount})
	}
	if b.caBundle != "" {
		if err := scratch.Touch(caMount); err != nil {
			return nil, "", "", err
		}
		binds = append(binds, sandbox.BuildBind{Source: b.caBundle, Destination: caMount})
	}
	if b.cfg.Wheelhouse != "" {
		if err := readableByOthers(b.cfg.Wheelhouse); err != nil {
			return nil, "", "", fmt.Errorf("%w: environment_builder.wheelhouse: %w", ErrInvalid, err)
		}
		if _, err := scratch.MkdirAll(wheelsMount); err != nil {
			return nil, "", "", err
		}
		binds = append(binds, sandbox.BuildBind{Source: b.cfg.Wheelhouse, Destination: wheelsMount})
	}
	var bridgeDir string
	var pol egress.Policy
	if !b.cfg.Offline {
		if b.opts.Proxy == nil {
			return nil, "", "", fmt.Errorf("%w: builds from an index need forge's egress proxy; set environment_builder.offline with a wheelhouse", ErrInvalid)
		}
		if pol, err = egress.ParsePolicy(b.indexHosts()); err != nil {
			return nil, "", "", fmt.Errorf("%w: the index's hosts (environment_builder.index_url, index_hosts): %w", ErrInvalid, err)
		}
		if bridgeDir, err = b.newBridgeDir(); err != nil {
			return nil, "", "", err
		}
	}
	x, sec := b.opts.Config.Execution, b.opts.Config.Security
	cfg := sandbox.Config{
		Rootfs:        scratch.Path(),
		Limits:        cgroups.Limits{MemoryBytes: int64(b.cfg.BuildMemory), CPUs: x.MaxCPUs, Pids: int64(max(x.MaxPids, 256))},
		TmpSize:       min(buildTmpSize, int64(b.cfg.BuildMemory)/2),
		WorkspaceSize: 16 << 20,
		UID:           sec.SandboxUID,
		Seccomp:       b.opts.Seccomp,
		BuildBinds:    binds,
		BridgeDir:     bridgeDir,
		OnDestroy: func() {
			if bridgeDir != "" {
				os.RemoveAll(bridgeDir)
			}
		},
	}
	if bridgeDir != "" {
		cfg.Egress = &sandbox.Egress{Proxy: b.opts.Proxy, Policy: pol,
			Who: egress.Who{Principal: p.req.Principal, Purpose: "build"}}
	}
	// The target and the cache belong to the sandbox user before anything
	// runs: its host uid is known only once it started, and the agent
	// waits for its first request.
	sb, err := b.opts.Runtime.Start(ctx, cfg)
	if err != nil {
		return nil, "", "", fmt.Errorf("starting the build sandbox: %w", err)
	}
	for _, dir := range []string{hostTarget, cache} {
		if err := chownTree(dir, sb.HostUID(), sb.HostGID()); err != nil {
			sb.Destroy()
			return nil, "", "", fmt.Errorf("handing %s to the build sandbox: %w", dir, err)
		}
	}
	b.log.Debug("build sandbox started", "sandbox", sb.ID(), "image", p.image, "target", target)
	return sb, hostTarget, bridgeDir, nil
}

// newBridgeDir makes the build sandbox's /run/forge, where the egress
// proxy puts its socket; the pid prefix lets forge gc find a dead
// process's.
func (b *Builder) newBridgeDir() (string, error) {
	base := filepath.Join(b.opts.Config.StateDir, "bridge")
	if err := os.MkdirAll(base, 0o711); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%d-", os.Getpid()))
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o711)
}

func (b *Builder) indexHosts() []string {
	var hosts []string
	if h := hostOf(b.cfg.IndexURL); h != "" {
		hosts = append(hosts, h)
	}
	return append(hosts, b.cfg.IndexHosts...)
}

// cacheDir is the uv cache of the plan's base image and principal: a build
// can write anything into its cache (unpacked archives that later builds
// copy from), so a cache shared between principals would let one poison
// another's environments.
func (b *Builder) cacheDir(p *plan) string {
	return filepath.Join(b.dir, "cache", p.base.ID[:16]+"-"+principalKey(p.req.Principal))
}

// lockFile takes an exclusive flock on path, waiting while ctx lasts.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readableByOthers checks that the build sandbox's unprivileged user can
// list dir (o+rx); it sees only that directory, not its parents.
func readableByOthers(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o005 != 0o005 {
		return fmt.Errorf("%s (mode %v) must be a directory that others can read and list (chmod o+rx %s): builds read it as an unprivileged user", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// chownTree gives every file under root to uid:gid, not following
// symlinks.
func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// script is the Python the agent runs in the build sandbox: the installer
// as a subprocess, then its package list on stdout. The result (the last
// expression) is small; the log goes to stderr.
const script = `
import json as _j, subprocess as _s, sys as _y
import os as _o
_c = _j.loads(%q)
for _k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"):
    if _k in _o.environ:
        _c["env"][_k] = _o.environ[_k]
def _run(args, out):
    p = _s.run(args, env=_c["env"], stdin=_s.DEVNULL, stdout=_s.PIPE, stderr=_s.STDOUT if out is None else _s.PIPE)
    return p.returncode, p.stdout.decode("utf-8", "replace"), (p.stderr or b"").decode("utf-8", "replace")
_rc, _log, _ = _run(_c["install"], None)
_y.stderr.write(_log[-60000:])
_lrc = None
if _rc == 0:
    _lrc, _out, _err = _run(_c["list"], True)
    _y.stdout.write(_out if _lrc == 0 else "")
    if _lrc != 0:
        _y.stderr.write(_err[-4000:])
{"rc": _rc, "list_rc": _lrc}
`

type scriptConfig struct {
	Env     map[string]string `json:"env"`
	Install []string          `json:"install"`
	List    []string          `json:"list"`
}

// installerEnv is the installer's environment and its index options, the
// same for resolving and installing.
func (b *Builder) installerEnv() (map[string]string, []string) {
	env := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
	if b.caBundle != "" {
		env["SSL_CERT_FILE"] = caMount
		env["PIP_CERT"] = caMount
	}
	var index []string
	if b.cfg.Wheelhouse != "" {
		// uv keys a local wheel's cache entry by its path, which is the
		// same in every build (the mount point): revalidate, or a wheel
		// of an earlier wheelhouse comes back.
		index = append(index, "--refresh")
	}
	switch {
	case b.cfg.Offline:
		index = append(index, "--no-index", "--find-links", wheelsMount)
	case b.cfg.Wheelhouse != "":
		index = append(index, "--index-url", b.cfg.IndexURL, "--find-links", wheelsMount)
	default:
		index = append(index, "--index-url", b.cfg.IndexURL)
	}
	if b.uv != "" {
		for k, v := range map[string]string{"UV_CACHE_DIR": cacheMount, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never",
			"UV_LINK_MODE": "copy", "UV_NO_PROGRESS": "1", "NO_COLOR": "1"} {
			env[k] = v
		}
	} else {
		env["PIP_CACHE_DIR"] = cacheMount
		env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
		env["PIP_NO_INPUT"] = "1"
	}
	return env, index
}

// install installs exactly the resolved set in sb, pinned and without
// resolving dependencies again (--no-deps), and returns what got
// installed.
func (b *Builder) install(ctx context.Context, p *plan, sb *sandbox.Sandbox, set []policy.Resolved) ([]Package, error) {
	target := p.target
	env, index := b.installerEnv()
	sc := scriptConfig{Env: env}
	if b.uv != "" {
		sc.Install = append([]string{uvMount, "pip", "install", "--python", "/usr/bin/python3", "--target", target,
			"--compile-bytecode", "--no-deps"}, index...)
		sc.List = []string{uvMount, "pip", "list", "--python", "/usr/bin/python3", "--target", target, "--format", "json"}
	} else {
		sc.Install = append([]string{"/usr/bin/python3", "-m", "pip", "install", "--no-deps", "--target", target}, index...)
		sc.List = []string{"/usr/bin/python3", "-m", "pip", "list", "--path", target, "--format", "json"}
	}
	// After "--", a pin cannot be an option (each was parsed by
	// policy.Parse, which refuses a leading '-').
	sc.Install = append(sc.Install, "--")
	for _, r := range set {
		sc.Install = append(sc.Install, r.Pin())
	}
	cfg, err := json.Marshal(sc)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	res, err := sb.Exec(ctx, fmt.Sprintf(script, string(cfg)), sandbox.ExecOptions{Timeout: time.Until(deadline), OutputLimit: outputLimit})
	if err != nil {
		return nil, fmt.Errorf("running the installer: %w", err)
	}
	if res.TimedOut {
		return nil, fmt.Errorf("%w after %s (environment_builder.build_timeout)", ErrTimeout, time.Duration(b.cfg.BuildTimeout))
	}
	if res.Error != nil {
		return nil, fmt.Errorf("%w: the build script failed: %s: %s", ErrInstall, res.Error.Type, clip(res.Error.Message, 2000))
	}
	var out struct {
		RC     int  `json:"rc"`
		ListRC *int `json:"list_rc"`
	}
	raw, _ := json.Marshal(res.Result)
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: the build script's result: %w", ErrInstall, err)
	}
	if out.RC != 0 {
		log := trimLog(res.Stderr)
		return nil, &InstallError{Tool: b.Installer(), Status: out.RC, Output: log, Unresolvable: unresolvable(log)}
	}
	if out.ListRC == nil || *out.ListRC != 0 {
		return nil, fmt.Errorf("%w: listing the installed packages failed: %s", ErrInstall, trimLog(res.Stderr))
	}
	return parseInstalled(res.Stdout)
}

// trimLog keeps what matters of an installer's output: the error lines and
// the lines after them, at most 2000 bytes.
func trimLog(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "error:") || strings.HasPrefix(l, "ERROR:") || strings.Contains(l, "×") {
			lines = lines[i:]
			break
		}
	}
	out := strings.TrimSpace(strings.Join(lines, "\n"))
	if len(out) > 2000 {
		out = out[:2000] + "…"
	}
	return out
}

// unresolvable tells "the index has no such package or version" (the
// request's fault) from the index being unreachable in uv's and pip's
// words.
func unresolvable(log string) bool {
	for _, s := range []string{"No solution found", "not found in the package registry", "was not found in the provided package locations",
		"No matching distribution found", "Could not find a version that satisfies"} {
		if strings.Contains(log, s) {
			return true
		}
	}
	return false
}

// hostOf is the egress rule for an index URL's host: host[:port], with
// :80 for an http:// URL without a port (a name rule allows only 443 when
// it names no port).
func hostOf(u string) string {
	rest, tls := strings.CutPrefix(u, "https://")
	if !tls {
		rest, _ = strings.CutPrefix(u, "http://")
	}
	host, _, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(host, "]"); !tls && host != "" && !strings.Contains(host[i+1:], ":") {
		host += ":80"
	}
	return host
}
