// Package engine ties forge's parts together: the image store, the sandbox
// runtime, the warm pool and sessions. The CLI and the MCP server talk only
// to an Engine.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/bridge"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/egress"
	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/pool"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// Options configure an Engine.
type Options struct {
	Config   *profiles.Config
	Logger   *slog.Logger
	Audit    *audit.Logger
	Progress io.Writer
	// Observer, when set, is told about every execution (metrics).
	Observer Observer
}

// Engine runs code. Safe for concurrent use.
type Engine struct {
	cfg      *profiles.Config
	log      *slog.Logger
	audit    *audit.Logger
	bridge   *bridge.Bridge // nil without mcp_tools
	proxy    *egress.Proxy  // the one egress proxy of this process (runs and builds)
	egress   egress.Policy  // the default profile's (execution.egress)
	builder  *build.Builder
	store    *rootfs.Store
	rt       *sandbox.Runtime
	sessions *session.Manager
	seccomp  *specs.LinuxSeccomp
	max      cgroups.Limits
	def      cgroups.Limits

	slots chan struct{} // one per running execution, execution.max_concurrent in all
	done  chan struct{} // closed by Close: queued executions give up

	mu       sync.Mutex
	closed   bool
	pools    map[string]*pool.Pool // by poolKey: image, and tenant with perTenant
	poolUsed map[string]time.Time  // by poolKey: last Acquire (environments' and tenants' pools shrink to zero when idle)
	inflight atomic.Int64          // executions in flight
	bg       sync.WaitGroup        // background destroys
	grants   grants
	observer Observer // nil = none

	// perTenant: each tenant's sandboxes come from zygote templates and
	// warm pools of its own (sandbox.zygote_per_tenant; tenant.go).
	perTenant bool
}

