// Package server is forge's MCP face: the execute_python tool, the forge://
// resources and the server instructions (on mark3labs/mcp-go), and the stdio
// and streamable HTTP transports with DNS-rebinding protection and graceful
// shutdown. It runs no syscalls itself: code runs through the engine, and
// host facts come in through Options.
//
// Errors are mapped to MCP once, here: a message that is not JSON is a
// JSON-RPC parse error, one that is not a request an invalid-request error,
// malformed tool arguments are invalid-params errors; everything about
// running the code (the code failed, a limit was exceeded, a sandbox broke)
// is a tool result with isError.
//
// Every call acts for a principal (engine.Principal) that the transport
// puts into the request's context: the local principal over stdio, one
// principal per listener over HTTP. Sessions are the principal's own.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/bridge"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/pool"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/server/e2b"
	"github.com/mcp-forge/forge/server/hello"
	"github.com/mcp-forge/forge/server/hello/wire"
	"github.com/mcp-forge/forge/server/tenant"
	"go.opentelemetry.io/otel/trace"
)

// Engine is everything the server needs of the engine (*engine.Engine
// satisfies it). Errors the caller must fix are *engine.RefusedError;
// session methods see only the principal's own sessions.
type Engine interface {
	Config() *profiles.Config
	Execute(ctx context.Context, req engine.Request) (*kernel.Result, error)

	ListSessions(ctx context.Context, p engine.Principal) ([]session.Info, error)
	SessionState(ctx context.Context, p engine.Principal, id string) (*session.Meta, error)
	DocumentState(ctx context.Context, p engine.Principal, id string, vars map[string]string, note string, clear bool) (*session.Documented, error)
	DestroySession(ctx context.Context, p engine.Principal, id string) error
	ForkSession(ctx context.Context, p engine.Principal, id, newID string) (*session.Fork, error)
	WriteFile(ctx context.Context, p engine.Principal, id, path string, data []byte) error
	ReadFile(ctx context.Context, p engine.Principal, id, path string) ([]byte, error)
	ListFiles(ctx context.Context, p engine.Principal, id string) ([]kernel.FileInfo, error)

	Images(ctx context.Context) ([]rootfs.Image, error)
	PoolStats() []pool.Stats
	// TenantPools reports whether warm pools are per tenant (nothing is
	// prewarmed before a tenant's first request).
	TenantPools() bool

	BuildEnvironment(ctx context.Context, p engine.Principal, req build.Request) (*build.Result, error)
	ListEnvironments(ctx context.Context, p engine.Principal) ([]build.Environment, error)
	Installer() string

	ToolCatalog() []bridge.Tool
}

// Options configure a Server.
type Options struct {
	// Version is forge's version, reported in initialize and environment/info.
	Version string
	// Logger receives the server's own logs (stderr only; nil = discard).
	Logger *slog.Logger
	// Audit receives security events of the transports (rejected HTTP
	// origins and hosts); executions are audited by the engine. nil = discard.
	Audit *audit.Logger
	// Host describes the host's kernel features for forge://environment/info
	// (e.g. the checks of `forge doctor`); nil = not reported.
	Host func() any
	// Principal is who every client of this server acts for. Zero means:
	// engine.LocalPrincipal over stdio and for in-process clients, and
	// engine.ListenerPrincipal(address) over HTTP.
	Principal engine.Principal
	// Auth checks bearer tokens on HTTP. Without an Enabled one, HTTP
	// requests are refused (401) unless InsecureNoAuth is set.
	Auth *auth.Authenticator
	// InsecureNoAuth serves HTTP without tokens: every client of a listener
	// is one principal (engine.ListenerPrincipal), whichever local account
	// it is (forge serve --insecure-no-auth, loopback only).
	InsecureNoAuth bool
	// Tenants are the per-tenant rate limits and quotas; nil = none.
	Tenants *tenant.Limits
	// Metrics, when set, is served at /metrics (scope admin).
	Metrics http.Handler
	// OnLimited is told when a tenant limit refuses a request (metrics).
	OnLimited func(tenant, what string)
	// Tracer makes the spans of HTTP requests and executions; nil = none.
	Tracer trace.Tracer
}

// Server is forge's MCP server. Create it with New, then serve it with
// ServeStdio or ServeHTTP (once).
type Server struct {
	eng   Engine
	cfg   *profiles.Config
	opts  Options
	log   *slog.Logger
	audit *audit.Logger
	mcp   *mcpserver.MCPServer
	tool  mcp.Tool
	// refusals budget the audit lines of refused HTTP requests.
	refusals *refusalLog
	// tenants are Options.Tenants.
	tenants *tenant.Limits

	// e2b is the E2B face (e2bFace), made once.
	e2b     *e2b.Handler
	e2bOnce sync.Once

	// leaving is set for server.drain_delay after SIGTERM, before drain:
	// everything is still served, but /readyz fails and every answer
	// closes its connection (see ServeHTTP).
	leaving atomic.Bool
	// drain is closed when shutdown begins: executions in flight keep
	// running (their request contexts may already be gone) until kill.
	drain     chan struct{}
	drainOnce sync.Once
	// kill is cancelled when the shutdown grace period is over.
	kill       context.Context
	cancelKill context.CancelFunc
	// active counts tool calls in flight.
	active sync.WaitGroup

	// Hosted tools (server/hosted.go): the Hosts listed for everybody,
	// forge's own tool names (for collisions), save_tool's store, and the
	// saved tools (server/saved.go) by principal, with how many principals
	// have a saved tool of each name.
	hostedMu       sync.Mutex
	hosts          []*hostedEntry
	own            map[string]bool
	hostedResource bool
	gate           *hostedGate // HoldHosted
	saver          *hosted.Saver
	saved          map[string]*savedEntry
	savedRefs      map[string]int
	savedFailed    map[string]time.Time // principals whose saved tools did not load
	// answered is closed once the first reply went out (see Answered).
	answered     chan struct{}
	answeredOnce sync.Once
}

