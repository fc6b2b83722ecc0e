// Package bridge is forge's code mode: it connects to downstream MCP servers
// over stdio (as an MCP client), and lets Python code in a sandbox call the
// tools granted to it as ordinary functions, through a unix socket that is
// mounted into that sandbox only.
//
// The credentials of the downstream servers stay on the host: the servers
// are host processes, and only tool results cross the socket. Everything
// that arrives on the socket is untrusted: lines are size-capped, malformed
// requests get an error reply and lose their connection, and a call of a
// tool outside the grant is refused and audited as a security violation.
//
// Lifecycle: New (start servers, build the catalog) → per execution or
// session, Grant (listen on <dir>/bridge.sock, render the Python prelude) →
// Grant.Reset between executions of a session → Grant.Close → Bridge.Close.
package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
)

// Defaults of a ServerConfig's zero fields.
const (
	DefaultTimeout         = 60 * time.Second
	DefaultMaxResponseSize = 1 << 20
	DefaultStartTimeout    = 30 * time.Second
	DefaultMaxRequestSize  = 4 << 20
)

// ServerConfig is one downstream stdio MCP server (profiles.MCPToolServer
// with plain types; see ServersFromConfig).
type ServerConfig struct {
	Command string
	Args    []string
	// Env is added to forge's own environment for the server process.
	Env map[string]string
	// Prefix, when set, makes the server's tools known as <Prefix>_<tool>
	// and puts them in the submodule mcp_tools.<Prefix>; the submodule of a
	// server without a prefix is named after the server.
	Prefix string
	// Timeout limits one call (DefaultTimeout when zero).
	Timeout time.Duration
	// MaxCalls limits calls to this server's tools per execution (per
	// Grant between Resets); 0 means unlimited.
	MaxCalls int
	// MaxResponseSize caps the JSON of one result passed into the sandbox
	// (DefaultMaxResponseSize when zero).
	MaxResponseSize int64
	// Spawn, when set, starts the server somewhere else than as a host
	// process (inside a sandbox: mcp_tools.NAME.sandbox); Command and Args
	// are then the spawner's business.
	Spawn SpawnFunc
}

// ServersFromConfig converts the mcp_tools section of forge's config.
func ServersFromConfig(in map[string]profiles.MCPToolServer) map[string]ServerConfig {
	out := make(map[string]ServerConfig, len(in))
	for name, s := range in {
		out[name] = ServerConfig{
			Command: s.Command, Args: slices.Clone(s.Args), Env: maps.Clone(s.Env), Prefix: s.Prefix,
			Timeout: s.Timeout.Std(), MaxCalls: s.MaxCalls, MaxResponseSize: s.MaxResponseSize.Bytes(),
		}
	}
	return out
}

// Auditor receives audit events; *audit.Logger is one.
type Auditor interface {
	Log(audit.Event)
}

// Options configures a Bridge.
type Options struct {
	Servers map[string]ServerConfig
	Logger  *slog.Logger // nil: slog.Default()
	Audit   Auditor      // nil: nothing is audited
	// StartTimeout limits starting and initializing one server
	// (DefaultStartTimeout when zero).
	StartTimeout time.Duration
	// MaxRequestSize caps one request line from the sandbox
	// (DefaultMaxRequestSize when zero).
	MaxRequestSize int
}

