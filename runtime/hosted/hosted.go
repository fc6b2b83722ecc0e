// Package hosted serves the @tool functions of a forge_tools module as MCP
// tools with every call sandboxed. The module is imported only inside
// sandboxes, from a read-only snapshot of the tools path next to the
// embedded forge_tools sources; the tool table comes back from there as
// untrusted data and is checked (count, names, schema sizes, JSON Schema
// 2020-12) before forge keeps it. Arguments are validated on the host
// against the tool's inputSchema; then the call runs in a sandbox taken from
// this package's own warm pool, whose sandboxes already imported the module,
// and that sandbox is destroyed afterwards. A persistent tool keeps one
// worker per principal instead. Changes of the path are polled; a good
// reload replaces the table (and the pool), a broken one keeps the old.
package hosted

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "embed"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/pool"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

//go:embed boot.py
var bootSource string

// refillHold is how long at most a call holds back the refill of the
// sandbox it took (pool.Options.RefillHold).
const refillHold = 500 * time.Millisecond

// bootTimeout bounds importing the module (at start, reload or refill).
const bootTimeout = 60 * time.Second

// Options configure a Host.
type Options struct {
	Engine *engine.Engine
	// Config is the hosted_tools section; Config.Path is required.
	Config profiles.HostedToolsConfig
	// StateDir holds the snapshots and the forge_tools sources.
	StateDir string
	// OutputLimit caps what one call's sandbox may print (stdout carries
	// the reply); 0 means 1 MiB.
	OutputLimit int
	Logger      *slog.Logger
}

// Host is one tools module being served. Safe for concurrent use.
type Host struct {
	opts   Options
	cfg    profiles.HostedToolsConfig
	eng    *engine.Engine
	log    *slog.Logger
	audit  *audit.Logger
	sdkDir string
	snaps  string

	mu      sync.Mutex
	gen     *generation
	closed  bool
	workers map[workerKey]*worker
	lastUse uint64
	retired []*snapshot // removed at Close: calls may still use them

	// check vets a table before it replaces the current one (name
	// collisions with the face's own tools); onChange announces a new one.
	check    func([]Tool) error
	onChange func()
	// unannounced: revalidate replaced the table while onChange was unset.
	unannounced bool
	hooksVer    int // counts SetHooks

	stop chan struct{}
	wg   sync.WaitGroup
}

// SetHooks sets what a face does around a reload: check refuses a new
// table (the old one stays), onChange runs after one replaced the old.
func (h *Host) SetHooks(check func([]Tool) error, onChange func()) {
	h.mu.Lock()
	h.check, h.onChange = check, onChange
	h.hooksVer++
	missed := h.unannounced && onChange != nil
	h.unannounced = h.unannounced && !missed
	tools := h.gen.tools
	h.mu.Unlock()
	if !missed {
		return
	}
	// revalidate replaced a cached table before the face was listening.
	if check != nil {
		if err := check(tools); err != nil {
			h.log.Warn("the re-read hosted tool table is refused", "path", h.cfg.Path, "err", err)
			return
		}
	}
	onChange()
}

// generation is one loaded table with the snapshot it came from and the
// pool of sandboxes that imported it.
type generation struct {
	snap   *snapshot
	stamp  string
	key    string // of the table cache
	tools  []Tool
	byName map[string]*Tool
	pools  *tenantPools // nil with pool_size 0
}

// tenantPools are a generation's warm sandboxes: one pool per tenant when
// sandboxes are per tenant (engine.TenantPools, sandbox.zygote_per_tenant),
// else one for all ("" is its key). In zygote mode each pool's sandboxes
// are children of a template that has the generation's snapshot mounted.
type tenantPools struct {
	mu     sync.Mutex
	m      map[string]*pool.Pool
	closed bool
}

