package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/runtime/egress"
	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/seccomp"
)

// Options configure a Runtime.
type Options struct {
	// StateDir is forge's state directory; libcontainer state lives in
	// StateDir/containers and the agent in StateDir/agent.
	StateDir string
	// CgroupParent is the cgroup under which every sandbox's cgroup is made.
	CgroupParent string
	// IDRange is the host id range reserved for sandboxes: each one maps
	// its container ids 0..IDBlockSize-1 onto a block of it that no other
	// sandbox has while it lives (zero values: idmap's defaults). The range
	// must be clear of /etc/subuid, /etc/subgid and host accounts.
	IDRange     idmap.Range
	IDBlockSize uint32
	// Budget sizes each sandbox's share of the host's per-user kernel
	// limits (inotify, fanotify, namespaces), read below ProcRoot; zero
	// means DefaultBudget.
	Budget Budget
	// Parent caps the parent cgroup: every sandbox together. Zero fields
	// leave it as it is (forge gc, for one).
	Parent ParentLimits
	// ProcRoot and CgroupRoot are /proc and /sys/fs/cgroup; tests point
	// them at fakes.
	ProcRoot, CgroupRoot string
	Logger               *slog.Logger
	// Mode is how sandboxes are made ("": ModeContainer).
	Mode Mode
	// Zygote configures ModeZygote.
	Zygote ZygoteOptions
	// withoutZygoteHelper installs the agent without the C helper, as a
	// forge built without it has it (tests only: export_test.go).
	withoutZygoteHelper bool
}

// DefaultCgroupParent is the cgroup of every sandbox's cgroup unless
// Options name another.
const DefaultCgroupParent = "forge"

// Runtime creates sandboxes. It is safe for concurrent use.
type Runtime struct {
	mu   sync.Mutex
	live map[string]*Sandbox // sandboxes started and not yet destroyed

	root     string
	agentDir string
	zfork    []byte // the zygote's C helper installed beside the agent (kernel.ZFork), nil without

	initFile   *os.File        // set by tests: the slim init handed to init processes
	pycMu      sync.Mutex      // held while an image's agent bytecode is looked up or compiled
	pyc        map[string]bool // image id → its agent bytecode is usable
	cgroupBase string
	unified    bool             // cgroup v2: a process's cgroup is its "0::" line
	ids        *idmap.Allocator // one block of host ids per live sandbox
	recovered  CleanupReport    // what NewRuntime's Cleanup removed
	budgets    UserLimits       // each sandbox's per-user kernel limits
	rootless   bool             // forge runs as an ordinary user (internal/rootless)
	noCgroups  bool             // rootless without a cgroup of its own: rlimits, no freezer
	noFreeze   atomic.Bool      // StopFreezing was called: pauses leave sandboxes running
	delegated  Delegation       // rootless in this delegated cgroup v2 subtree (delegate_linux.go)
	procRoot   string
	nested     int64 // Budget.NestedNamespaces
	log        *slog.Logger

	mode      Mode
	zopts     ZygoteOptions
	tmu       sync.Mutex                    // guards the fields below
	templates []*template                   // forking
	all       []*template                   // not yet destroyed
	starting  map[templateKey]chan struct{} // closed when the key's template start ended
	beating   bool                          // beat runs
	closing   bool                          // closeTemplates began: no more background starts
	bgStarts  sync.WaitGroup                // background template starts
	zstats    ZygoteStats
	// noZygote holds, by rootfs, why the image's zygote template could not
	// start (ErrZygoteUnavailable): its sandboxes are containers.
	noZygote sync.Map
}

// Recovered is what NewRuntime removed of dead forge processes (forge gc
// reports it with its own Cleanup).
func (r *Runtime) Recovered() CleanupReport { return r.recovered }

// NewRuntime prepares the state directories, writes the agent and removes the
// sandboxes that dead forge processes left behind. It refuses to work in a
// build without seccomp.
func NewRuntime(ctx context.Context, opts Options) (*Runtime, error) {
	if err := seccomp.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeccompUnsupported, err)
	}
	if opts.StateDir == "" {
		return nil, fmt.Errorf("state dir not set: %w", ErrInvalidConfig)
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = DefaultCgroupParent
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = defaultProcRoot
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = defaultCgroupRoot
	}
	r := &Runtime{
		root:       filepath.Join(opts.StateDir, "containers"),
		cgroupBase: "/" + opts.CgroupParent,
		log:        opts.Logger,
		live:       make(map[string]*Sandbox),
		pyc:        make(map[string]bool),
		procRoot:   opts.ProcRoot,
		starting:   make(map[templateKey]chan struct{}),
	}
	if rootless.Active() {
		ids, block, err := RootlessIDs(opts.ProcRoot, opts.IDBlockSize, 1000)
		if err != nil {
			return nil, err
		}
		opts.IDRange, opts.IDBlockSize = ids, block
		r.rootless = true
		r.delegate(ctx, &opts)
		if ids.Size == 0 {
			// No subordinate range: only the user's own uid is mapped
			// (forge's root); every sandbox runs as it (forge doctor says
			// what that weakens).
			r.log.Warn("rootless without a subordinate range: every sandbox runs as your own uid; add a range in /etc/subuid and /etc/subgid (forge doctor)", "uid", rootless.UID())
			r.ids = idmap.NewShared(idmap.Range{Start: 0, Size: 1})
		}
		if r.noCgroups && opts.Parent != (ParentLimits{}) {
			r.log.Debug("rootless: no cgroup of forge's own; the parent limits (limits.memory, limits.pids of all sandboxes together) do not hold", "memory", cgroups.FormatMemory(opts.Parent.MemoryBytes), "pids", opts.Parent.Pids)
			opts.Parent = ParentLimits{}
		}
	}
	if err := r.setLimits(opts); err != nil {
		return nil, err
	}
	switch r.mode = opts.Mode; r.mode {
	case "":
		r.mode = ModeContainer
	case ModeContainer:
	case ModeZygote:
		r.zopts = opts.Zygote
		if err := r.zopts.setDefaults(); err != nil {
			return nil, err
		}
		if r.rootless {
			r.rootlessZygote(opts.IDRange, opts.IDBlockSize)
		}
	default:
		return nil, fmt.Errorf("sandbox mode %q: must be %q or %q: %w", opts.Mode, ModeContainer, ModeZygote, ErrInvalidConfig)
	}
	// The state dir must be traversable by the sandbox's mapped root, which
	// opens the rootfs and agent paths from inside its user namespace.
	for _, d := range []string{opts.StateDir, r.root} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("creating %q: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("chmod %q: %w", d, err)
		}
	}
	if r.zfork = kernel.ZFork(); opts.withoutZygoteHelper {
		r.zfork = nil
	}
	dir, err := writeAgent(opts.StateDir, r.zfork)
	if err != nil {
		return nil, err
	}
	r.agentDir = dir
	r.unified = occgroups.IsCgroup2UnifiedMode()
	if r.ids != nil {
		// shared (rootless, no subordinate range)
	} else if r.ids, err = idmap.New(idmap.Options{StateDir: opts.StateDir, Reserved: opts.IDRange, BlockSize: opts.IDBlockSize, Own: r.rootless}); err != nil {
		return nil, fmt.Errorf("sandbox host ids: %w", err)
	}
	prepareSlimInit(r.log)
	if r.recovered, err = r.Cleanup(ctx); err != nil {
		r.log.Warn("cleaning up orphaned sandboxes", "err", err)
	}
	return r, nil
}