// New builds the MCP server around eng.
func New(eng Engine, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Audit == nil {
		opts.Audit = audit.Discard()
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{eng: eng, cfg: eng.Config(), opts: opts, log: opts.Logger, audit: opts.Audit, drain: make(chan struct{}), answered: make(chan struct{}), tenants: opts.Tenants,
		refusals: newRefusalLog(opts.Audit)}
	s.kill, s.cancelKill = context.WithCancel(context.Background())
	// What initialize says is hello's, which `forge serve` may have sent
	// already (see ServeStdio): wire.Capabilities is what these enable.
	s.mcp = mcpserver.NewMCPServer(hello.Name(s.cfg), opts.Version,
		mcpserver.WithTitle(wire.Title),
		mcpserver.WithInstructions(hello.Instructions(s.cfg)),
		mcpserver.WithToolCapabilities(true), // hosted tools change at reloads
		mcpserver.WithResourceCapabilities(false, false),
		mcpserver.WithLogging(),
		mcpserver.WithRecovery(),
		mcpserver.WithResourceRecovery(),
		// Scopes first (no need to wait for the engine to refuse), then
		// readiness: the first middleware is the outermost.
		mcpserver.WithToolHandlerMiddleware(s.toolGate),
		mcpserver.WithToolHandlerMiddleware(s.readyTools),
		mcpserver.WithResourceHandlerMiddleware(s.resourceGate),
		mcpserver.WithResourceHandlerMiddleware(s.readyResources),
		// Saved tools are their principal's (both lists and calls); a
		// token sees in tools/list only the tools its scopes allow.
		mcpserver.WithToolFilter(s.savedFilter),
		mcpserver.WithToolFilter(scopeFilter),
	)
	s.tool = executeTool(s.cfg)
	s.mcp.AddTool(s.tool, s.handleExecute)
	s.addSessionTools()
	s.addFileResource()
	s.addBuildTool()
	s.addResources()
	s.addResultApp()
	return s
}

// MCPServer is the underlying mcp-go server (for in-process clients).
func (s *Server) MCPServer() *mcpserver.MCPServer { return s.mcp }

// HandleMessage answers one JSON-RPC message for the principal in ctx (see
// withPrincipal): what is not a valid message is answered here (see
// checkMessage), then preflight's checks (tool calls with malformed
// arguments get an invalid-params error), and everything else goes to
// mcp-go. nil means no reply (a notification or a response).
func (s *Server) HandleMessage(ctx context.Context, raw []byte) mcp.JSONRPCMessage {
	msg, reply := checkMessage(raw)
	if reply != nil || msg.kind == kindResponse {
		return reply
	}
	return s.handle(s.received(ctx), msg, raw)
}

// handle answers a message checkMessage passed: preflight's answer, else
// mcp-go's.
func (s *Server) handle(ctx context.Context, msg message, raw []byte) mcp.JSONRPCMessage {
	ctx, reply, drop := s.preflight(ctx, msg)
	if reply != nil || drop {
		return reply
	}
	ctx, cancelled := withCancelMark(ctx)
	resp := s.mcp.HandleMessage(ctx, raw)
	if msg.kind == kindNotification || cancelled.Load() {
		return nil // JSON-RPC: a notification is never answered; MCP: nor a cancelled request
	}
	return resp
}

// beginDrain starts a shutdown: running executions get grace, then their
// sandboxes are killed. Safe to call more than once.
func (s *Server) beginDrain(grace time.Duration) {
	s.drainOnce.Do(func() {
		close(s.drain)
		s.log.Info("shutting down: waiting for running executions", "grace", grace)
		time.AfterFunc(grace, s.cancelKill)
	})
}

func (s *Server) draining() bool {
	select {
	case <-s.drain:
		return true
	default:
		return false
	}
}

type receivedKey struct{}

// received marks ctx as a request's that arrived before the shutdown
// began (read from stdin, or posted), unless it has begun: such a request
// is answered as any other, however late its handler runs. Over stdio
// every line read before EOF is one: the client sent it before closing.
func (s *Server) received(ctx context.Context) context.Context {
	if s.draining() {
		return ctx
	}
	return context.WithValue(ctx, receivedKey{}, true)
}

// lateForDrain is whether the request of ctx arrived once the shutdown had
// begun (see received): a new call that is refused.
func (s *Server) lateForDrain(ctx context.Context) bool {
	ok, _ := ctx.Value(receivedKey{}).(bool)
	return !ok && s.draining()
}

// waitIdle waits for the tool calls in flight, at most until ctx is done.
func (s *Server) waitIdle(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { s.active.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// execContext is the context an execution runs under. It is detached from
// the request's cancellation so that a shutdown (which cancels every request
// context at once) still gives running code its grace period; a request
// cancelled by the client outside a shutdown cancels the execution at once.
func (s *Server) execContext(req context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(req))
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-s.kill.Done():
		case <-req.Done():
			if s.draining() {
				select {
				case <-ctx.Done():
					return
				case <-s.kill.Done():
				}
			}
		}
		cancel()
	}()
	return ctx, cancel
}

// shutdownGrace is server.shutdown_grace, at least a moment.
func (s *Server) shutdownGrace() time.Duration {
	if g := s.cfg.Server.ShutdownGrace.Std(); g > 0 {
		return g
	}
	return time.Second
}
