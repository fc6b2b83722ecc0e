package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/runtime/engine"
)

const (
	// progressInterval is the least time between two notifications/progress
	// of one call.
	progressInterval = 250 * time.Millisecond
	// progressHeartbeat is how often a call with no new output still
	// reports, so that clients' idle watchdogs see it alive.
	progressHeartbeat = 2 * time.Second
	// progressChunkCap bounds the new stdout and stderr of one notification
	// (the newest bytes are kept; the result has them all).
	progressChunkCap = 16 << 10
)

type notifierKey struct{}

// withNotifier makes progress of requests in ctx go through send (stdio
// writes them in line with the replies, so none trails its result).
func withNotifier(ctx context.Context, send func(mcp.JSONRPCNotification)) context.Context {
	return context.WithValue(ctx, notifierKey{}, send)
}

// progressReporter sends notifications/progress for one tool call that
// carries a progressToken: at most every progressInterval, each with the
// output since the last and the elapsed time.
type progressReporter struct {
	s     *Server
	ctx   context.Context
	token mcp.ProgressToken
	start time.Time
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}

	// mu guards what is pending for the next notification.
	mu             sync.Mutex
	stdout, stderr string
	skipped        int64
	message        string
}

// progress returns the engine callback for a call (nil without a
// progressToken) and a func that stops reporting; it must be called before
// the result is sent.
func (s *Server) progress(ctx context.Context, req mcp.CallToolRequest) (func(engine.Progress), func()) {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return nil, func() {}
	}
	p := &progressReporter{s: s, ctx: ctx, token: req.Params.Meta.ProgressToken, start: time.Now(),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p.add, func() { close(p.stop); <-p.done }
}

// add queues a report; it never blocks (the engine calls it from the
// agent client's goroutine).
func (p *progressReporter) add(r engine.Progress) {
	p.mu.Lock()
	p.stdout = keepTail(p.stdout+r.Stdout, progressChunkCap, &p.skipped)
	p.stderr = keepTail(p.stderr+r.Stderr, progressChunkCap, &p.skipped)
	p.skipped += r.Skipped
	if r.Message != "" {
		p.message, _ = clipHead(r.Message, 1<<10)
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *progressReporter) loop() {
	defer close(p.done)
	heartbeat := time.NewTimer(progressHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-heartbeat.C:
		}
		p.send()
		heartbeat.Reset(progressHeartbeat)
		// The interval holds even when output keeps coming.
		select {
		case <-p.stop:
			return
		case <-time.After(progressInterval):
		}
	}
}

func (p *progressReporter) send() {
	p.mu.Lock()
	out, errOut, skipped, msg := p.stdout, p.stderr, p.skipped, p.message
	p.stdout, p.stderr, p.skipped, p.message = "", "", 0, ""
	p.mu.Unlock()
	elapsed := time.Since(p.start)
	if msg == "" {
		msg = out + errOut
	}
	if msg == "" {
		msg = fmt.Sprintf("running for %.1f s", elapsed.Seconds())
	}
	params := map[string]any{
		"progressToken": p.token,
		"progress":      float64(elapsed.Milliseconds()) / 1000,
		"message":       msg,
		"stdout":        out,
		"stderr":        errOut,
		"elapsed_ms":    elapsed.Milliseconds(),
	}
	if skipped > 0 {
		params["skipped_bytes"] = skipped
	}
	if send, ok := p.ctx.Value(notifierKey{}).(func(mcp.JSONRPCNotification)); ok {
		send(mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION, Notification: mcp.Notification{
			Method: "notifications/progress", Params: mcp.NotificationParams{AdditionalFields: params}}})
		return
	}
	if err := p.s.mcp.SendNotificationToClient(p.ctx, "notifications/progress", params); err != nil {
		p.s.log.Debug("sending progress", "err", err)
	}
}

// keepTail is s cut to its last n bytes (on a rune boundary), adding what
// was cut to *skipped.
func keepTail(s string, n int, skipped *int64) string {
	if len(s) <= n {
		return s
	}
	t, _ := clipTail(s, n)
	t = t[len("…"):]
	*skipped += int64(len(s) - len(t))
	return t
}