// delegate makes a rootless runtime put its sandboxes' cgroups in the
// delegated cgroup v2 subtree it runs in or the systemd scope it asks the
// user's manager for (Delegate), or use rlimits (noCgroups) when there is
// none or it cannot be prepared. opts' cgroup root and parent then
// name the sandboxes' parent in that subtree, for setLimits.
func (r *Runtime) delegate(ctx context.Context, opts *Options) {
	d, err := Delegate(ctx, opts.ProcRoot, opts.CgroupRoot)
	if err == nil {
		err = d.Prepare(opts.CgroupRoot, opts.CgroupParent)
		if err != nil {
			r.log.Warn("rootless: the delegated cgroup cannot be used; limits are rlimits", "cgroup", d.Root, "err", err)
		}
	} else {
		r.log.Info("rootless: limits are rlimits (forge doctor)", "why", err)
	}
	if err != nil {
		r.noCgroups = true
		return
	}
	r.delegated = d
	r.cgroupBase = path.Join(d.Root, opts.CgroupParent)
	opts.CgroupRoot = filepath.Join(opts.CgroupRoot, d.Root)
	r.log.Info("rootless: sandboxes' cgroups in the delegated subtree", "cgroup", r.cgroupBase, "source", d.Source, "unit", d.Unit, "bus", d.Bus)
}

// setLimits sizes the sandboxes' kernel budgets and caps the parent cgroup.
func (r *Runtime) setLimits(opts Options) error {
	if opts.Budget == (Budget{}) {
		opts.Budget = DefaultBudget
	}
	if err := opts.Budget.Validate(); err != nil {
		return err
	}
	r.nested = opts.Budget.NestedNamespaces
	raiseOpenFiles(opts.Budget.Sandboxes, r.log)
	// A kernel without ucount sysctls (before 4.9) has none to set.
	if host, err := ReadUserLimits(opts.ProcRoot); err != nil {
		r.log.Warn("sandboxes get no per-user kernel budgets", "err", err)
	} else {
		r.budgets = opts.Budget.Divide(host)
		r.log.Info("per-sandbox kernel budgets", "sandboxes", opts.Budget.Among(), "reserve", opts.Budget.Reserve,
			"host", host.String(), "sandbox", r.budgets.String())
	}
	if opts.Parent == (ParentLimits{}) {
		return nil
	}
	pc := parentCgroup{root: opts.CgroupRoot, name: opts.CgroupParent}
	if pid := pc.other(os.Getpid()); pid > 0 {
		if l := pc.notLower(opts.Parent); l != opts.Parent {
			r.log.Info("parent cgroup shared with another forge process: its higher limits are kept", "cgroup", opts.CgroupParent, "pid", pid,
				"memory", cgroups.FormatMemory(opts.Parent.MemoryBytes), "pids", opts.Parent.Pids)
			opts.Parent = l
		}
	}
	if err := pc.apply(opts.Parent); err != nil {
		return fmt.Errorf("%w %s to memory %s, pids %d: %w", ErrParentLimits, opts.CgroupParent,
			cgroups.FormatMemory(opts.Parent.MemoryBytes), opts.Parent.Pids, err)
	}
	r.log.Info("parent cgroup limited", "cgroup", opts.CgroupParent, "v2", pc.unified(),
		"memory", cgroups.FormatMemory(opts.Parent.MemoryBytes), "pids", opts.Parent.Pids)
	return nil
}

// Budgets are each sandbox's per-user kernel limits (user.* sysctls).
func (r *Runtime) Budgets() UserLimits { return maps.Clone(r.budgets) }

// writeAgent writes the embedded agent (and the static pid-1 reaper and
// the zygote's C helper zfork, when forge was built with them) to
// StateDir/agent/<hash>/, world-readable and never writable by the sandbox
// (it is bind-mounted read-only, and owned by host root).
func writeAgent(stateDir string, zfork []byte) (string, error) {
	dir := filepath.Join(stateDir, "agent", agentHash(zfork))
	type file struct {
		name string
		data []byte
		mode os.FileMode
	}
	files := []file{{kernel.AgentFileName, kernel.AgentSource, 0o444}, {kernel.ZygoteFileName, kernel.ZygoteSource, 0o444}}
	if r := kernel.Reaper(); r != nil {
		files = append(files, file{kernel.ReaperFileName, r, 0o555})
	}
	if zfork != nil {
		files = append(files, file{kernel.ZForkFileName, zfork, 0o444})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating agent dir: %w", err)
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			return "", fmt.Errorf("chmod %q: %w", d, err)
		}
	}
	for _, f := range files {
		if err := installFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// installFile atomically writes data to path unless it is there already.
func installFile(path string, data []byte, mode os.FileMode) error {
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, data) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".install-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("installing %s: %w", path, err)
	}
	return nil
}