// New snapshots the path, reads its tool table in a sandbox and starts the
// pool. A module that does not import, or a table forge refuses, is an
// error here (at start), naming the cause.
func New(ctx context.Context, opts Options) (*Host, error) {
	if opts.Config.Path == "" {
		return nil, fmt.Errorf("%w: no path (hosted_tools.path, forge serve --tools)", ErrSource)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// Larger caps than the agent's default break the run (measured: the
	// sandbox is killed), so calls and the table stay within it.
	if opts.OutputLimit <= 0 || opts.OutputLimit > kernel.DefaultOutputLimit {
		opts.OutputLimit = kernel.DefaultOutputLimit
	}
	if err := opts.Engine.CheckImage(opts.Config.Image); err != nil {
		return nil, fmt.Errorf("hosted_tools.image: %w", err)
	}
	h := &Host{opts: opts, cfg: opts.Config, eng: opts.Engine, log: opts.Logger, audit: opts.Engine.Audit(),
		snaps: filepath.Join(opts.StateDir, "hosted"), workers: map[workerKey]*worker{}, stop: make(chan struct{})}
	var err error
	removeDeadSnapshots(h.snaps, h.log)
	if h.sdkDir, err = writeSDK(mkdirAll(h.snaps)); err != nil {
		return nil, err
	}
	g, cached, err := h.load(ctx, true)
	if err != nil {
		return nil, err
	}
	h.gen = g
	if cached != nil {
		h.wg.Add(1)
		go h.revalidate(g, cached)
	}
	if iv := time.Duration(h.cfg.ReloadInterval); iv > 0 {
		h.wg.Add(1)
		go h.watch(iv)
	}
	return h, nil
}

// Tools is the current table.
func (h *Host) Tools() []Tool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen == nil {
		return nil
	}
	return append([]Tool(nil), h.gen.tools...)
}

// Has says whether name is a hosted tool now.
func (h *Host) Has(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen != nil && h.gen.byName[name] != nil
}

// Validate checks args against the inputSchema of tool name: an
// *ArgumentError for a violation, ErrUnknownTool for a name not served.
func (h *Host) Validate(name string, args json.RawMessage) error {
	g := h.current()
	if g == nil {
		return ErrClosed
	}
	t := g.byName[name]
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	_, err := t.validate(args)
	return err
}

func (h *Host) current() *generation {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	return h.gen
}

// load snapshots the path, reads the table in a throw-away sandbox (or,
// with cached, from the table cache) and makes the generation's pool.
// fromCache says the table came from the cache and is still to be read
// from a sandbox (revalidate).
func (h *Host) load(ctx context.Context, cached bool) (g *generation, fromCache []byte, err error) {
	st := stamp(h.cfg.Path)
	snap, err := takeSnapshot(h.cfg.Path, h.snaps, int64(h.cfg.MaxSourceSize))
	if err != nil {
		return nil, nil, err
	}
	g = &generation{snap: snap, stamp: st}
	ok := false
	defer func() {
		if !ok {
			removeSnapshot(snap)
		}
	}()
	imageID, err := h.eng.HostedImageID(ctx, h.cfg.Image)
	if err != nil {
		h.log.Debug("no image ID for the hosted tool table cache", "err", err)
	}
	g.key = h.tableKey(imageID, snap)
	if cached {
		if raw := h.readCache(g.key); raw != nil {
			if err := h.setTable(g, raw); err == nil {
				fromCache = raw
			} else {
				h.log.Warn("the cached hosted tool table is refused; reading it again", "path", h.cfg.Path, "err", err)
			}
		}
	}
	if fromCache == nil {
		raw, err := h.readTable(ctx, g)
		if err != nil {
			return nil, nil, err
		}
		if err := h.setTable(g, raw); err != nil {
			return nil, nil, err
		}
		h.writeCache(g.key, raw)
	}
	if h.cfg.PoolSize > 0 {
		g.pools = &tenantPools{m: map[string]*pool.Pool{}}
	}
	ok = true
	return g, fromCache, nil
}

// readTable reads g's tool table in a throw-away sandbox, bounded by
// hosted_tools.max_table_size.
func (h *Host) readTable(ctx context.Context, g *generation) ([]byte, error) {
	sb, err := h.boot(ctx, g)
	if err != nil {
		return nil, err
	}
	defer h.eng.Discard(sb)
	marker := newMarker()
	res, err := sb.Exec(ctx, fmt.Sprintf("_forge_table(%s)", pyStr(marker)),
		sandbox.ExecOptions{Timeout: bootTimeout, OutputLimit: min(int(h.cfg.MaxTableSize)+4096, kernel.DefaultOutputLimit)})
	if err != nil {
		return nil, fmt.Errorf("%w: reading the tool table: %w", ErrLoad, err)
	}
	raw, err := replyOf(res, marker)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the tool table: %w", ErrLoad, err)
	}
	if len(raw) > int(h.cfg.MaxTableSize) {
		return nil, fmt.Errorf("%w: the table is %d bytes, more than hosted_tools.max_table_size %d", ErrTable, len(raw), h.cfg.MaxTableSize)
	}
	return raw, nil
}

