package server

import (
	"context"
	"errors"
	"strings"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/auth"
)

// The tenant gate. Every operation that runs in a sandbox, starts one or
// makes a session passes admit once, MCP and REST alike: execute_python and
// POST /execute, POST /sandboxes, the session tools and endpoints that start,
// resume or create a session's sandbox (write_file, read_file, list_files,
// document_state, fork_session, a session's state and files), DELETE of a
// file, hosted-tool calls and save_tool. A face that called the engine
// beside it let one tenant take every global session slot past its
// max_sessions, executions_per_minute and max_concurrent. Listing and
// destroying sessions run nothing and do not pass it; builds have their own
// bucket (toolGate, restBuild).

// admit lets one sandbox-consuming operation of p in, within its tenant's
// executions_per_minute and max_concurrent, and returns ctx carrying the
// tenant's max_sessions for the session manager, which counts an owner's
// sessions where it makes one, under its own lock (a count here, before the
// engine created anything, let concurrent calls all see room). done
// releases the operation's max_concurrent slot and turns the manager's
// refusal into the tenant's *tenant.LimitError; call it exactly once with
// the operation's error. Tenants of tokens only: the local user and
// unauthenticated listeners have forge's global limits.
func (s *Server) admit(ctx context.Context, p engine.Principal) (_ context.Context, done func(error) error, _ error) {
	t, ok := strings.CutPrefix(p.Tenant, auth.TenantPrefix)
	if !ok || s.tenants == nil {
		return ctx, func(err error) error { return err }, nil
	}
	release, err := s.tenants.Execution(t)
	if err != nil {
		s.limited(t, err)
		return ctx, nil, err
	}
	if n := s.tenants.MaxSessions(t); n > 0 {
		ctx = session.WithQuota(ctx, n)
	}
	return ctx, func(err error) error {
		release()
		var q *session.QuotaError
		if errors.As(err, &q) {
			err = s.tenants.SessionsError(t, q.Max)
			s.limited(t, err)
		}
		return err
	}, nil
}

// admitted runs f for p through admit.
func admitted[T any](ctx context.Context, s *Server, p engine.Principal, f func(context.Context) (T, error)) (T, error) {
	ctx, done, err := s.admit(ctx, p)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(ctx)
	return v, done(err)
}

// gatedEngine is the engine's session methods as both faces call them:
// those that may run in, start or create a session's sandbox pass admit.
// It is the REST API's Engine and what the session tools and resources use.
type gatedEngine struct{ s *Server }

func (g gatedEngine) ListSessions(ctx context.Context, p engine.Principal) ([]session.Info, error) {
	return g.s.eng.ListSessions(ctx, p)
}

func (g gatedEngine) DestroySession(ctx context.Context, p engine.Principal, id string) error {
	return g.s.eng.DestroySession(ctx, p, id)
}

// SessionState introspects a session live in this process (and starts a
// fresh sandbox for one that was lost).
func (g gatedEngine) SessionState(ctx context.Context, p engine.Principal, id string) (*session.Meta, error) {
	return admitted(ctx, g.s, p, func(ctx context.Context) (*session.Meta, error) { return g.s.eng.SessionState(ctx, p, id) })
}

func (g gatedEngine) DocumentState(ctx context.Context, p engine.Principal, id string, vars map[string]string, note string, clear bool) (*session.Documented, error) {
	return admitted(ctx, g.s, p, func(ctx context.Context) (*session.Documented, error) {
		return g.s.eng.DocumentState(ctx, p, id, vars, note, clear)
	})
}

func (g gatedEngine) ForkSession(ctx context.Context, p engine.Principal, id, newID string) (*session.Fork, error) {
	return admitted(ctx, g.s, p, func(ctx context.Context) (*session.Fork, error) { return g.s.eng.ForkSession(ctx, p, id, newID) })
}

func (g gatedEngine) WriteFile(ctx context.Context, p engine.Principal, id, path string, data []byte) error {
	_, err := admitted(ctx, g.s, p, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.s.eng.WriteFile(ctx, p, id, path, data)
	})
	return err
}

func (g gatedEngine) ReadFile(ctx context.Context, p engine.Principal, id, path string) ([]byte, error) {
	return admitted(ctx, g.s, p, func(ctx context.Context) ([]byte, error) { return g.s.eng.ReadFile(ctx, p, id, path) })
}

func (g gatedEngine) ListFiles(ctx context.Context, p engine.Principal, id string) ([]kernel.FileInfo, error) {
	return admitted(ctx, g.s, p, func(ctx context.Context) ([]kernel.FileInfo, error) { return g.s.eng.ListFiles(ctx, p, id) })
}