func (r *Runtime) track(s *Sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live[s.id] = s
}

func (r *Runtime) untrack(s *Sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, s.id)
}

// Live is the number of sandboxes started and not yet destroyed.
func (r *Runtime) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// Close destroys every sandbox this runtime started that is still alive.
func (r *Runtime) Close() error {
	r.mu.Lock()
	all := make([]*Sandbox, 0, len(r.live))
	for _, s := range r.live {
		all = append(all, s)
	}
	r.mu.Unlock()
	var errs []error
	for _, s := range all {
		errs = append(errs, s.Destroy())
	}
	r.closeTemplates()
	errs = append(errs, r.ids.Close())
	return errors.Join(errs...)
}

// IDs is the allocator of the sandboxes' host id blocks.
func (r *Runtime) IDs() *idmap.Allocator { return r.ids }

func agentHash(zfork []byte) string {
	h := sha256.New()
	h.Write(kernel.AgentSource)
	h.Write(kernel.ZygoteSource)
	h.Write(kernel.Reaper())
	h.Write(zfork)
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// Config describes one sandbox.
type Config struct {
	// Rootfs is the shared read-only mount of the image.
	Rootfs string
	// Limits are the cgroup limits at start; SetLimits can tighten them later.
	Limits cgroups.Limits
	// TmpSize caps the /tmp tmpfs.
	TmpSize int64
	// WorkspaceSize caps the /workspace tmpfs (a session's quota).
	WorkspaceSize int64
	// BridgeDir, when set, is bind-mounted at /run/forge (the sandbox's own
	// code-mode socket).
	BridgeDir string
	// Binds are mounted read-only under /run/forge (they need BridgeDir).
	Binds []Bind
	// TemplateBinds, in zygote mode, forks the sandbox from a template of
	// its own whose container has Binds mounted (their sources are the
	// template's key: forge's read-only snapshots, the same for many
	// sandboxes, such as a hosted tools module's). The child keeps the
	// template's /run/forge, so BridgeDir is not mounted in it (no
	// code-mode socket, no egress). In container mode it changes nothing.
	TemplateBinds bool
	// NewBridgeDir makes BridgeDir when a TemplateBinds sandbox starts as a
	// container after all (sandbox.mode container, or its image has no
	// zygote template), since Binds need one there; nil: none is made.
	NewBridgeDir func() (string, error)
	// TemplateWarm are more modules a TemplateBinds template imports before
	// it forks (an absolute path goes on its sys.path): forge's own code
	// from the binds (forge_tools), never the binds' untrusted modules,
	// which each child imports as a sandbox.
	TemplateWarm []string
	// UID is the uid (and gid) code runs as inside; container ids are
	// mapped onto the sandbox's own block of host ids (Options.IDRange).
	UID uint32
	// Seccomp is the filter; nil means seccomp.Default().
	Seccomp *specs.LinuxSeccomp
	// ImageID identifies the image mounted at Rootfs (hex, as the image store
	// names it). When set, the agent runs from bytecode compiled once for the
	// image (see agentArgv) instead of compiling agent.py at every start.
	ImageID string
	// Pin, when set, takes another hold on Rootfs for a use of it that may
	// outlast this sandbox (a zygote template that starts in the
	// background); the function it returns lets go of it.
	Pin func() (unpin func())
	// Tenant, in zygote mode, keeps this sandbox's template to sandboxes of
	// the same tenant: children of one template share its address layout,
	// stack canary and hash secret (docs/security.md), so with tenants
	// (sandbox.zygote_per_tenant) each has templates of its own. Opaque
	// here; "" is one more tenant.
	Tenant string
	// OnDestroy runs exactly once after the sandbox is destroyed, or when
	// Start fails (releasing the image mount it used, for instance).
	OnDestroy func()
	// BuildBinds are extra host paths mounted into the sandbox. Only builds
	// of custom environments use them (the uv binary read-only, the uv
	// cache and the target directory read-write); their mount points must
	// exist in the rootfs.
	BuildBinds []BuildBind
	// Egress, when set (with a policy that allows something), is given to
	// the sandbox once its agent is up, as SetEgress does; it needs
	// BridgeDir. Pooled sandboxes get theirs later, per request, with
	// SetEgress.
	Egress *Egress
}

// BuildBind is one host path mounted into a build sandbox.
type BuildBind struct {
	Source, Destination string
	Writable            bool
}

func (c *Config) setDefaults(blockSize uint32, shared bool) error {
	if c.TmpSize == 0 {
		c.TmpSize = DefaultTmpSize
	}
	if c.WorkspaceSize == 0 {
		c.WorkspaceSize = 64 << 20
	}
	if c.UID == 0 {
		c.UID = 1000
	}
	if shared {
		c.UID = 0 // the one id mapped (WithOwnIDMapping): code runs as it, with no capabilities
	}
	if c.UID >= blockSize && !shared {
		return fmt.Errorf("sandbox uid %d outside the mapped block of %d ids: %w", c.UID, blockSize, ErrInvalidConfig)
	}
	if c.Seccomp == nil {
		sc, err := seccomp.Default()
		if err != nil {
			return fmt.Errorf("default seccomp profile: %w", err)
		}
		c.Seccomp = sc
	}
	return c.Limits.Validate()
}

// specconvMu serializes specconv.CreateLibcontainerConfig, which writes
// package globals of runc's specconv (the default devices).
var specconvMu sync.Mutex

// libcontainerConfig converts the spec of container id (a sandbox's or a
// zygote template's) to libcontainer's config, with the spec's rlimits,
// which specconv ignores. rootlessCgroups is specconv's option of that name.
func libcontainerConfig(id string, spec *specs.Spec, rootlessCgroups bool) (*configs.Config, error) {
	specconvMu.Lock()
	lc, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName: id, Spec: spec, NoNewKeyring: true, RootlessCgroups: rootlessCgroups,
	})
	if err == nil {
		// The devices point at specconv's package-level defaults, which
		// it writes (owner uids) on every call: give this config copies.
		for i, d := range lc.Devices {
			c := *d
			lc.Devices[i] = &c
		}
	}
	specconvMu.Unlock()
	if err != nil {
		return nil, err
	}
	lc.Rlimits = rlimits(spec.Process.Rlimits)
	return lc, nil
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
}

