package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/runtime/hosted"
)

// Hosted tools (runtime/hosted): listed beside forge's own tools, their
// arguments checked before mcp-go sees the call (a violation is -32602),
// every call run by the host in a sandbox.

const resourceHostedTools = "forge://tools/hosted"

// AttachHosted lists h's tools beside forge's own. A name that collides
// with one of forge's tools is an error naming both; so is it at a reload,
// which then keeps the previous table.
func (s *Server) AttachHosted(h *hosted.Host) error {
	own := map[string]bool{}
	for name := range s.mcp.ListTools() {
		own[name] = true
	}
	check := func(tools []hosted.Tool) error {
		for _, t := range tools {
			if own[t.Name] {
				return fmt.Errorf("%w: the hosted tool %q (%s) has the name of forge's own tool %q; rename it with @tool(name=...)",
					hosted.ErrCollision, t.Name, h.Path(), t.Name)
			}
		}
		return nil
	}
	tools := h.Tools()
	if err := check(tools); err != nil {
		return err
	}
	s.hosted = h
	s.hostedNames = s.addHosted(nil, tools)
	h.SetHooks(check, func() {
		s.hostedMu.Lock()
		defer s.hostedMu.Unlock()
		s.hostedNames = s.addHosted(s.hostedNames, h.Tools())
	})
	s.mcp.AddResource(mcp.NewResource(resourceHostedTools, "Hosted tools",
		mcp.WithResourceDescription("The hosted tools (forge_tools functions run in sandboxes): name, description, schemas, timeout, memory, persistent."),
		mcp.WithMIMEType("application/json")), s.readHostedTools)
	return nil
}

// addHosted replaces the registered hosted tools old by tools (mcp-go
// sends notifications/tools/list_changed for each change).
func (s *Server) addHosted(old []string, tools []hosted.Tool) []string {
	names := make([]string, 0, len(tools))
	entries := make([]mcpserver.ServerTool, 0, len(tools))
	for _, t := range tools {
		mt := mcp.NewToolWithRawSchema(t.Name, t.Description, t.InputSchema)
		if len(t.OutputSchema) > 0 {
			mt.RawOutputSchema = t.OutputSchema
		}
		name := t.Name
		entries = append(entries, mcpserver.ServerTool{Tool: mt, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return s.handleHosted(ctx, name, req)
		}})
		names = append(names, t.Name)
	}
	var gone []string
	for _, n := range old {
		if !slices.Contains(names, n) {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		s.mcp.DeleteTools(gone...)
	}
	if len(entries) > 0 {
		s.mcp.AddTools(entries...)
	}
	return names
}

// hostedPrecheck answers a tools/call of a hosted tool whose arguments break
// its inputSchema with invalid params (-32602), naming the field path.
func (s *Server) hostedPrecheck(msg message) mcp.JSONRPCMessage {
	if s.hosted == nil || msg.kind != kindRequest || msg.method != string(mcp.MethodToolsCall) {
		return nil
	}
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(msg.params, &p) != nil || !s.hosted.Has(p.Name) {
		return nil
	}
	var ae *hosted.ArgumentError
	if err := s.hosted.Validate(p.Name, p.Arguments); errors.As(err, &ae) {
		return mcp.NewJSONRPCError(mcp.NewRequestId(msg.id), mcp.INVALID_PARAMS, ae.Error(), map[string]any{"path": ae.Path})
	}
	return nil
}

func (s *Server) handleHosted(ctx context.Context, name string, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	s.active.Add(1)
	defer s.active.Done()
	if s.draining() {
		return mcp.NewToolResultError("forge is shutting down; no new calls are accepted"), nil
	}
	raw := req.Params.RawArguments
	if len(raw) == 0 && req.Params.Arguments != nil {
		var err error
		if raw, err = json.Marshal(req.Params.Arguments); err != nil {
			return nil, err
		}
	}
	ctx, cancel := s.execContext(ctx)
	defer cancel()
	r, err := s.hosted.Call(ctx, s.principal(ctx), name, raw)
	if err != nil {
		var ae *hosted.ArgumentError
		if errors.As(err, &ae) {
			return nil, err // an in-process client that skipped hostedPrecheck
		}
		return mcp.NewToolResultError("forge could not run the tool (an error of the sandbox, not of the tool): " + err.Error()), nil
	}
	out := &mcp.CallToolResult{IsError: r.IsError, Content: []mcp.Content{mcp.NewTextContent(r.Text)}}
	if len(r.Structured) > 0 {
		out.StructuredContent = r.Structured
	}
	if r.IsError && r.ErrorType != "" {
		out.Meta = mcp.NewMetaFromMap(map[string]any{"forge/error": map[string]any{"type": r.ErrorType, "message": r.ErrorMessage}})
	}
	return out, nil
}

func (s *Server) readHostedTools(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	type entry struct {
		Name         string          `json:"name"`
		Description  string          `json:"description,omitempty"`
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
		TimeoutS     float64         `json:"timeout_s,omitempty"`
		MemoryBytes  int64           `json:"memory_bytes,omitempty"`
		Persistent   bool            `json:"persistent"`
	}
	var out []entry
	for _, t := range s.hosted.Tools() {
		out = append(out, entry{t.Name, t.Description, t.InputSchema, t.OutputSchema, t.Timeout.Seconds(), t.Memory, t.Persistent})
	}
	b, err := json.Marshal(map[string]any{"path": s.hosted.Path(), "tools": out})
	if err != nil {
		return nil, err
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}, nil
}
