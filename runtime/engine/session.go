package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/runtime/session"
)

// interruptGrace is how long a session's agent has to answer after the
// KeyboardInterrupt of a timeout before its sandbox is killed.
const interruptGrace = 2 * time.Second

// Sessions is the session manager (for tests and tools that need its
// counters; the faces use the Engine's session methods).
func (e *Engine) Sessions() *session.Manager { return e.sessions }

// The session methods below act on p's sessions only: an id of another
// principal's session answers exactly like an unknown id. Errors the caller
// must fix are *RefusedError. A ctx from session.WithQuota caps how many
// sessions p may have: Execute, WriteFile and ForkSession then refuse a new
// one past it (a *session.QuotaError inside), counted where the session
// is made.

// ListSessions lists p's sessions.
func (e *Engine) ListSessions(ctx context.Context, p Principal) ([]session.Info, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	list, err := e.sessions.List(ctx, p.Tenant)
	return list, refuse(err)
}

// DestroySession destroys p's session id: sandbox, variables and files.
func (e *Engine) DestroySession(ctx context.Context, p Principal, id string) error {
	if err := p.check(); err != nil {
		return refuse(err)
	}
	return refuse(e.sessions.Destroy(ctx, p.Tenant, id))
}

// DocumentState stores descriptions of the variables of p's session id and
// a note, with an introspection of every user variable.
func (e *Engine) DocumentState(ctx context.Context, p Principal, id string, vars map[string]string, note string, clear bool) (*session.Documented, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	doc, err := e.sessions.Document(ctx, p.Tenant, id, vars, note, clear)
	return doc, refuse(err)
}

// ForkSession makes newID (a fresh id when empty) a copy of p's session id:
// variables and /workspace, in a new sandbox with its own host uid block,
// owned by p. Variables that cannot be copied are listed in the reply.
func (e *Engine) ForkSession(ctx context.Context, p Principal, id, newID string) (*session.Fork, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	// The fork's creation is audited as session.create (the manager's event).
	f, err := e.sessions.Fork(withTenant(ctx, p), p.Tenant, id, newID)
	return f, refuse(err)
}

// SessionState is the metadata of p's session id, with a fresh
// introspection when it is live in this process.
func (e *Engine) SessionState(ctx context.Context, p Principal, id string) (*session.Meta, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	meta, err := e.sessions.State(ctx, p.Tenant, id)
	return meta, refuse(err)
}

// HibernateSession saves p's live session id to disk and frees its
// sandbox; its next call restores it (session.ErrHibernated, refused as
// busy, when it has no sandbox).
func (e *Engine) HibernateSession(ctx context.Context, p Principal, id string) error {
	if err := p.check(); err != nil {
		return refuse(err)
	}
	return refuse(e.sessions.Hibernate(ctx, p.Tenant, id))
}

// WithSession runs f with the running sandbox of p's existing session id,
// locked for f's duration (brought back from hibernation first); the
// sandbox is paused again shortly after f returns (session.Manager.Call). Faces that drive the sandbox themselves
// (the E2B face's commands and files) use it.
func (e *Engine) WithSession(ctx context.Context, p Principal, id string, f func(*sandbox.Sandbox) error) error {
	if err := p.check(); err != nil {
		return refuse(err)
	}
	ctx = withTenant(ctx, p) // it may start the session's sandbox
	_, err := e.sessions.Call(ctx, p.Tenant, id, "", false, func(sb *sandbox.Sandbox, _ *session.Meta) error { return f(sb) })
	return refuse(err)
}