// spec builds the OCI spec of a sandbox.
func (r *Runtime) spec(id string, cfg *Config, ids idmap.Range, argv []string) (*specs.Spec, error) {
	ident := []SpecOpt{WithIDMapping(ids.Start, ids.Size), WithUser(cfg.UID, cfg.UID)}
	if r.ids.Shared() {
		ident = []SpecOpt{WithOwnIDMapping()}
	}
	opts := append([]SpecOpt{
		WithRootfs(cfg.Rootfs),
		WithHostname("sandbox-" + id[len(id)-6:])},
		ident...) // before the tmpfs mounts, which the sandbox user owns
	opts = append(opts,
		WithArgs(argv...),
		WithTmpfs("/tmp", cfg.TmpSize),
		WithTmpfs(WorkspacePath, cfg.WorkspaceSize),
		WithReadOnlyBind(r.agentDir, AgentMountPoint),
		WithSeccomp(cfg.Seccomp),
		WithUserLimits(r.budgets),
	)
	if !r.noCgroups {
		opts = append(opts, WithResources(cfg.Limits.Spec()), WithCgroupsPath(r.cgroupBase+"/"+id))
	}
	if cfg.BridgeDir != "" {
		opts = append(opts, WithReadOnlyBind(cfg.BridgeDir, BridgeMountPoint))
	}
	binds, err := bindOpts(cfg)
	if err != nil {
		return nil, err
	}
	for _, b := range cfg.BuildBinds {
		if b.Writable {
			binds = append(binds, WithWritableBind(b.Source, b.Destination))
		} else {
			binds = append(binds, WithReadOnlyBind(b.Source, b.Destination))
		}
	}
	return NewSpec(append(opts, binds...)...)
}

// Sandbox is one running sandbox whose init process is the agent.
type Sandbox struct {
	id      string
	rt      *Runtime
	c       *libcontainer.Container
	proc    *libcontainer.Process
	client  *kernel.Client
	hello   *kernel.Hello
	stderr  *boundedBuffer
	started time.Time

	exited chan struct{} // closed when the init process has been reaped
	state  *os.ProcessState
	child  *zchild           // set in zygote mode (c and proc are nil)
	cgm    occgroups.Manager // the sandbox's cgroups, for reading usage

	onDestroy func()
	bridgeDir string
	uid       uint32       // of the sandbox user, inside
	lease     *idmap.Lease // the host ids container ids map onto
	cgroup    string       // path of the sandbox's cgroup, as /proc/PID/cgroup shows it

	// killReason is why forge killed the sandbox (the first reason), nil while it has not.
	killReason atomic.Pointer[string]
	// seen are the cgroup's event counters after the last run (Exec's goroutine only).
	seen struct{ oomKills, pidsHits uint64 }

	egressMu sync.Mutex
	egress   *egress.Listener // nil without egress

	mu        sync.Mutex
	limits    cgroups.Limits // in force
	destroyed bool
	paused    bool
}

// Start creates a sandbox and waits until its agent says hello.
func (r *Runtime) Start(ctx context.Context, cfg Config) (_ *Sandbox, retErr error) {
	onDestroy := cfg.OnDestroy
	cfg.OnDestroy = nil // set on the sandbox that is handed out, not on a failed attempt
	defer func() {
		if retErr != nil && onDestroy != nil {
			onDestroy()
		}
	}()
	zygote := r.mode == ModeZygote
	if zygote && cfg.Seccomp == nil {
		sc, err := defaultSeccomp()
		if err != nil {
			return nil, fmt.Errorf("default seccomp profile: %w", err)
		}
		cfg.Seccomp = sc
	}
	if err := cfg.setDefaults(r.ids.BlockSize(), r.ids.Shared()); err != nil {
		return nil, err
	}
	if err := r.ensureAgentDir(); err != nil {
		return nil, err
	}
	if zygote && ((len(cfg.Binds) > 0 && !cfg.TemplateBinds) || len(cfg.BuildBinds) > 0 || r.zygoteUnavailable(cfg.Rootfs)) {
		// A child gets its bridge directory (code mode's socket) as a detached
		// mount; more binds (sandboxed servers, which also Spawn, and builds)
		// stay containers. Binds many sandboxes share (hosted tools:
		// TemplateBinds) are mounted in a template of their own instead.
		// An image whose template could not start is served by containers.
		r.zstat(func(z *ZygoteStats) { z.Fallbacks++ })
		zygote = false
	}
	var s *Sandbox
	var err error
	if zygote {
		s, err = r.startChild(ctx, cfg)
		if errors.Is(err, ErrZygoteUnavailable) {
			r.noZygoteFor(cfg, err)
			r.zstat(func(z *ZygoteStats) { z.Fallbacks++ })
			zygote = false
		}
	}
	if !zygote && cfg.BridgeDir == "" && cfg.NewBridgeDir != nil {
		if cfg.BridgeDir, err = cfg.NewBridgeDir(); err != nil {
			return nil, fmt.Errorf("bridge directory of a container for binds: %w", err)
		}
	}
	if !zygote {
		argv, compiled := r.agentArgv(ctx, cfg)
		s, err = r.start(ctx, cfg, argv)
		if err != nil && compiled && errors.Is(err, errAgentStart) && ctx.Err() == nil {
			// Bytecode the image's Python does not run: forget it and start from source.
			r.log.Warn("agent bytecode did not start; using the source", "image", cfg.ImageID, "err", err)
			r.dropBytecode(cfg.ImageID)
			s, err = r.start(ctx, cfg, kernel.Argv(kernel.AgentPath))
		}
	}
	if err != nil {
		return nil, err
	}
	if cfg.Egress != nil {
		if err := s.SetEgress(ctx, cfg.Egress); err != nil {
			s.onDestroy = onDestroy
			onDestroy = nil // Destroy runs it
			_ = s.Destroy()
			return nil, err
		}
	}
	s.onDestroy = onDestroy
	return s, nil
}

