package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
)

const (
	toolSaveTool   = "save_tool"
	toolRemoveTool = "remove_tool"
)

// AttachSaver lists save_tool and remove_tool (unless hosted_tools.save_tool
// is refuse) and the saved tools the server's principal already has; other
// principals' are served at their first request (see openSaved). It makes
// the server the saver's Attach.
func (s *Server) AttachSaver(ctx context.Context, sv *hosted.Saver) error {
	policy := s.cfg.HostedTools.SaveTool
	if policy == "refuse" {
		return nil
	}
	sv.SetAttach(s.attachSaved)
	s.hostedMu.Lock()
	s.saver = sv
	s.hostedMu.Unlock()
	if h, err := sv.Open(ctx, s.principal(ctx)); err != nil {
		return fmt.Errorf("saved tools: %w", err)
	} else if h != nil {
		if err := s.attachSaved(s.principal(ctx), h); err != nil {
			return fmt.Errorf("saved tools: %w", err)
		}
	}
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	approval := ""
	if policy == "approve" {
		approval = " The user is asked to approve each save."
	}
	save := mcp.NewToolWithRawSchema(toolSaveTool,
		"Promote a function defined in a session into a hosted tool, listed beside execute_python, that runs in a fresh sandbox on every call. The function needs type hints on every parameter (they become the tool's schema), must be defined at the top level with def, and must import what it uses inside its body."+approval,
		rawJSON(map[string]any{"type": "object", "required": []string{"session_id", "function"}, "additionalProperties": false,
			"properties": map[string]any{
				"session_id":  str("The session where the function is defined."),
				"function":    str("The function's name in the session."),
				"name":        str("The tool's name (default: the function's name)."),
				"description": str("The tool's description (default: the docstring)."),
			}}))
	remove := mcp.NewToolWithRawSchema(toolRemoveTool, "Remove a tool saved with save_tool (see forge://tools/hosted).",
		rawJSON(map[string]any{"type": "object", "required": []string{"name"}, "additionalProperties": false,
			"properties": map[string]any{"name": str("The saved tool's name.")}}))
	s.mcp.AddTool(save, s.handleSaveTool)
	s.mcp.AddTool(remove, s.handleRemoveTool)
	s.hostedMu.Lock()
	s.addHostedResourceLocked()
	s.hostedMu.Unlock()
	return nil
}

func rawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (s *Server) handleSaveTool(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	s.active.Add(1)
	defer s.active.Done()
	sid, fn := req.GetString("session_id", ""), req.GetString("function", "")
	name, desc := req.GetString("name", ""), req.GetString("description", "")
	if sid == "" || fn == "" {
		return nil, argError("", "session_id and function are required")
	}
	if s.cfg.HostedTools.SaveTool == "approve" {
		if msg := s.approve(ctx, sid, fn, name); msg != "" {
			return mcp.NewToolResultError(msg), nil
		}
	}
	ctx, cancel := s.execContext(ctx)
	defer cancel()
	p := s.principal(ctx)
	st, err := admitted(ctx, s, p, func(ctx context.Context) (hosted.SavedTool, error) { return s.saver.Save(ctx, p, sid, fn, name, desc) })
	if err != nil {
		return mcp.NewToolResultError(saveError(err)), nil
	}
	return mcp.NewToolResultText(fmt.Sprintf("Saved %s from session %s as the hosted tool %q (sha256 %s); it is listed now (notifications/tools/list_changed).",
		st.Function, st.SessionID, st.Name, st.SHA256)), nil
}

// approve asks the user through elicitation; "" means approved, else why not.
func (s *Server) approve(ctx context.Context, sid, fn, name string) string {
	if name == "" {
		name = fn
	}
	act, err := s.askPerson(ctx, fmt.Sprintf("Save the function %s of session %s as the hosted tool %q? Every call of it will run in a sandbox.", fn, sid, name))
	if err != nil {
		return "save_tool needs the user's approval (hosted_tools.save_tool: approve), and this client could not be asked (" + err.Error() + "); a server operator can set hosted_tools.save_tool: allow"
	}
	ev := audit.Event{Event: audit.EventToolApproved, Severity: audit.SeverityInfo, Principal: s.principal(ctx).Tenant, Client: clientName(ctx),
		Tool: toolSaveTool, SessionID: sid, Fields: map[string]any{"function": fn, "name": name, "action": string(act)}}
	if act != mcp.ElicitationResponseActionAccept {
		ev.Event, ev.Severity = audit.EventToolDeclined, audit.SeverityWarning
		s.audit.Log(ev)
		return "The user did not approve saving " + fn + " (" + string(act) + ")."
	}
	s.audit.Log(ev)
	return ""
}

func saveError(err error) string {
	var re *engine.RefusedError
	if errors.As(err, &re) && re.Kind == engine.RefusedNotFound {
		return "No such session: " + err.Error()
	}
	return err.Error()
}

func (s *Server) handleRemoveTool(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	s.active.Add(1)
	defer s.active.Done()
	name := req.GetString("name", "")
	if name == "" {
		return nil, argError("name", "is required")
	}
	ctx, cancel := s.execContext(ctx)
	defer cancel()
	if err := s.saver.Remove(ctx, s.principal(ctx), name); err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return mcp.NewToolResultText("Removed the saved tool " + name + "."), nil
}