// executeSession runs code in a session: a timeout interrupts the code and
// keeps the namespace; a dead sandbox (OOM) loses the session.
func (e *Engine) executeSession(ctx context.Context, req Request, plan Plan) (*kernel.Result, error) {
	id := req.SessionID
	if id == "" {
		id = session.NewID()
	}
	var res *kernel.Result
	notes, err := e.sessions.Call(ctx, req.Principal.Tenant, id, plan.Image, true, func(sb *sandbox.Sandbox, meta *session.Meta) error {
		if err := sb.SetLimits(plan.Limits); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		pol, stored, err := e.sessionEgress(req, plan, meta.Egress)
		if err != nil {
			return err
		}
		meta.Egress = stored
		if res, err = e.run(ctx, sb, req, plan, pol, id); err != nil {
			return err
		}
		if sb.Alive() { // the agent answered: its count is current
			meta.VariableCount = res.Variables
		}
		if !sb.Alive() {
			why := sb.DeathReason()
			if res.OOMKilled {
				why = "it ran out of memory"
			} else if res.TimedOut {
				why = "the code did not stop after the timeout's KeyboardInterrupt, so the sandbox was killed"
			}
			res.Notes = append(res.Notes, fmt.Sprintf("session %s is gone (%s): its variables and /workspace files are lost; the next call with this id starts fresh", id, why))
		} else if res.TimedOut {
			res.Notes = append(res.Notes, fmt.Sprintf("the code was interrupted at the %s time limit; session %s keeps its variables", plan.Timeout, id))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Notes = append(notes, res.Notes...)
	res.SessionID = &id
	return res, nil
}

// WriteFile writes into the /workspace of p's session id, creating the
// session if it does not exist.
func (e *Engine) WriteFile(ctx context.Context, p Principal, id, path string, data []byte) error {
	if err := p.check(); err != nil {
		return refuse(err)
	}
	ctx = withTenant(ctx, p) // it may start the session's sandbox
	if max := int64(e.cfg.Volumes.MaxFileSize); max > 0 && int64(len(data)) > max {
		return refuse(fmt.Errorf("%w: file is %d bytes, over the limit of %d (volumes.max_file_size)", ErrInvalidRequest, len(data), max))
	}
	_, err := e.sessions.Call(ctx, p.Tenant, id, e.cfg.Images.Default, true, func(sb *sandbox.Sandbox, _ *session.Meta) error {
		return sb.Client().WriteFile(ctx, path, data)
	})
	return refuse(err)
}

// ReadFile reads a file from the /workspace of p's session id.
func (e *Engine) ReadFile(ctx context.Context, p Principal, id, path string) ([]byte, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	var data []byte
	_, err := e.sessions.Call(ctx, p.Tenant, id, "", false, func(sb *sandbox.Sandbox, _ *session.Meta) error {
		var err error
		data, err = sb.Client().ReadFile(ctx, path, int(e.cfg.Volumes.MaxFileSize))
		return err
	})
	return data, refuse(err)
}

// ListFiles lists the /workspace of p's session id.
func (e *Engine) ListFiles(ctx context.Context, p Principal, id string) ([]kernel.FileInfo, error) {
	if err := p.check(); err != nil {
		return nil, refuse(err)
	}
	var files []kernel.FileInfo
	_, err := e.sessions.Call(ctx, p.Tenant, id, "", false, func(sb *sandbox.Sandbox, _ *session.Meta) error {
		var err error
		files, err = sb.Client().ListFiles(ctx)
		return err
	})
	return files, refuse(err)
}

// SessionHolder names the other replica that holds p's session id (cluster
// mode), or nil when this replica serves it.
func (e *Engine) SessionHolder(p Principal, id string) *session.HeldError {
	if p.check() != nil {
		return nil
	}
	return e.sessions.Holder(p.Tenant, id)
}

// SessionReleased reports whether replica member has let go of p's session
// id, and whether it handed it over (see session.Manager.Released).
func (e *Engine) SessionReleased(p Principal, id, member string) (released, handedOver bool) {
	if p.check() != nil {
		return true, false
	}
	return e.sessions.Released(p.Tenant, id, member)
}

// LiveSessions is how many sessions have a sandbox in this process (for
// metrics; every principal's).
func (e *Engine) LiveSessions() int { return e.sessions.Live() }

// SessionCounts is every principal's live and hibernated sessions, by
// principal (for metrics; hibernated ones are counted from the state dir
// at most every few seconds).
func (e *Engine) SessionCounts() map[string]session.Counts { return e.sessions.Counts() }