// setTable checks raw (untrusted: from a sandbox, or the cache of one) and
// makes it g's table.
func (h *Host) setTable(g *generation, raw []byte) error {
	if len(raw) > int(h.cfg.MaxTableSize) {
		return fmt.Errorf("%w: the table is %d bytes, more than hosted_tools.max_table_size %d", ErrTable, len(raw), h.cfg.MaxTableSize)
	}
	tools, err := parseTable(raw, limits{maxTools: h.cfg.MaxTools, maxSchema: int(h.cfg.MaxSchemaSize)})
	if err != nil {
		return err
	}
	g.tools = tools
	g.byName = make(map[string]*Tool, len(g.tools))
	for i := range g.tools {
		g.byName[g.tools[i].Name] = &g.tools[i]
	}
	return nil
}

// revalidate reads the table of g, served from the cache, in a sandbox: a
// table that differs replaces it (announced like a reload); one that no
// longer loads drops the cache and is logged, and g stays (its calls then
// fail as the module does).
func (h *Host) revalidate(g *generation, cached []byte) {
	defer h.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	raw, err := h.readTable(ctx, g)
	if err != nil {
		if ctx.Err() == nil {
			h.dropCache()
			h.log.Warn("re-reading the cached hosted tool table failed", "path", h.cfg.Path, "err", err)
		}
		return
	}
	if sameJSON(raw, cached) {
		return
	}
	// Same snapshot and pool (its sandboxes import the same module); only
	// the table is new.
	ng := &generation{snap: g.snap, stamp: g.stamp, key: g.key, pools: g.pools}
	if err := h.setTable(ng, raw); err != nil {
		h.dropCache()
		h.log.Warn("the re-read hosted tool table is refused; serving the cached one", "path", h.cfg.Path, "err", err)
		return
	}
	var onChange func()
	for {
		h.mu.Lock()
		check, ver := h.check, h.hooksVer
		if h.closed || h.gen != g {
			h.mu.Unlock()
			return // closed, or a reload came first
		}
		h.mu.Unlock()
		if check != nil {
			if err := check(ng.tools); err != nil {
				h.dropCache()
				h.log.Warn("the re-read hosted tool table is refused; serving the cached one", "path", h.cfg.Path, "err", err)
				return
			}
		}
		h.mu.Lock()
		if h.hooksVer != ver {
			h.mu.Unlock()
			continue // SetHooks ran meanwhile: check with its check
		}
		if h.closed || h.gen != g {
			h.mu.Unlock()
			return
		}
		h.gen = ng
		onChange = h.onChange
		h.unannounced = onChange == nil
		h.mu.Unlock()
		break
	}
	h.writeCache(ng.key, raw)
	h.log.Info("the cached hosted tool table was stale; replaced", "path", h.cfg.Path, "tools", len(ng.tools))
	if onChange != nil {
		onChange()
	}
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// templateWarm is what a zygote template of hosted calls imports before it
// forks: forge_tools and its _hosted part (forge's own, from the sdk bind;
// boot.py calls it), whose import runs a stand-in tool once. Never the
// tools module: its code runs only in a child, a sandbox.
var templateWarm = []string{"/run/forge/sdk", "forge_tools._hosted"}

// boot starts a sandbox with the snapshot and forge_tools mounted and the
// module imported.
func (h *Host) boot(ctx context.Context, g *generation) (*sandbox.Sandbox, error) {
	binds := []sandbox.Bind{{Source: h.sdkDir, Name: "sdk"}, {Source: g.snap.dir, Name: "tools"}}
	sb, err := h.eng.StartHosted(ctx, h.cfg.Image, 0, binds, templateWarm)
	if err != nil {
		return nil, err
	}
	code := "FORGE_MODULE = " + pyStr(g.snap.module) + "\n" + bootSource
	res, err := sb.Exec(ctx, code, sandbox.ExecOptions{Timeout: bootTimeout, OutputLimit: 64 << 10})
	if err == nil && !res.Success {
		err = fmt.Errorf("%w: %s", ErrLoad, describe(res))
	}
	if err != nil {
		h.eng.Discard(sb)
		return nil, err
	}
	return sb, nil
}

// describe is the error of a failed run, bounded, for logs and results.
func describe(res *kernel.Result) string {
	switch {
	case res.TimedOut:
		return "timed out"
	case res.Error != nil:
		s := res.Error.Type + ": " + res.Error.Message
		if tb := res.Error.Traceback; tb != "" {
			s += "\n" + tb
		}
		return clip(s, 4096)
	default:
		return "the sandbox failed without an error"
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func newMarker() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "\x1eforge-reply-" + hex.EncodeToString(b[:]) + ":"
}

// pyStr is s as a Python string literal: a JSON string is one (Go never
// escapes non-ASCII as surrogate pairs).
func pyStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// replyOf is the JSON after the last marker on stdout.
func replyOf(res *kernel.Result, marker string) ([]byte, error) {
	i := strings.LastIndex(res.Stdout, "\n"+marker)
	if i < 0 {
		if res.Truncated {
			return nil, fmt.Errorf("the reply was cut at the output limit")
		}
		if !res.Success {
			return nil, fmt.Errorf("%s", describe(res))
		}
		return nil, fmt.Errorf("no reply")
	}
	rest := res.Stdout[i+1+len(marker):]
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	} else if res.Truncated {
		return nil, fmt.Errorf("the reply was cut at the output limit")
	}
	return []byte(rest), nil
}

// Close stops reloading, the pool and every worker.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.stop)
	g := h.gen
	workers := h.workers
	h.workers = nil
	h.mu.Unlock()
	h.wg.Wait()
	for _, w := range workers {
		w.discard(h)
	}
	if g != nil {
		h.retire(g)
	}
	h.mu.Lock()
	snaps := h.retired
	h.mu.Unlock()
	for _, s := range snaps {
		removeSnapshot(s)
	}
	return nil
}