// Tool is one entry of the catalog (forge://tools/available).
type Tool struct {
	// Name is what a request grants and the prelude calls: the server's
	// tool name, after "<prefix>_" when the server has a prefix.
	Name        string          `json:"name"`
	Server      string          `json:"server"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
	// Python is the function's name inside the sandbox (Name made an
	// identifier that shadows no builtin, unique in the catalog).
	Python string `json:"python_name"`
	// Module is the server's submodule: mcp_tools.<Module>.
	Module string `json:"python_module"`

	remote string // the name on the downstream server
}

func (t Tool) remoteOrName() string {
	if t.remote != "" {
		return t.remote
	}
	return t.Name
}

// Bridge holds the downstream servers and their tool catalog. It is safe
// for concurrent use.
type Bridge struct {
	log     *slog.Logger
	audit   Auditor
	opts    Options
	servers map[string]*downstream
	catalog []Tool          // sorted by Name
	byName  map[string]Tool // Name → Tool

	mu     sync.Mutex
	closed bool
	grants map[*Grant]struct{}
}

// New starts every configured server, lists its tools and builds the
// catalog. A tool name offered by two servers is an error naming both
// (ErrDuplicateTool). Servers are started in parallel.
func New(ctx context.Context, opts Options) (_ *Bridge, retErr error) {
	opts = withDefaults(opts)
	b := &Bridge{log: opts.Logger, audit: opts.Audit, opts: opts, servers: map[string]*downstream{},
		byName: map[string]Tool{}, grants: map[*Grant]struct{}{}}
	defer func() {
		if retErr != nil {
			b.stopServers()
		}
	}()
	names := slices.Sorted(maps.Keys(opts.Servers))
	for _, name := range names {
		b.servers[name] = newDownstream(name, opts.Servers[name], opts)
	}
	lists := make([][]Tool, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { lists[i], errs[i] = b.servers[name].listTools(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := b.buildCatalog(names, lists); err != nil {
		return nil, err
	}
	b.log.Debug("bridge: ready", "servers", len(names), "tools", len(b.catalog))
	return b, nil
}

func withDefaults(o Options) Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Audit == nil {
		o.Audit = audit.Discard()
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.MaxRequestSize <= 0 {
		o.MaxRequestSize = DefaultMaxRequestSize
	}
	servers := make(map[string]ServerConfig, len(o.Servers))
	for name, s := range o.Servers {
		if s.Timeout <= 0 {
			s.Timeout = DefaultTimeout
		}
		if s.MaxResponseSize <= 0 {
			s.MaxResponseSize = DefaultMaxResponseSize
		}
		servers[name] = s
	}
	o.Servers = servers
	return o
}

// buildCatalog names every tool, refuses duplicates and assigns unique
// Python names, in a deterministic order (servers and tools sorted), so a
// tool keeps its Python name across grants and restarts.
func (b *Bridge) buildCatalog(servers []string, lists [][]Tool) error {
	owner := map[string]string{}
	var dups []error
	modules := uniqueNames{}
	for i, server := range servers {
		module := b.opts.Servers[server].Prefix
		if module == "" {
			module = server
		}
		module = modules.take(attrName(module))
		for _, t := range lists[i] {
			if other, ok := owner[t.Name]; ok {
				if other != server {
					dups = append(dups, fmt.Errorf("%w: %q is offered by servers %q and %q; set mcp_tools.<name>.prefix on one of them",
						ErrDuplicateTool, t.Name, other, server))
				}
				continue // a server listing a name twice: the first wins
			}
			owner[t.Name] = server
			t.Module = module
			b.catalog = append(b.catalog, t)
		}
	}
	if len(dups) > 0 {
		return errors.Join(dups...)
	}
	slices.SortFunc(b.catalog, func(x, y Tool) int { return strings.Compare(x.Name, y.Name) })
	py := uniqueNames{}
	for i := range b.catalog {
		b.catalog[i].Python = py.take(globalName(b.catalog[i].Name))
		b.byName[b.catalog[i].Name] = b.catalog[i]
	}
	return nil
}

// Catalog returns every tool of every server, sorted by name.
func (b *Bridge) Catalog() []Tool {
	out := slices.Clone(b.catalog)
	for i := range out {
		out[i].InputSchema = slices.Clone(out[i].InputSchema)
	}
	return out
}

// Validate checks that every name is in the catalog, without granting
// anything: call it while validating a request, before taking a sandbox.
func (b *Bridge) Validate(names []string) error {
	_, err := b.lookup(names)
	return err
}

// lookup resolves granted names to catalog tools; unknown names are an
// error listing what exists.
func (b *Bridge) lookup(names []string) ([]Tool, error) {
	var tools []Tool
	var unknown []string
	seen := map[string]bool{}
	for _, n := range names {
		t, ok := b.byName[n]
		switch {
		case !ok:
			unknown = append(unknown, fmt.Sprintf("%q", n))
		case !seen[n]:
			seen[n] = true
			tools = append(tools, t)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w %s; available: %s", ErrUnknownTool, strings.Join(unknown, ", "), b.available())
	}
	return tools, nil
}

func (b *Bridge) available() string {
	if len(b.catalog) == 0 {
		return "none (no mcp_tools servers are configured)"
	}
	const most = 50
	var names []string
	for i, t := range b.catalog {
		if i == most {
			names = append(names, fmt.Sprintf("… %d more (see forge://tools/available)", len(b.catalog)-most))
			break
		}
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}

// Close closes every grant and stops the downstream servers.
func (b *Bridge) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	grants := slices.Collect(maps.Keys(b.grants))
	b.mu.Unlock()
	var errs []error
	for _, g := range grants {
		errs = append(errs, g.Close())
	}
	errs = append(errs, b.stopServers())
	return errors.Join(errs...)
}

func (b *Bridge) stopServers() error {
	// In parallel: a server that ignores EOF on stdin takes seconds to stop.
	var wg sync.WaitGroup
	for _, d := range b.servers {
		wg.Go(func() { _ = d.close() })
	}
	wg.Wait()
	return nil
}