// zygoteUnavailable says whether rootfs's zygote template could not start.
func (r *Runtime) zygoteUnavailable(rootfs string) bool {
	_, ok := r.noZygote.Load(rootfs)
	return ok
}

// noZygoteFor records why cfg's image has no zygote template, and says so
// once per image: from then on Start makes its sandboxes containers without
// trying a template again.
func (r *Runtime) noZygoteFor(cfg Config, err error) {
	if _, seen := r.noZygote.LoadOrStore(cfg.Rootfs, err); !seen {
		r.zstat(func(z *ZygoteStats) { z.UnavailableImages++ })
		r.log.Warn("zygote mode unavailable for this image: its sandboxes start as containers (slower; forge doctor)",
			"image", cfg.ImageID, "rootfs", cfg.Rootfs, "why", err)
	}
}

// ensureAgentDir writes the agent directory again if it was removed from
// under the runtime (by forge gc of another build, or by hand); the bytecode
// went with it, so the runtime forgets what it knew of it.
func (r *Runtime) ensureAgentDir() error {
	if _, err := os.Stat(r.agentDir); err == nil {
		return nil
	}
	if _, err := writeAgent(filepath.Dir(filepath.Dir(r.agentDir)), r.zfork); err != nil {
		return err
	}
	r.pycMu.Lock()
	clear(r.pyc)
	r.pycMu.Unlock()
	return nil
}

// DefaultTmpSize is the size of /tmp when Config.TmpSize is 0.
const DefaultTmpSize = 64 << 20

// errAgentStart marks a sandbox whose container ran but whose agent never said hello.
var errAgentStart = errors.New("agent did not start")

