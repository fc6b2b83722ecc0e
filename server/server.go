// Package server is forge's MCP face: the execute_python tool, the forge://
// resources and the server instructions (on mark3labs/mcp-go), and the stdio
// and streamable HTTP transports with DNS-rebinding protection and graceful
// shutdown. It runs no syscalls itself: code runs through the engine, and
// host facts come in through Options.
//
// Errors are mapped to MCP once, here: malformed tool arguments are JSON-RPC
// invalid-params errors; everything about running the code (the code failed,
// a limit was exceeded, a sandbox broke) is a tool result with isError.
package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
)

// Engine is what the server needs of *engine.Engine.
type Engine interface {
	Execute(ctx context.Context, req engine.Request) (*kernel.Result, error)
	Config() *profiles.Config
	Store() *rootfs.Store
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

	// drain is closed when shutdown begins: executions in flight keep
	// running (their request contexts may already be gone) until kill.
	drain     chan struct{}
	drainOnce sync.Once
	// kill is cancelled when the shutdown grace period is over.
	kill       context.Context
	cancelKill context.CancelFunc
	// active counts tool calls in flight.
	active sync.WaitGroup
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
	s := &Server{eng: eng, cfg: eng.Config(), opts: opts, log: opts.Logger, audit: opts.Audit, drain: make(chan struct{})}
	s.kill, s.cancelKill = context.WithCancel(context.Background())
	name := s.cfg.Server.Name
	if name == "" {
		name = "forge"
	}
	s.mcp = mcpserver.NewMCPServer(name, opts.Version,
		mcpserver.WithTitle("forge: sandboxed Python"),
		mcpserver.WithInstructions(instructions(s.cfg)),
		mcpserver.WithToolCapabilities(false),
		mcpserver.WithResourceCapabilities(false, false),
		mcpserver.WithLogging(),
		mcpserver.WithRecovery(),
		mcpserver.WithResourceRecovery(),
	)
	s.tool = executeTool(s.cfg)
	s.mcp.AddTool(s.tool, s.handleExecute)
	s.addSessionTools()
	s.addResources()
	return s
}

// MCPServer is the underlying mcp-go server (for in-process clients).
func (s *Server) MCPServer() *mcpserver.MCPServer { return s.mcp }

// HandleMessage answers one JSON-RPC message: tool calls with malformed
// arguments get an invalid-params error here (mcp-go would report a handler
// error as an internal error), everything else goes to mcp-go. Both
// transports call it; nil means no reply (a notification).
func (s *Server) HandleMessage(ctx context.Context, raw json.RawMessage) mcp.JSONRPCMessage {
	if resp := precheck(raw); resp != nil {
		return resp
	}
	return s.mcp.HandleMessage(ctx, raw)
}

// precheck returns an invalid-params error for a call of one of forge's
// tools whose arguments do not decode, else nil.
func precheck(raw []byte) mcp.JSONRPCMessage {
	var msg struct {
		ID     *json.RawMessage `json:"id"`
		Method string           `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &msg) != nil || msg.Method != string(mcp.MethodToolsCall) || msg.ID == nil {
		return nil
	}
	var err error
	switch msg.Params.Name {
	case toolExecute:
		_, err = DecodeExecuteArgs(msg.Params.Arguments)
	case toolDocumentState, toolListSessions, toolDestroySession, toolWriteFile, toolReadFile, toolListFiles:
		_, err = decodeSessionArgs(msg.Params.Name, msg.Params.Arguments)
	default:
		return nil
	}
	if err != nil {
		var id any
		if json.Unmarshal(*msg.ID, &id) != nil {
			return nil
		}
		return mcp.NewJSONRPCError(mcp.NewRequestId(id), mcp.INVALID_PARAMS, err.Error(), nil)
	}
	return nil
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
