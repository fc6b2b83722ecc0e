package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/server/rest"
)

// Deferred is an Engine still opening (the image store, the pools, the
// bridge), so that `forge serve` answers initialize and server/discover at
// once: they need only the configuration. Tool calls and resource reads
// wait in the server until Resolve (see readyTools); the engine's methods
// are promoted from the embedded Engine, which is set only then.
type Deferred struct {
	Engine
	cfg   *profiles.Config
	ready chan struct{}
	err   error
}

// NewDeferred is an engine of configuration cfg that is not open yet.
func NewDeferred(cfg *profiles.Config) *Deferred {
	return &Deferred{cfg: cfg, ready: make(chan struct{})}
}

// Config is the configuration, available before the engine is.
func (d *Deferred) Config() *profiles.Config { return d.cfg }

// Resolve hands over the opened engine, or the error that kept it from
// opening (every waiting and later call then fails with it). Call it once.
func (d *Deferred) Resolve(eng Engine, err error) {
	if err == nil && eng == nil {
		err = fmt.Errorf("no engine")
	}
	d.Engine, d.err = eng, err
	close(d.ready)
}

// Wait blocks until Resolve, or ctx is done.
func (d *Deferred) Wait(ctx context.Context) error {
	select {
	case <-d.ready:
		if d.err != nil {
			return fmt.Errorf("forge could not start: %w", d.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for forge to start: %w", ctx.Err())
	}
}

// Opened reports, without waiting, whether the engine is open.
func (d *Deferred) Opened() bool {
	select {
	case <-d.ready:
		return d.err == nil
	default:
		return false
	}
}

// waiter is an engine that may still be opening (*Deferred).
type waiter interface {
	Wait(context.Context) error
	Opened() bool
}

// readyHTTP holds a REST request until the engine is open (503 problem if
// it cannot open, or the client gives up first).
func (s *Server) readyHTTP(next http.Handler) http.Handler {
	w, ok := s.eng.(waiter)
	if !ok {
		return next
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if err := w.Wait(r.Context()); err != nil {
			rest.NewProblem(r.Context(), http.StatusServiceUnavailable, err.Error()).Write(rw)
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// readyTools holds a tool call until the engine is open.
func (s *Server) readyTools(next mcpserver.ToolHandlerFunc) mcpserver.ToolHandlerFunc {
	w, ok := s.eng.(waiter)
	if !ok {
		return next
	}
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := w.Wait(ctx); err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return next(ctx, req)
	}
}

// readyResources holds a resource read until the engine is open.
func (s *Server) readyResources(next mcpserver.ResourceHandlerFunc) mcpserver.ResourceHandlerFunc {
	w, ok := s.eng.(waiter)
	if !ok {
		return next
	}
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		if err := w.Wait(ctx); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// Answered is closed once the server has sent its first reply (to
// initialize or server/discover, typically): `forge serve` opens the engine
// after it, so that the two do not compete for the CPU while a client
// connects.
func (s *Server) Answered() <-chan struct{} { return s.answered }

func (s *Server) markAnswered() { s.answeredOnce.Do(func() { close(s.answered) }) }
