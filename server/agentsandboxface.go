package server

import (
	"context"
	"net/http"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/server/agentsandbox"
)

// mountAgentSandbox mounts the agent-sandbox face (server/agentsandbox)
// on mux when agent_sandbox.enabled is on and there is a state dir for its
// sessions. Its requests pass the listener's guard and bearer-token check
// like forge's own API: the client's direct mode sends the token through
// its extra_headers.
func (s *Server) mountAgentSandbox(mux *http.ServeMux) {
	if !s.cfg.AgentSandbox.Enabled || s.cfg.StateDir == "" {
		return
	}
	h := agentsandbox.New(agentsandbox.Options{
		Engine: e2bEngine{s}, Execute: s.agentSandboxExecute, Principal: s.principal,
		Config: s.cfg, Logger: s.log.With("face", "agent-sandbox"),
	})
	for _, p := range h.Patterns() {
		mux.Handle(p, s.readyHTTP(h))
	}
}

// agentSandboxExecute is the face's execution path: the tenant gate and
// egress (execute), held open through a shutdown's grace like the other
// faces'.
func (s *Server) agentSandboxExecute(ctx context.Context, req engine.Request) (*kernel.Result, error) {
	return s.e2bExecute(ctx, req)
}
