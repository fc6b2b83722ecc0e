package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
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

	// mu guards watchers: the progress callbacks of the calls that wait.
	mu       sync.Mutex
	watchers map[int]func(string)
	next     int
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

// Write takes the engine's progress lines while it opens (images.preload
// importing an image, say) and hands each to the calls waiting with a
// progressToken, so that their clients see why the call waits. The engine
// writes them as well to `forge serve`'s stderr.
func (d *Deferred) Write(p []byte) (int, error) {
	d.mu.Lock()
	watchers := make([]func(string), 0, len(d.watchers))
	for _, w := range d.watchers {
		watchers = append(watchers, w)
	}
	d.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		for _, w := range watchers {
			w(line)
		}
	}
	return len(p), nil
}

// watch calls fn with each progress line until the returned func is called.
func (d *Deferred) watch(fn func(string)) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watchers == nil {
		d.watchers = map[int]func(string){}
	}
	id := d.next
	d.next++
	d.watchers[id] = fn
	return func() {
		d.mu.Lock()
		delete(d.watchers, id)
		d.mu.Unlock()
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
	watch(func(string)) func()
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
		if !w.Opened() {
			// A call with a progressToken hears what the engine is doing
			// (an image import can take a while), and the heartbeat.
			if report, stop := s.progress(ctx, req); report != nil {
				unwatch := w.watch(func(line string) { report(engine.Progress{Message: "forge is starting: " + line}) })
				err := w.Wait(ctx)
				unwatch()
				stop()
				if err != nil {
					return mcp.NewToolResultError(err.Error()), nil
				}
				return next(ctx, req)
			}
		}
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
