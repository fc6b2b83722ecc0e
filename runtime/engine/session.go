package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/runtime/session"
)

// interruptGrace is how long a session's agent has to answer after the
// KeyboardInterrupt of a timeout before its sandbox is killed.
const interruptGrace = 2 * time.Second

// Sessions is the session manager (list, destroy, document_state, state).
func (e *Engine) Sessions() *session.Manager { return e.sessions }

// executeSession runs code in a session: a timeout interrupts the code and
// keeps the namespace; a dead sandbox (OOM) loses the session.
func (e *Engine) executeSession(ctx context.Context, req Request, plan Plan) (*kernel.Result, error) {
	id := req.SessionID
	if id == "" {
		id = session.NewID()
	}
	var res *kernel.Result
	notes, err := e.sessions.Call(ctx, id, plan.Image, true, func(sb *sandbox.Sandbox, meta *session.Meta) error {
		if err := sb.SetLimits(plan.Limits); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		e.audit.Log(audit.Event{Event: audit.EventContainerStart, Severity: audit.SeverityInfo, SandboxID: sb.ID(), SessionID: id})
		if len(req.MCPTools) > 0 {
			if err := e.toolsForSession(ctx, sb, req.MCPTools); err != nil {
				return err
			}
		}
		var err error
		res, err = sb.Exec(ctx, req.Code, sandbox.ExecOptions{
			Timeout: plan.Timeout, OutputLimit: int(e.cfg.Execution.OutputLimit),
			KeepAlive: true, Grace: interruptGrace,
		})
		if err != nil {
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

// WriteFile writes into a session's /workspace (creating the session if
// create is set).
func (e *Engine) WriteFile(ctx context.Context, id, path string, data []byte) error {
	if max := int64(e.cfg.Volumes.MaxFileSize); max > 0 && int64(len(data)) > max {
		return fmt.Errorf("%w: file is %d bytes, over the limit of %d (volumes.max_file_size)", ErrInvalidRequest, len(data), max)
	}
	_, err := e.sessions.Call(ctx, id, e.cfg.Images.Default, true, func(sb *sandbox.Sandbox, _ *session.Meta) error {
		return sb.Client().WriteFile(ctx, path, data)
	})
	return err
}

// ReadFile reads a file from a session's /workspace.
func (e *Engine) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	var data []byte
	_, err := e.sessions.Call(ctx, id, "", false, func(sb *sandbox.Sandbox, _ *session.Meta) error {
		var err error
		data, err = sb.Client().ReadFile(ctx, path, int(e.cfg.Volumes.MaxFileSize))
		return err
	})
	return data, err
}

// ListFiles lists a session's /workspace.
func (e *Engine) ListFiles(ctx context.Context, id string) ([]kernel.FileInfo, error) {
	var files []kernel.FileInfo
	_, err := e.sessions.Call(ctx, id, "", false, func(sb *sandbox.Sandbox, _ *session.Meta) error {
		var err error
		files, err = sb.Client().ListFiles(ctx)
		return err
	})
	return files, err
}
