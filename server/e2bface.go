package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/server/e2b"
	"github.com/mcp-forge/forge/server/rest"
)

// e2bFace is the E2B face (server/e2b) of this server, made with the first
// HTTP handler: nil when e2b.enabled is off, the engine lacks what it needs
// (a test's fake) or there is no state dir to keep its sandboxes in.
func (s *Server) e2bFace() *e2b.Handler {
	s.e2bOnce.Do(func() {
		eng, ok := s.eng.(e2b.Engine)
		if !ok || !s.cfg.E2B.Enabled || s.cfg.StateDir == "" {
			return
		}
		h, err := e2b.New(e2b.Options{
			Engine: eng, Auth: s.opts.Auth, Admit: s.admit, Execute: s.e2bExecute,
			NoAuth: func(ctx context.Context) (engine.Principal, bool) {
				if s.opts.InsecureNoAuth {
					return s.principal(ctx), true
				}
				return engine.Principal{}, false
			},
			OnRefused: s.e2bRefused,
			Config:    s.cfg, StateDir: s.cfg.StateDir, Logger: s.log.With("face", "e2b"), Audit: s.audit,
		})
		if err != nil {
			s.log.Error("the E2B face is off", "err", err)
			return
		}
		s.e2b = h
	})
	return s.e2b
}

// e2bExecute is the E2B face's execution path: the tenant gate and egress
// (execute), held open through a shutdown's grace like the other faces'.
func (s *Server) e2bExecute(ctx context.Context, req engine.Request) (*kernel.Result, error) {
	s.active.Add(1)
	defer s.active.Done()
	ectx, cancel := s.execContext(ctx)
	defer cancel()
	req.RequestID = rest.RequestID(ctx)
	return s.execute(ectx, req)
}

// e2bRefused logs and audits an E2B request refused for its credentials,
// within the refusals' budget, as refuseToken does forge's own.
func (s *Server) e2bRefused(r *http.Request, err error) {
	if !s.refusals.admit(r.RemoteAddr) {
		return
	}
	s.log.Warn("E2B request without valid credentials", "path", truncate(r.URL.Path, 100), "remote", r.RemoteAddr, "err", err)
	if !errors.Is(err, auth.ErrNoToken) {
		s.audit.Log(audit.Event{Event: audit.EventSecurityViolation, Severity: audit.SeverityCritical, RequestID: rest.RequestID(r.Context()),
			Reason: "E2B request with invalid credentials: " + truncate(err.Error(), 200), Fields: map[string]any{"remote": r.RemoteAddr, "path": truncate(r.URL.Path, 100)}})
	}
}