// start creates one sandbox whose init runs argv; cfg has its defaults.
func (r *Runtime) start(ctx context.Context, cfg Config, argv []string) (_ *Sandbox, retErr error) {
	var s *Sandbox
	id := newID()
	lease, err := r.ids.Allocate()
	if err != nil {
		return nil, fmt.Errorf("host ids of sandbox %s: %w", id, err)
	}
	defer func() {
		if s == nil { // nothing ran under the lease
			_ = lease.Release()
		}
	}()
	spec, err := r.spec(id, &cfg, lease.Range(), argv)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	lc, err := libcontainerConfig(id, spec, r.rootless)
	if err != nil {
		return nil, fmt.Errorf("converting spec of sandbox %s: %w", id, err)
	}
	if r.noCgroups {
		lc.Rlimits = append(lc.Rlimits, rlimitsFor(cfg.Limits)...)
	}
	tSpec := time.Since(t0)
	c, err := libcontainer.Create(r.root, id, lc)
	if err != nil {
		return nil, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	s = &Sandbox{limits: cfg.Limits, id: id, rt: r, c: c, exited: make(chan struct{}), stderr: &boundedBuffer{max: 64 << 10},
		onDestroy: cfg.OnDestroy, bridgeDir: cfg.BridgeDir, uid: cfg.UID, lease: lease, cgroup: r.cgroupBase + "/" + id}
	r.track(s)
	defer func() {
		if retErr != nil {
			_ = s.Destroy()
		}
	}()

	// fd 3 carries requests to the agent, fd 4 its replies; the agent moves
	// both out of reach of user code before running anything.
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	p := &libcontainer.Process{
		Args:            spec.Process.Args,
		Env:             spec.Process.Env,
		UID:             int(cfg.UID),
		GID:             int(cfg.UID),
		Cwd:             spec.Process.Cwd,
		Stderr:          s.stderr,
		ExtraFiles:      extraFiles(reqR, repW, r.slimInit()),
		Init:            true,
		NoNewPrivileges: &spec.Process.NoNewPrivileges,
		Capabilities:    &configs.Capabilities{},
		Rlimits:         lc.Rlimits,
	}
	s.started = time.Now()
	err = r.run(c, p)
	reqR.Close()
	repW.Close()
	if err != nil {
		reqW.Close()
		repR.Close()
		return nil, fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	s.proc = p
	s.client = kernel.NewClient(repR, reqW, kernel.Options{Logger: r.log.With("sandbox", id), OnBreak: s.onClientBreak})
	go s.wait() // after the client exists: wait closes it
	st, err := c.State()
	if err == nil && !r.noCgroups {
		s.cgm, err = manager.NewWithPaths(lc.Cgroups, st.CgroupPaths)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroups of sandbox %s: %w", id, err)
	}
	tRun := time.Since(s.started)
	hello, err := s.client.Hello(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s %w: %w%s", id, errAgentStart, err, s.stderrNote())
	}
	s.hello = hello
	if hello.StrayFDs != 0 {
		r.log.Warn("the agent found and closed descriptors it was not meant to get", "sandbox", id, "count", hello.StrayFDs)
	}
	r.log.Debug("sandbox started", "sandbox", id, "spec", tSpec, "create", s.started.Sub(t0)-tSpec,
		"run", tRun, "agent_ready", time.Since(s.started)-tRun, "total", time.Since(t0))
	return s, nil
}

// slimInit is the memfd to hand to the init process, nil while it is not ready.
func (r *Runtime) slimInit() *os.File {
	if r.initFile != nil {
		return r.initFile
	}
	return readySlimInit()
}

// extraFiles are the init process's descriptors from fd 3 on: the protocol
// pipes, then the slim init (which the init process closes as it execs it).
func extraFiles(req, rep, init *os.File) []*os.File {
	if init == nil {
		return []*os.File{req, rep}
	}
	return []*os.File{req, rep, init}
}

// The cgroup fs manager's subsystems detect their file names on their
// first Set and store them in package globals, so the first sandbox start
// of the process runs alone.
var (
	firstStart sync.Mutex
	warmedUp   atomic.Bool // a start succeeded
)

// run starts the container (see firstStart).
func (r *Runtime) run(c *libcontainer.Container, p *libcontainer.Process) error {
	if !warmedUp.Load() {
		firstStart.Lock()
		defer firstStart.Unlock()
		if !warmedUp.Load() {
			err := c.Run(p)
			if err == nil {
				warmedUp.Store(true)
			}
			return err
		}
	}
	return c.Run(p)
}

func rlimits(in []specs.POSIXRlimit) []configs.Rlimit {
	out := make([]configs.Rlimit, 0, len(in))
	for _, l := range in {
		var t int
		switch l.Type {
		case "RLIMIT_NOFILE":
			t = unix.RLIMIT_NOFILE
		case "RLIMIT_CORE":
			t = unix.RLIMIT_CORE
		case "RLIMIT_FSIZE":
			t = unix.RLIMIT_FSIZE
		default:
			continue
		}
		out = append(out, configs.Rlimit{Type: t, Hard: l.Hard, Soft: l.Soft})
	}
	return out
}

func (s *Sandbox) wait() {
	st, _ := s.proc.Wait()
	s.state = st
	close(s.exited)
	s.client.Close()
}

func (s *Sandbox) stderrNote() string {
	if b := s.stderr.String(); b != "" {
		return "; agent stderr: " + b
	}
	return ""
}

// ID is the sandbox's unique id (also its container id).
func (s *Sandbox) ID() string { return s.id }

// BridgeDir is the host directory mounted at /run/forge, if any.
func (s *Sandbox) BridgeDir() string { return s.bridgeDir }

// IDs is the block of host ids the sandbox's container ids map onto; no
// other live sandbox has any of them.
func (s *Sandbox) IDs() idmap.Range { return s.lease.Range() }

// HostUID is the host uid of the sandbox user (owner of its bridge socket
// and of files restored into its /workspace).
func (s *Sandbox) HostUID() int { return int(s.lease.Range().Start + s.uid) }

// HostGID is the host gid of the sandbox user.
func (s *Sandbox) HostGID() int { return int(s.lease.Range().Start + s.uid) }

// OwnsProcess reports whether host pid is a process of this sandbox: one
// in its cgroup, which no process outside can join (the cgroup is host
// root's, and the sandbox cannot create cgroups).
func (s *Sandbox) OwnsProcess(pid int) (bool, error) {
	if s.rt.rootless {
		// Rootless, the cgroup (if any) is the user's, whose other
		// processes could join it: its pid namespace, which nothing
		// outside can join (setns needs a capability in the sandbox's
		// user namespace).
		return inPidNS(s.rt.procRoot, s.Pid(), pid)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false, err
	}
	return inCgroup(string(b), s.cgroup, s.rt.unified), nil
}

// inCgroup reports whether /proc/PID/cgroup content places the process in
// cgroup (or below it): on v2 by its "0::" line, on v1 by the pids
// hierarchy, which every sandbox is limited in.
func inCgroup(content, cgroup string, unified bool) bool {
	for line := range strings.SplitSeq(content, "\n") {
		id, rest, _ := strings.Cut(line, ":")
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		match := unified && id == "0" && ctrls == ""
		if !unified {
			for c := range strings.SplitSeq(ctrls, ",") {
				match = match || c == "pids"
			}
		}
		if match {
			return path == cgroup || strings.HasPrefix(path, cgroup+"/")
		}
	}
	return false
}

// Hello is what the agent reported at start.
func (s *Sandbox) Hello() *kernel.Hello { return s.hello }

// Pid is the host pid of the sandbox's init (pid 1 inside: the reaper,
// whose /proc/PID/root is the sandbox's root).
func (s *Sandbox) Pid() int {
	if s.child != nil {
		return s.child.initPid
	}
	pid, _ := s.proc.Pid()
	return pid
}

// Client is the agent connection, for operations other than Exec.
func (s *Sandbox) Client() *kernel.Client { return s.client }

// Alive reports whether the agent process is still running.
func (s *Sandbox) Alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Frozen reports whether the sandbox's cgroup is frozen, as the kernel says
// (not Pause's bookkeeping): a session's sandbox is frozen moments after
// each call (runtime/session, settle.go), which tests check here.
func (s *Sandbox) Frozen() (bool, error) {
	if s.rt.noCgroups || s.cgm == nil {
		return false, ErrNoCgroup
	}
	st, err := s.cgm.GetFreezerState()
	if err != nil {
		return false, fmt.Errorf("reading the freezer state of sandbox %s: %w", s.id, err)
	}
	return st == occgroups.Frozen, nil
}

// Pause freezes every process of the sandbox; pausing a paused sandbox is a no-op.
func (s *Sandbox) Pause() error { return s.pause(freezeSpins) }

// PauseIdle is Pause for callers off a request's path (a session's sandbox
// after its call was answered): a zygote child's freeze is waited for by
// sleeping from the first round instead of spinning. Spinning only shortens
// a wait nobody is waiting for here, with cycles the sandboxes answering
// other calls need.
func (s *Sandbox) PauseIdle() error { return s.pause(0) }

func (s *Sandbox) pause(spins int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return ErrClosed
	}
	if s.paused {
		return nil
	}
	if s.rt.noCgroups || s.rt.noFreeze.Load() {
		// No freezer (or forge is stopping: StopFreezing): an idle agent
		// blocks on its pipe; threads user code left running carry on
		// (forge doctor says so).
		s.paused = true
		return nil
	}
	if err := s.freezeLocked(spins); err != nil {
		return fmt.Errorf("pausing sandbox %s: %w", s.id, err)
	}
	s.paused = true
	return nil
}

// freezeTries bounds the attempts to pause a sandbox. The cgroup v1 freezer
// gives up ("unable to freeze") after about 200 ms while a process of the
// sandbox sits in an uninterruptible sleep, which on a loaded host (disk
// I/O of an agent starting up) happens; a later attempt succeeds. libcontainer
// thaws the cgroup after each failed attempt, so retrying is safe.
const freezeTries = 10

func (s *Sandbox) freezeLocked(spins int) error {
	var err error
	for i := 0; i < freezeTries; i++ {
		if s.child != nil {
			if err = s.child.freeze(spins); err == nil {
				return nil
			}
			if !s.Alive() {
				return err
			}
		} else if err = s.c.Pause(); err == nil {
			return nil
		} else if st, serr := s.c.Status(); serr != nil || st != libcontainer.Running {
			return err // dead or dying: no point in retrying
		}
		time.Sleep(time.Duration(i+1) * 20 * time.Millisecond)
	}
	return fmt.Errorf("%d attempts: %w", freezeTries, err)
}

// Resume thaws the sandbox; resuming a running sandbox is a no-op.
func (s *Sandbox) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return ErrClosed
	}
	if !s.paused {
		return nil
	}
	if s.rt.noCgroups {
		s.paused = false
		return nil
	}
	if err := s.thawLocked(); err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", s.id, err)
	}
	s.paused = false
	return nil
}

