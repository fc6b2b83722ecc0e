package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/server/e2b"
	"github.com/mcp-forge/forge/server/rest"
)

// e2bFace is the E2B face (server/e2b) of this server, made with the first
// HTTP handler: nil when e2b.enabled is off, the engine lacks what it needs
// (a test's fake) or there is no state dir to keep its sandboxes in.
func (s *Server) e2bFace() *e2b.Handler {
	s.e2bOnce.Do(func() {
		if !s.cfg.E2B.Enabled || s.cfg.StateDir == "" {
			return
		}
		h, err := e2b.New(e2b.Options{
			Engine: e2bEngine{s}, Auth: s.opts.Auth, Admit: s.admit, Execute: s.e2bExecute,
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

// e2bEngine is the engine as the E2B face calls it: once it is open (a
// Deferred one is waited for), and only if it has what the face needs.
type e2bEngine struct{ s *Server }

func (g e2bEngine) get(ctx context.Context) (e2b.Engine, error) {
	eng := g.s.eng
	if d, ok := eng.(*Deferred); ok {
		if err := d.Wait(ctx); err != nil {
			return nil, err
		}
		eng = d.Engine
	}
	e, ok := eng.(e2b.Engine)
	if !ok {
		return nil, fmt.Errorf("%w: this engine cannot serve E2B sandboxes", ErrService)
	}
	return e, nil
}

func (g e2bEngine) Config() *profiles.Config { return g.s.cfg }

func (g e2bEngine) Images(ctx context.Context) ([]rootfs.Image, error) {
	e, err := g.get(ctx)
	if err != nil {
		return nil, err
	}
	return e.Images(ctx)
}

func (g e2bEngine) ListSessions(ctx context.Context, p engine.Principal) ([]session.Info, error) {
	e, err := g.get(ctx)
	if err != nil {
		return nil, err
	}
	return e.ListSessions(ctx, p)
}

func (g e2bEngine) DestroySession(ctx context.Context, p engine.Principal, id string) error {
	e, err := g.get(ctx)
	if err != nil {
		return err
	}
	return e.DestroySession(ctx, p, id)
}

func (g e2bEngine) HibernateSession(ctx context.Context, p engine.Principal, id string) error {
	e, err := g.get(ctx)
	if err != nil {
		return err
	}
	return e.HibernateSession(ctx, p, id)
}

func (g e2bEngine) WithSession(ctx context.Context, p engine.Principal, id string, f func(*sandbox.Sandbox) error) error {
	e, err := g.get(ctx)
	if err != nil {
		return err
	}
	return e.WithSession(ctx, p, id, f)
}

func (g e2bEngine) WriteFile(ctx context.Context, p engine.Principal, id, path string, data []byte) error {
	e, err := g.get(ctx)
	if err != nil {
		return err
	}
	return e.WriteFile(ctx, p, id, path, data)
}

func (g e2bEngine) ReadFile(ctx context.Context, p engine.Principal, id, path string) ([]byte, error) {
	e, err := g.get(ctx)
	if err != nil {
		return nil, err
	}
	return e.ReadFile(ctx, p, id, path)
}

func (g e2bEngine) ListFiles(ctx context.Context, p engine.Principal, id string) ([]kernel.FileInfo, error) {
	e, err := g.get(ctx)
	if err != nil {
		return nil, err
	}
	return e.ListFiles(ctx, p, id)
}

// e2bExecute is the E2B face's execution path: the tenant gate and egress
// (execute), held open through a shutdown's grace like the other faces'.
func (s *Server) e2bExecute(ctx context.Context, req engine.Request) (*kernel.Result, error) {
	if _, err := (e2bEngine{s}).get(ctx); err != nil { // a Deferred engine still opening
		return nil, err
	}
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
