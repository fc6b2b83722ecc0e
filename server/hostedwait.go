package server

import (
	"context"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
)

// hostedGate holds back the requests whose answer depends on the hosted
// tools while they load: serve answers initialize at once (reading a tool
// table may take a sandbox), and no client sees a tool list without them.
type hostedGate struct {
	once sync.Once
	done chan struct{}
	err  error // set before done closes
}

// HoldHosted makes tools/list, tools/call and resources/list and /read
// wait until release is called: with nil once the hosted tools are
// attached, with the error when they failed to load (the held requests,
// and later ones, get it as their answer while serve stops). Call it
// before serving; only the first release counts.
func (s *Server) HoldHosted() (release func(error)) {
	g := &hostedGate{done: make(chan struct{})}
	s.hostedMu.Lock()
	s.gate = g
	s.hostedMu.Unlock()
	return func(err error) {
		g.once.Do(func() {
			g.err = err
			close(g.done)
		})
	}
}

// waitHosted (step 1 of preflight) waits for the gate when msg needs the
// hosted tools. reply is the answer when they failed to load; drop says
// ctx ended first because the client went away (the request is then not
// answered).
func (s *Server) waitHosted(ctx context.Context, msg message) (reply mcp.JSONRPCMessage, drop bool) {
	if msg.kind != kindRequest {
		return nil, false
	}
	switch msg.method {
	case string(mcp.MethodToolsList), string(mcp.MethodToolsCall), string(mcp.MethodResourcesList), string(mcp.MethodResourcesRead):
	default:
		return nil, false
	}
	s.hostedMu.Lock()
	g := s.gate
	s.hostedMu.Unlock()
	if g == nil {
		return nil, false
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		// The client went away, unless the request came before the
		// shutdown began: over stdio the input's end cancels every
		// request, and one read before it is still answered once the
		// tools have loaded, within the shutdown's grace.
		if s.lateForDrain(ctx) || !s.draining() {
			return nil, true
		}
		select {
		case <-g.done:
		case <-s.kill.Done():
			return mcp.NewJSONRPCError(mcp.NewRequestId(msg.id), mcp.INTERNAL_ERROR, "forge stopped before the hosted tools had loaded; nothing was run", nil), false
		}
	}
	if g.err != nil {
		return mcp.NewJSONRPCError(mcp.NewRequestId(msg.id), mcp.INTERNAL_ERROR, "hosted tools failed to load; forge is stopping: "+g.err.Error(), nil), false
	}
	return nil, false
}