// thawLocked thaws the sandbox's cgroup if it is frozen (s.mu held).
func (s *Sandbox) thawLocked() error {
	if s.child != nil {
		return s.child.setFreezer(occgroups.Thawed)
	}
	if err := s.c.Resume(); err != nil && !errors.Is(err, libcontainer.ErrNotPaused) {
		return err // not paused: a pause left it running (StopFreezing)
	}
	return nil
}

// StopFreezing thaws every paused sandbox and makes later pauses leave
// sandboxes running: forge is stopping. A frozen task cannot die on cgroup
// v1, so a forge killed (SIGKILL) while a sandbox of its is frozen would
// leave that sandbox alive and, as pid 1 of a container, its own exit hung
// on it (a pod stuck Terminating: `kubectl delete --force` sends SIGKILL 2 s
// after SIGTERM). forge serve calls it at its first SIGTERM, before any step
// that may outlast a kill's grace. Paused sandboxes stay paused to their
// owners (Resume is then a no-op); only their cgroups are thawed.
func (r *Runtime) StopFreezing() {
	if r.noCgroups || r.noFreeze.Swap(true) {
		return
	}
	r.mu.Lock()
	live := slices.Collect(maps.Values(r.live))
	r.mu.Unlock()
	for _, s := range live {
		s.mu.Lock()
		if s.paused && !s.destroyed {
			if err := s.thawLocked(); err != nil {
				r.log.Warn("thawing a paused sandbox at stop", "sandbox", s.id, "err", err)
			}
		}
		s.mu.Unlock()
	}
}

// SetLimits applies new cgroup limits to the running sandbox; the same
// limits again cost nothing.
func (s *Sandbox) SetLimits(l cgroups.Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l == s.limits {
		return nil
	}
	if s.rt.noCgroups {
		if err := s.setRlimits(l); err != nil {
			return fmt.Errorf("setting limits of sandbox %s: %w", s.id, err)
		}
		s.limits = l
		return nil
	}
	if s.child != nil {
		res := l.Resources()
		res.SkipDevices = true
		if err := s.child.setResources(res); err != nil {
			return fmt.Errorf("setting limits of sandbox %s: %w", s.id, err)
		}
		s.limits = l
		return nil
	}
	cfg := s.c.Config()
	res := *cfg.Cgroups.Resources
	l.ApplyTo(&res)
	res.SkipDevices = true
	cg := *cfg.Cgroups
	cg.Resources = &res
	cfg.Cgroups = &cg
	if err := s.c.Set(cfg); err != nil {
		return fmt.Errorf("setting limits of sandbox %s: %w", s.id, err)
	}
	s.limits = l
	return nil
}

// Usage reads the sandbox's cgroup counters.
func (s *Sandbox) Usage() (cgroups.Usage, error) {
	if s.rt.noCgroups {
		return cgroups.Usage{}, ErrNoCgroup
	}
	return cgroups.ReadUsage(s.cgm)
}

// Kill SIGKILLs every process of the sandbox and waits until init is reaped.
func (s *Sandbox) Kill() {
	if !s.Alive() {
		return
	}
	if err := s.signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
		s.rt.log.Debug("killing sandbox", "sandbox", s.id, "err", err)
	}
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.rt.log.Warn("sandbox init not reaped 5s after SIGKILL", "sandbox", s.id)
	}
}

// onClientBreak kills the sandbox when its agent broke the protocol (a forged or oversized
// reply) or a request could not be written: nothing can use it any more. An agent that
// exited is left to finish dying, so its exit status is its own.
func (s *Sandbox) onClientBreak(err error) {
	if errors.Is(err, kernel.ErrAgentExited) {
		return
	}
	why := "the agent stopped answering: "
	if errors.Is(err, kernel.ErrProtocol) {
		why = "the agent broke the protocol: "
	}
	s.rt.log.Warn("sandbox agent client broken; killing the sandbox", "sandbox", s.id, "err", err)
	s.killFor(why + err.Error())
}

// killFor kills a live sandbox and remembers why (DeathReason).
func (s *Sandbox) killFor(reason string) {
	if !s.Alive() {
		return
	}
	s.killReason.CompareAndSwap(nil, &reason)
	s.Kill()
}

// KillFor kills the sandbox, also a paused one, for a reason that DeathReason reports
// afterwards: the host found it broke a rule (a forged file, a reply it cannot trust).
func (s *Sandbox) KillFor(reason string) {
	_ = s.Resume() // a frozen process dies only once thawed
	s.killFor(reason)
}