// New opens the image store and the sandbox runtime (both clean up what
// crashed forge processes left behind).
func New(ctx context.Context, opts Options) (_ *Engine, retErr error) {
	cfg := opts.Config
	if cfg == nil {
		cfg = profiles.Default()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = profiles.DefaultStateDir(rootless.UID(), os.Getenv)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Audit == nil {
		opts.Audit = audit.Discard()
	}
	e := &Engine{cfg: cfg, log: opts.Logger, audit: opts.Audit, observer: opts.Observer,
		slots: make(chan struct{}, max(cfg.Execution.MaxConcurrent, 1)), done: make(chan struct{}),
		perTenant: zygoteTenants(cfg.StateDir, cfg)}
	var err error
	if e.def, e.max, err = limitsOf(cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if e.seccomp, err = loadSeccomp(cfg.Security.SeccompProfile); err != nil {
		return nil, err
	}
	if e.egress, err = cfg.EgressPolicy(""); err != nil {
		return nil, fmt.Errorf("%w: execution.egress: %w", ErrInvalidRequest, err)
	}
	e.store, err = rootfs.Open(ctx, rootfs.Options{StateDir: cfg.StateDir, Progress: opts.Progress, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("opening image store: %w", err)
	}
	defer func() {
		if retErr != nil {
			e.store.Close()
		}
	}()
	for _, ref := range cfg.Images.Preload {
		if _, err := e.store.Pull(ctx, ref); err != nil {
			return nil, fmt.Errorf("images.preload: %w", err)
		}
	}
	budget, parent := HostLimits(cfg, opts.Logger)
	e.rt, err = sandbox.NewRuntime(ctx, sandbox.Options{StateDir: cfg.StateDir, Logger: opts.Logger,
		IDRange:     idmap.Range{Start: cfg.Security.UIDRangeStart, Size: cfg.Security.UIDRangeSize},
		IDBlockSize: cfg.Security.UIDMapSize,
		Budget:      budget, Parent: parent, CgroupParent: cfg.Limits.CgroupParent,
		Mode: sandbox.Mode(cfg.Sandbox.Mode),
		Zygote: sandbox.ZygoteOptions{Forks: cfg.Sandbox.ZygoteForks, MaxAge: cfg.Sandbox.ZygoteMaxAge.Std(),
			Slots: cfg.Sandbox.ZygoteSlots, BindsTemplates: cfg.Sandbox.ZygoteToolTemplates, Warm: append(slices.Clone(cfg.Pool.WarmModules), cfg.Pool.WarmModulesData...)}})
	if errors.Is(err, sandbox.ErrParentLimits) {
		return nil, fmt.Errorf("%w (limits.memory, limits.pids: 0 derives them; a set value must be at least what the sandboxes there use now)", err)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			e.rt.Close()
		}
	}()
	removeDeadBridgeDirs(cfg.StateDir, opts.Logger)
	e.proxy = egress.New(egress.Options{Logger: opts.Logger, Audit: opts.Audit})
	e.builder, err = build.New(build.Options{Store: e.store, Runtime: e.rt, Config: cfg, Seccomp: e.seccomp,
		Proxy: e.proxy, Audit: opts.Audit, Logger: opts.Logger})
	if err != nil {
		e.proxy.Close()
		return nil, fmt.Errorf("%w: environment_builder: %w", ErrInvalidRequest, err)
	}
	if len(cfg.MCPTools) > 0 {
		servers := bridge.ServersFromConfig(cfg.MCPTools)
		e.sandboxServers(servers, cfg.MCPTools)
		e.bridge, err = bridge.New(ctx, bridge.Options{
			Servers: servers, Logger: opts.Logger, Audit: opts.Audit,
		})
		if err != nil {
			return nil, fmt.Errorf("mcp_tools: %w", err)
		}
		defer func() {
			if retErr != nil {
				e.bridge.Close()
			}
		}()
	}
	sc := cfg.Sessions
	sessionsDir := filepath.Join(cfg.StateDir, "sessions")
	cl := cfg.Cluster
	if cl.Enabled {
		// Every replica's sessions, in the directory they all mount.
		sessionsDir = filepath.Join(cl.SharedDir, "sessions")
		if cl.Member == "" {
			if cl.Member, err = os.Hostname(); err != nil {
				return nil, fmt.Errorf("cluster.member is empty and the host name is unknown: %w", err)
			}
		}
	}
	e.sessions, err = session.NewManager(session.Options{
		Member:        cl.Member,
		Advertise:     cl.Advertise,
		Checkpoint:    cl.Enabled,
		Dir:           sessionsDir,
		MaxConcurrent: sc.MaxConcurrent,
		IdleTimeout:   time.Duration(sc.IdleTimeout),
		MaxLifetime:   time.Duration(sc.MaxLifetime),
		Persist:       sc.Persist,
		Quota:         int64(cfg.Volumes.SessionQuota),
		StateLimit:    int64(cfg.Execution.TmpSize),
		Start:         e.acquireImage,
		Logger:        opts.Logger,
		Headroom:      func() (int64, bool) { return sandbox.ParentHeadroom(parentCgroupName(cfg)) },
		OnEvent: func(event, owner, id string) {
			e.audit.Log(audit.Event{Event: event, Severity: audit.SeverityInfo, SessionID: id, Principal: owner})
		},
		// Sessions saved before sessions had owners were made by the only
		// client forge had then: the local one. They stay where they are.
		LocalOwner: LocalPrincipal.Tenant,
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// HostLimits are the kernel budgets and the parent cgroup's limits that the
// configuration asks for on this host (see profiles.LimitsConfig).
func HostLimits(cfg *profiles.Config, log *slog.Logger) (sandbox.Budget, sandbox.ParentLimits) {
	mem, err := sandbox.HostMemory("/proc")
	if err != nil && log != nil {
		log.Warn("the parent cgroup's memory limit is not capped by the host's memory", "err", err)
	}
	pm, pp := cfg.ParentLimits(mem)
	return sandbox.Budget{Sandboxes: cfg.MaxSandboxes(), Reserve: cfg.Limits.KernelReserve},
		sandbox.ParentLimits{MemoryBytes: pm, Pids: pp}
}

func loadSeccomp(p string) (*specs.LinuxSeccomp, error) {
	if p == "" || p == "default" {
		return seccomp.Default()
	}
	return seccomp.Load(p)
}

func limitsOf(cfg *profiles.Config) (def, max cgroups.Limits, err error) {
	x := cfg.Execution
	def = cgroups.Limits{MemoryBytes: int64(x.DefaultMemory), CPUs: x.DefaultCPUs, Pids: int64(x.MaxPids)}
	max = cgroups.Limits{MemoryBytes: int64(x.MaxMemory), CPUs: x.MaxCPUs, Pids: int64(x.MaxPids)}
	if err := max.Validate(); err != nil {
		return def, max, err
	}
	def, err = max.Tighten(def)
	return def, max, err
}

// Store is the image store.
func (e *Engine) Store() *rootfs.Store { return e.store }

// Images lists the images in the store.
func (e *Engine) Images(ctx context.Context) ([]rootfs.Image, error) { return e.store.Images(ctx) }

// Runtime is the sandbox runtime.
func (e *Engine) Runtime() *sandbox.Runtime { return e.rt }

// Config is the effective configuration.
func (e *Engine) Config() *profiles.Config { return e.cfg }

// Request is one execution.
type Request struct {
	// Principal is who asks; required. A session id names a session of
	// this principal only.
	Principal Principal
	Code      string
	Image     string        // "" = images.default
	Timeout   time.Duration // 0 = execution.default_timeout
	Memory    int64         // bytes; 0 = default
	CPUs      float64       // 0 = default
	Client    string        // for the audit log
	// SessionID runs the code in that session (created on first use);
	// NewSession with no SessionID creates a session with a generated id.
	SessionID  string
	NewSession bool
	// MCPTools are the code-mode tools made callable inside the sandbox.
	MCPTools []string
	// Egress, when set, narrows the profile's egress allowlist
	// (execution.egress) for this execution; asking for more than the
	// profile allows is refused. nil runs under the profile's (a session:
	// under the policy it had). For a session it becomes the session's
	// policy, which survives hibernation.
	Egress *egress.Policy
	// Progress, if set, receives reports while the request runs (see
	// Progress); it is called from forge's goroutines and must not block.
	Progress func(Progress)
	// Environment names a preset (environment_builder.presets): the
	// code runs in its environment, built first if need be. Image must be
	// empty then; Image may name an environment of the principal itself.
	Environment string
	// Approver asks a person about the packages of an Environment built
	// on first use that need approval (runtime/build.Approver); nil: nobody
	// can be asked.
	Approver build.Approver
	// Env are environment variables for the code (os.environ).
	Env map[string]string
	// RequestID is the face's id of the request, for the audit log.
	RequestID string
}

// Progress is one report of a long request: output the code wrote since the
// last report, or a message about a step (an image pull, a bootstrap, a
// build). Chunks of output are bounded (kernel.Output).
type Progress struct {
	Stdout, Stderr string
	// Skipped counts output bytes left out of this report (the result has them).
	Skipped int64
	Message string
}

// onOutput adapts req.Progress to the sandbox's output callback.
func (req Request) onOutput() func(kernel.Output) {
	if req.Progress == nil {
		return nil
	}
	return func(o kernel.Output) { req.Progress(Progress{Stdout: o.Stdout, Stderr: o.Stderr, Skipped: o.Skipped}) }
}

// Plan is a validated request: the limits in force and the image.
type Plan struct {
	Image   string
	Timeout time.Duration
	Limits  cgroups.Limits
	// Egress is the allowlist in force: the request's or the profile's.
	Egress egress.Policy
}

// Validate checks a request against the configured maxima and allowlist.
// A request can tighten limits, never loosen them. Errors are
// *RefusedError.
func (e *Engine) Validate(req Request) (Plan, error) {
	// An environment's name becomes its image; a preset is left for
	// Execute, which may have to build it.
	if req.Environment == "" {
		if err := e.resolveImage(context.Background(), &req); err != nil {
			return Plan{Image: req.Image}, refuse(err)
		}
	}
	p, err := e.validate(req)
	return p, refuse(err)
}

func (e *Engine) validate(req Request) (Plan, error) {
	x := e.cfg.Execution
	p := Plan{Image: req.Image, Timeout: req.Timeout}
	if max := int64(x.MaxCodeSize); max > 0 && int64(len(req.Code)) > max {
		return p, fmt.Errorf("%w: code is %d bytes, over the limit of %d bytes (execution.max_code_size)", ErrInvalidRequest, len(req.Code), max)
	}
	if p.Image == "" {
		p.Image = e.cfg.Images.Default
	}
	if !e.cfg.Images.Allowed(p.Image) {
		return p, fmt.Errorf("%w: image %q is not allowed; allowed: %s (images.allowed)", ErrInvalidRequest, p.Image, strings.Join(e.cfg.Images.AllowedPatterns, ", "))
	}
	maxT := time.Duration(x.MaxTimeout)
	switch {
	case p.Timeout < 0:
		return p, fmt.Errorf("%w: timeout %s must be positive", ErrInvalidRequest, p.Timeout)
	case p.Timeout == 0:
		p.Timeout = time.Duration(x.DefaultTimeout)
	case p.Timeout > maxT:
		return p, fmt.Errorf("%w: timeout %s exceeds the maximum %s (execution.max_timeout)", ErrInvalidRequest, p.Timeout, maxT)
	}
	// e.def is already within e.max; a request's own limits are checked
	// against the maxima (Tighten keeps the defaults for the zero fields).
	p.Limits = e.def
	if req.Memory != 0 || req.CPUs != 0 {
		lim, err := e.max.Tighten(cgroups.Limits{MemoryBytes: orI(req.Memory, e.def.MemoryBytes), CPUs: orF(req.CPUs, e.def.CPUs), Pids: e.def.Pids})
		if err != nil {
			return p, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		p.Limits = lim
	}
	if err := checkEnv(req.Env); err != nil {
		return p, err
	}
	p.Egress = e.egress
	if req.Egress != nil {
		pol, err := e.egress.Within(*req.Egress, "the profile's egress (execution.egress)")
		if err != nil {
			return p, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		p.Egress = pol
	}
	if len(req.MCPTools) > 0 {
		if e.bridge == nil {
			return p, fmt.Errorf("%w: mcp_tools %v requested but no MCP servers are configured (mcp_tools in the config)", ErrInvalidRequest, req.MCPTools)
		}
		if err := e.bridge.Validate(req.MCPTools); err != nil {
			return p, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	return p, nil
}

func orI(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}

func orF(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}

// Execute runs code once in a fresh sandbox that is destroyed afterwards,
// or in the request's session. Errors the caller must fix are
// *RefusedError.
func (e *Engine) Execute(ctx context.Context, req Request) (*kernel.Result, error) {
	start := time.Now()
	call := new(callBox)
	res, err := e.execute(withCall(ctx, call), req)
	call.releaseRefill()
	err = refuse(err)
	e.observe(req, call.get(), start, res, err)
	return res, err
}

func (e *Engine) execute(ctx context.Context, req Request) (*kernel.Result, error) {
	if err := req.Principal.check(); err != nil {
		return nil, err
	}
	ctx = withTenant(ctx, req.Principal)
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.inflight.Add(-1)
	if err := e.resolveImage(ctx, &req); err != nil {
		return nil, err
	}
	plan, err := e.validate(req)
	if err != nil {
		return nil, err
	}
	if err := e.admit(ctx); err != nil {
		return nil, err
	}
	defer func() { <-e.slots }()
	e.audit.Log(audit.Event{Event: audit.EventExecutionRequest, Severity: audit.SeverityInfo, Image: plan.Image,
		CodeSHA256: audit.CodeHash(req.Code), Client: req.Client, Principal: req.Principal.Tenant, SessionID: req.SessionID,
		RequestID: req.RequestID})
	if req.SessionID != "" || req.NewSession {
		setMode(ctx, ModeSession)
		return e.executeSession(ctx, req, plan)
	}
	sb, err := e.acquire(ctx, plan)
	if err != nil {
		return nil, err
	}
	setMode(ctx, ModeCold) // unless the pool said warm
	defer e.destroy(sb)
	return e.run(ctx, sb, req, plan, plan.Egress, "")
}

// run is the one way a request's code runs, in a fresh sandbox or in the
// sandbox of the session named (whose sandbox outlives the call: a timeout
// then interrupts the code instead of ending it): the code-mode tools, the
// egress policy pol and the environment are put in place, then the code
// runs.
func (e *Engine) run(ctx context.Context, sb *sandbox.Sandbox, req Request, plan Plan, pol egress.Policy, session string) (*kernel.Result, error) {
	e.audit.Log(audit.Event{Event: audit.EventContainerStart, Severity: audit.SeverityInfo, SandboxID: sb.ID(), Image: plan.Image,
		SessionID: session, Principal: req.Principal.Tenant})
	if len(req.MCPTools) > 0 {
		if err := e.grantTools(ctx, sb, req.MCPTools); err != nil {
			return nil, err
		}
	}
	if err := e.setEgress(ctx, sb, pol, egress.Who{SessionID: session, Principal: req.Principal.Tenant, Purpose: "execute"}); err != nil {
		return nil, err
	}
	if err := setEnv(ctx, sb, req.Env); err != nil {
		return nil, err
	}
	opts := sandbox.ExecOptions{Timeout: plan.Timeout, OutputLimit: int(e.cfg.Execution.OutputLimit), OnOutput: req.onOutput()}
	if session != "" {
		opts.KeepAlive, opts.Grace = true, interruptGrace
	}
	return sb.Exec(ctx, req.Code, opts)
}

// acquire returns a running sandbox of plan's image with plan's limits in
// force: from the warm pool when there is one, else started cold.
func (e *Engine) acquire(ctx context.Context, plan Plan) (*sandbox.Sandbox, error) {
	sb, err := e.acquireImage(ctx, plan.Image)
	if err != nil {
		return nil, err
	}
	// Free when the limits are the pool's defaults.
	if err := sb.SetLimits(plan.Limits); err != nil {
		e.destroy(sb)
		return nil, err
	}
	return sb, nil
}

// acquireImage returns a running sandbox of image with the default limits,
// from the warm pool when there is one.
func (e *Engine) acquireImage(ctx context.Context, image string) (*sandbox.Sandbox, error) {
	tenant := e.tenantOf(ctx)
	if p := e.poolFor(image, tenant); p != nil {
		sb, warm, err := p.Acquire(ctx)
		if warm {
			setMode(ctx, ModeWarm)
			holdRefill(ctx, p)
		}
		e.mu.Lock()
		if e.poolUsed != nil {
			e.poolUsed[poolKey(image, tenant)] = time.Now() // idle from here: a cold acquire can take a while
		}
		e.mu.Unlock()
		return sb, err
	}
	return e.startSandboxFor(ctx, image, tenant)
}

// refillHold is how long at most a run holds back the refill of the pooled
// sandbox it took (pool.Options.RefillHold): a warm print(1) took 2.6 ms
// beside the start of its replacement and 1.3 ms without (forge bench).
// A pool left with no ready sandbox refills at once whatever the hold.
const refillHold = 500 * time.Millisecond

// holdRefill leaves the release of p's refill to the Execute of ctx, or
// releases it at once outside one (a session made by WriteFile or a fork).
func holdRefill(ctx context.Context, p *pool.Pool) {
	if b, ok := ctx.Value(callKey{}).(*callBox); ok {
		b.mu.Lock()
		if b.held == nil {
			b.held, p = p, nil
		}
		b.mu.Unlock()
	}
	if p != nil {
		p.Release()
	}
}

// releaseRefill lets the pool whose refill the run held back refill.
func (b *callBox) releaseRefill() {
	b.mu.Lock()
	p := b.held
	b.held = nil
	b.mu.Unlock()
	if p != nil {
		p.Release()
	}
}

// startSandbox starts a cold sandbox of image with the profile's default
// limits; destroying it releases its image mount.
func (e *Engine) startSandbox(ctx context.Context, image string, binds ...sandbox.Bind) (*sandbox.Sandbox, error) {
	return e.startSandboxFor(ctx, image, e.tenantOf(ctx), binds...)
}

// startSandboxFor is startSandbox for tenant's templates (tenantOf).
func (e *Engine) startSandboxFor(ctx context.Context, image, tenant string, binds ...sandbox.Bind) (*sandbox.Sandbox, error) {
	fs, err := e.store.Acquire(ctx, image)
	if err != nil {
		return nil, err
	}
	cfg := e.sandboxConfig(fs.Path())
	cfg.ImageID = fs.Image().ID
	cfg.Tenant = tenant
	cfg.Binds = binds
	var bridgeDir, sbID string
	if warm, ok := templateBinds(ctx); ok {
		// A hosted child keeps its template's /run/forge: it gets no bridge
		// directory, unless the runtime starts a container instead.
		cfg.TemplateBinds, cfg.TemplateWarm = true, warm
		cfg.NewBridgeDir = func() (string, error) {
			var err error
			bridgeDir, err = e.newBridgeDir()
			return bridgeDir, err
		}
	} else if e.bridge != nil || e.egressPossible() || len(binds) > 0 {
		if bridgeDir, err = e.newBridgeDir(); err != nil {
			fs.Release()
			return nil, err
		}
		cfg.BridgeDir = bridgeDir
	}
	release := func(h *rootfs.RootFS) {
		if err := h.Release(); err != nil {
			e.log.Warn("releasing rootfs", "image", image, "err", err)
		}
	}
	cfg.Pin = func() func() {
		if h := fs.Retain(); h != nil {
			return func() { release(h) }
		}
		return func() {}
	}
	cfg.OnDestroy = func() {
		// Every way a sandbox ends (stateless run, pool recycling, session
		// hibernated, lost or destroyed, shutdown) comes through here.
		if sbID != "" {
			e.audit.Log(audit.Event{Event: audit.EventContainerStop, Severity: audit.SeverityInfo, SandboxID: sbID, Image: image})
			e.audit.Log(audit.Event{Event: audit.EventContainerRemove, Severity: audit.SeverityInfo, SandboxID: sbID, Image: image})
		}
		if bridgeDir != "" {
			os.RemoveAll(bridgeDir)
		}
		if e.bridge != nil {
			e.dropGrant(sbID)
		}
		release(fs)
	}
	sb, err := e.rt.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	sbID = sb.ID()
	e.audit.Log(audit.Event{Event: audit.EventContainerCreate, Severity: audit.SeverityInfo, SandboxID: sb.ID(), Image: image})
	return sb, nil
}

// destroy removes a used sandbox off the request path.
func (e *Engine) destroy(sb *sandbox.Sandbox) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		if err := sb.Destroy(); err != nil {
			e.log.Warn("destroying sandbox", "sandbox", sb.ID(), "err", err)
		}
	}()
}

// sandboxConfig is a sandbox of the default profile on rootfs.
func (e *Engine) sandboxConfig(rootfs string) sandbox.Config {
	s := e.cfg.Security
	return sandbox.Config{
		Rootfs:        rootfs,
		Limits:        e.def,
		TmpSize:       int64(e.cfg.Execution.TmpSize),
		WorkspaceSize: int64(e.cfg.Volumes.SessionQuota),
		UID:           uint32(s.SandboxUID),
		Seccomp:       e.seccomp,
	}
}

func (e *Engine) enter() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	e.inflight.Add(1)
	return nil
}

// admit takes an execution slot, waiting up to execution.queue_timeout for
// one; the fast path allocates nothing.
func (e *Engine) admit(ctx context.Context) error {
	select {
	case e.slots <- struct{}{}:
		return nil
	default:
	}
	wait := time.Duration(e.cfg.Execution.QueueTimeout)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case e.slots <- struct{}{}:
		return nil
	case <-t.C:
		return fmt.Errorf("%w: %d executions are running (execution.max_concurrent) and none finished within %s (execution.queue_timeout); retry later",
			ErrBusy, cap(e.slots), wait)
	case <-ctx.Done():
		return fmt.Errorf("waiting for a free execution slot: %w", ctx.Err())
	case <-e.done:
		return ErrClosed
	}
}

// Close waits up to grace for running executions, then destroys every
// sandbox and releases the image store.
func (e *Engine) Close(grace time.Duration) error {
	e.mu.Lock()
	if !e.closed {
		close(e.done)
	}
	e.closed = true
	e.mu.Unlock()
	// Poll with a deadline: executions end on their own or are killed
	// with their sandboxes below.
	deadline := time.Now().Add(grace)
	for e.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.inflight.Load(); n > 0 {
		e.log.Warn("executions still running after the shutdown grace period; killing them", "running", n)
	}
	e.mu.Lock()
	pools := e.pools
	e.pools = nil
	e.mu.Unlock()
	// No deadline over all sessions: each has its own (session.StopSaveTimeout);
	// a shared one lost every session after the first minute's worth.
	errs := []error{e.sessions.Close(context.Background())}
	for _, p := range pools {
		errs = append(errs, p.Close())
	}
	if e.bridge != nil {
		// Before the runtime: sandboxed servers are its sandboxes.
		errs = append(errs, e.bridge.Close())
	}
	e.bg.Wait()
	errs = append(errs, e.rt.Close(), e.store.Close(), e.proxy.Close())
	return errors.Join(errs...)
}

// poolFor returns the warm pool of image for tenant (tenantOf), creating it
// on first use; nil when pools are disabled.
func (e *Engine) poolFor(image, tenant string) *pool.Pool {
	key := poolKey(image, tenant)
	pc := e.cfg.Pool
	if !pc.Enabled || pc.Size <= 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	if e.poolUsed == nil {
		e.poolUsed = make(map[string]time.Time)
	}
	e.poolUsed[key] = time.Now()
	if p, ok := e.pools[key]; ok {
		return p
	}
	if e.pools == nil {
		e.pools = make(map[string]*pool.Pool)
		go e.shrinkLoop()
	}
	warm := append([]string(nil), pc.WarmModules...)
	if e.bridge != nil {
		warm = append(warm, "socket", "inspect") // what the code-mode prelude needs
	}
	if e.egressPossible() {
		warm = append(warm, "socket", "select") // what the agent's egress forwarder needs
	}
	if image == e.cfg.Images.Data {
		warm = append(warm, pc.WarmModulesData...)
	}
	p := pool.New(pool.Options{
		Name:              image,
		Size:              pc.Size,
		MaxSize:           pc.MaxSize,
		MemoryBudget:      uint64(pc.MemoryBudget),
		ShrinkAfter:       time.Duration(pc.ShrinkAfter),
		MaxIdleAge:        time.Duration(pc.MaxIdleAge),
		RefillConcurrency: pc.RefillConcurrency,
		WarmModules:       warm,
		RefillHold:        refillHold,
		Start:             func(ctx context.Context) (*sandbox.Sandbox, error) { return e.startSandboxFor(ctx, image, tenant) },
		Logger:            e.log,
	})
	e.pools[key] = p
	return p
}

// Prewarm creates the pool of the default image so it fills before the
// first request; with templates per tenant, no pool is anyone's before its
// tenant's first request.
func (e *Engine) Prewarm() {
	if !e.perTenant {
		e.poolFor(e.cfg.Images.Default, "")
	}
}

// TenantPools reports whether sandboxes, and so warm pools, are per tenant
// (sandbox.zygote_per_tenant): then Prewarm warms nothing.
func (e *Engine) TenantPools() bool { return e.perTenant }

// PoolStats are the counters of every pool.
func (e *Engine) PoolStats() []pool.Stats {
	e.mu.Lock()
	pools := make([]*pool.Pool, 0, len(e.pools))
	for _, p := range e.pools {
		pools = append(pools, p)
	}
	e.mu.Unlock()
	out := make([]pool.Stats, 0, len(pools))
	for _, p := range pools { // reads cgroup files: not under e.mu
		out = append(out, p.Stats())
	}
	return out
}