// retire closes a generation's pools and retires the zygote templates that
// have its snapshot mounted; calls that already hold one of its sandboxes
// finish on it, and its snapshot stays until the directory is cleaned at
// the next start (a mounted snapshot must not vanish).
func (h *Host) retire(g *generation) {
	h.mu.Lock()
	h.retired = append(h.retired, g.snap)
	h.mu.Unlock()
	if g.pools != nil {
		g.pools.mu.Lock()
		g.pools.closed = true
		ps := g.pools.m
		g.pools.m = nil
		g.pools.mu.Unlock()
		for _, p := range ps {
			if err := p.Close(); err != nil {
				h.log.Warn("closing the hosted tools pool", "err", err)
			}
		}
	}
	h.eng.RetireHosted(g.snap.dir)
}

// poolFor is g's pool of tenant's sandboxes, made on its first call; nil
// without pools (pool_size 0) or once g is retired.
func (h *Host) poolFor(g *generation, tenant string) *pool.Pool {
	if g.pools == nil {
		return nil
	}
	g.pools.mu.Lock()
	defer g.pools.mu.Unlock()
	if g.pools.closed {
		return nil
	}
	if p := g.pools.m[tenant]; p != nil {
		return p
	}
	name := "hosted:" + filepath.Base(h.cfg.Path)
	if tenant != "" {
		name += ":" + tenant
	}
	// Grown and shrunk as execute_python's pools are (pool.max_size,
	// pool.memory_budget, pool.shrink_after): calls back to back would
	// otherwise find a pool of pool_size dry at every call after the
	// first few, and wait for a fork and the module's import.
	pc := h.eng.Config().Pool
	p := pool.New(pool.Options{
		Name:              name,
		Size:              h.cfg.PoolSize,
		MaxSize:           max(pc.MaxSize, h.cfg.PoolSize),
		MemoryBudget:      uint64(pc.MemoryBudget),
		ShrinkAfter:       time.Duration(pc.ShrinkAfter),
		MaxIdleAge:        10 * time.Minute,
		RefillConcurrency: max(pc.RefillConcurrency, 1),
		// A call is a few ms; the boot of its replacement (an import)
		// would share the CPU with it.
		RefillHold: refillHold,
		Start: func(ctx context.Context) (*sandbox.Sandbox, error) {
			return h.boot(h.eng.HostedContext(ctx, engine.Principal{Tenant: tenant}), g)
		},
		Logger: h.log,
	})
	g.pools.m[tenant] = p
	return p
}

// tenantOf is the key of p's pool: its tenant with sandboxes per tenant,
// else "".
func (h *Host) tenantOf(p engine.Principal) string {
	if h.eng.TenantPools() {
		return p.Tenant
	}
	return ""
}

// Path is the tools path being served.
func (h *Host) Path() string { return h.cfg.Path }

// PoolReady is how many sandboxes with the module imported wait in the
// pools (0 without a pool).
func (h *Host) PoolReady() int {
	n := 0
	for _, st := range h.PoolStats() {
		n += st.Ready
	}
	return n
}

// PoolStats are the counters of the current table's pools (one per tenant
// with sandboxes per tenant).
func (h *Host) PoolStats() []pool.Stats {
	g := h.current()
	if g == nil || g.pools == nil {
		return nil
	}
	g.pools.mu.Lock()
	ps := make([]*pool.Pool, 0, len(g.pools.m))
	for _, p := range g.pools.m {
		ps = append(ps, p)
	}
	g.pools.mu.Unlock()
	out := make([]pool.Stats, 0, len(ps))
	for _, p := range ps { // reads cgroup files: not under the lock
		out = append(out, p.Stats())
	}
	return out
}