// DeathReason says why the sandbox is no longer running, for a session's lost_reason: what
// forge killed it for, else how the agent ended. It is "" while the agent runs.
func (s *Sandbox) DeathReason() string {
	if r := s.killReason.Load(); r != nil {
		return *r
	}
	code, exited := s.ExitStatus()
	if !exited {
		return ""
	}
	if u, err := s.Usage(); err == nil && u.OOMKills > 0 {
		return "it ran out of memory (OOM kill)"
	}
	return endingText(code)
}

// PidsLimitHits is how often the sandbox's cgroup refused a process or thread at pids.max.
func (s *Sandbox) PidsLimitHits() (uint64, error) {
	if s.rt.noCgroups {
		return 0, ErrNoCgroup
	}
	return cgroups.ReadPidsLimitHits(s.cgm)
}

// Interrupt sends SIGINT to the agent: running code gets KeyboardInterrupt.
func (s *Sandbox) Interrupt() error {
	return s.signal(unix.SIGINT)
}

// signal sends sig to init (SIGKILL: to every process of the sandbox).
func (s *Sandbox) signal(sig unix.Signal) error {
	if s.child != nil {
		return s.child.kill(sig)
	}
	return s.c.Signal(sig)
}

// ExitStatus returns the agent's exit code (128+signal when killed), once it exited.
func (s *Sandbox) ExitStatus() (int, bool) {
	select {
	case <-s.exited:
	default:
		return 0, false
	}
	if s.child != nil {
		return s.child.code, true
	}
	if s.state == nil {
		return -1, true
	}
	ws, ok := s.state.Sys().(syscall.WaitStatus)
	if !ok {
		return s.state.ExitCode(), true
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), true
	}
	return ws.ExitStatus(), true
}

// Destroy kills the sandbox and removes its cgroup and state. Safe to call
// more than once.
func (s *Sandbox) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return nil
	}
	s.destroyed = true
	if s.proc != nil || s.child != nil {
		s.Kill()
	} else {
		_ = s.c.Signal(unix.SIGKILL)
	}
	if s.client != nil {
		s.client.Close()
	}
	s.closeEgress()
	defer s.rt.untrack(s)
	if s.onDestroy != nil {
		defer s.onDestroy()
	}
	if s.child != nil {
		if err := s.child.destroy(); err != nil {
			return fmt.Errorf("destroying sandbox %s (its host ids %s stay reserved): %w", s.id, s.lease.Range(), err)
		}
		s.rt.log.Debug("sandbox destroyed", "sandbox", s.id)
		return nil
	}
	if err := s.c.Destroy(); err != nil {
		// The lease stays taken: a process of the sandbox may live on.
		return fmt.Errorf("destroying sandbox %s (its host ids %s stay reserved): %w", s.id, s.lease.Range(), err)
	}
	s.releaseIDs()
	s.rt.log.Debug("sandbox destroyed", "sandbox", s.id)
	return nil
}

// releaseIDs gives the sandbox's host ids back once none of its processes
// can exist: its init reaped (the kernel reaps a pid namespace's init only
// after every other process in it is gone) and its cgroup removed. A
// sandbox whose init never ran under a Wait is checked in /proc instead.
func (s *Sandbox) releaseIDs() {
	var err error
	switch {
	case s.proc != nil && s.Alive():
		s.rt.log.Warn("sandbox init not reaped; its host ids stay reserved", "sandbox", s.id, "ids", s.lease.Range())
		return
	case s.proc != nil:
		err = s.lease.Release()
	default:
		var ok bool
		if ok, err = s.lease.ReleaseIfUnused(); err == nil && !ok {
			s.rt.log.Warn("processes of a sandbox that failed to start remain; its host ids stay reserved", "sandbox", s.id, "ids", s.lease.Range())
		}
	}
	if err != nil {
		s.rt.log.Warn("releasing host ids", "sandbox", s.id, "err", err)
	}
}

// boundedBuffer keeps the first max bytes written to it (the agent's own
// stderr, for diagnostics) and discards the rest.
type boundedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*boundedBuffer)(nil)

// MemoryCurrent is the sandbox's current memory charge in bytes.
// It does not wait for a Destroy (or a pause) in progress: the cgroup
// manager it reads is not safe to use while Destroy removes its paths, so
// it then answers ErrClosed (a pool's stats skip that sandbox).
func (s *Sandbox) MemoryCurrent() (uint64, error) {
	if s.rt.noCgroups {
		return 0, ErrNoCgroup
	}
	if !s.mu.TryLock() {
		return 0, ErrClosed
	}
	defer s.mu.Unlock()
	if s.destroyed {
		return 0, ErrClosed
	}
	return cgroups.ReadMemoryCurrent(s.cgm)
}

// Healthy reports whether every process of the sandbox is alive and none
// has a fatal signal pending. A sandbox killed from outside while frozen
// only dies once thawed; this tells it apart before anyone resumes it.
func (s *Sandbox) Healthy() error {
	if !s.Alive() {
		return errors.New("agent exited")
	}
	var pids []int
	var err error
	if s.rt.noCgroups {
		pids, err = nsProcesses(s.rt.procRoot, s.Pid())
	} else if s.child != nil {
		pids, err = cgroupProcs(s.cgm)
	} else {
		pids, err = s.c.Processes()
	}
	if err != nil {
		return fmt.Errorf("listing processes: %w", err)
	}
	if len(pids) < 2 {
		return fmt.Errorf("%d processes, want the reaper and the agent", len(pids))
	}
	for _, pid := range pids {
		if err := procHealthy(pid); err != nil {
			return fmt.Errorf("pid %d: %w", pid, err)
		}
	}
	return nil
}

// procHealthy reads /proc/PID/status: a zombie, or SIGKILL pending for the
// thread or the process, means it is dead or dying.
func procHealthy(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return fmt.Errorf("state %s", v)
			}
		case "SigPnd", "ShdPnd":
			mask, err := strconv.ParseUint(v, 16, 64)
			if err == nil && mask&(1<<(uint(unix.SIGKILL)-1)) != 0 {
				return errors.New("SIGKILL pending")
			}
		}
	}
	return nil
}
