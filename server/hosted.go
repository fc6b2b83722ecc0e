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
	"github.com/mcp-forge/forge/server/tenant"
)

// Hosted tools (runtime/hosted): listed beside forge's own tools, their
// arguments checked before mcp-go sees the call (a violation is -32602),
// every call run by the host in a sandbox.

const resourceHostedTools = "forge://tools/hosted"

// hostedEntry is one Host whose tools are listed (the file of
// forge serve --tools, a principal's saved tools).
type hostedEntry struct {
	h     *hosted.Host
	names []string
}

// AttachHosted lists h's tools beside forge's own, for every principal
// (the file of forge serve --tools). A name that collides with one of
// forge's tools, another hosted tool or a tool some principal saved is an
// error naming both; so is it at a reload, which then keeps the previous
// table.
//
// Lock order: a Host calls check holding its own lock, so hostedMu is never
// held while calling into a Host.
func (s *Server) AttachHosted(h *hosted.Host) error {
	tools := h.Tools()
	s.hostedMu.Lock()
	defer s.hostedMu.Unlock()
	e := &hostedEntry{h: h}
	check := func(tools []hosted.Tool) error {
		if err := s.collisionLocked(h, e, tools); err != nil {
			return err
		}
		for _, t := range tools {
			if s.savedRefs[t.Name] > 0 {
				return fmt.Errorf("%w: the hosted tool %q (%s) has the name of a tool saved with save_tool; rename one of them",
					hosted.ErrCollision, t.Name, h.Path())
			}
		}
		return nil
	}
	if err := check(tools); err != nil {
		return err
	}
	e.names = s.addHosted(nil, tools)
	s.hosts = append(s.hosts, e)
	s.setHooks(h, check, func(tools []hosted.Tool) { e.names = s.addHosted(e.names, tools) })
	s.addHostedResourceLocked()
	return nil
}

// setHooks makes h check a reload's table with check and take it with
// apply, each under hostedMu. The new table is read before hostedMu is
// taken (see the lock order above).
func (s *Server) setHooks(h *hosted.Host, check func([]hosted.Tool) error, apply func([]hosted.Tool)) {
	h.SetHooks(func(tools []hosted.Tool) error {
		s.hostedMu.Lock()
		defer s.hostedMu.Unlock()
		return check(tools)
	}, func() {
		tools := h.Tools()
		s.hostedMu.Lock()
		defer s.hostedMu.Unlock()
		apply(tools)
	})
}

// collisionLocked refuses tools of h (entry e) whose names are forge's own
// or another global hosted tool's.
func (s *Server) collisionLocked(h *hosted.Host, e *hostedEntry, tools []hosted.Tool) error {
	if s.own == nil {
		s.own = map[string]bool{}
		for name := range s.mcp.ListTools() {
			if s.savedRefs[name] == 0 {
				s.own[name] = true
			}
		}
		s.own[toolSaveTool], s.own[toolRemoveTool] = true, true
	}
	for _, t := range tools {
		if s.own[t.Name] {
			return fmt.Errorf("%w: the hosted tool %q (%s) has the name of forge's own tool %q; rename it with @tool(name=...)",
				hosted.ErrCollision, t.Name, h.Path(), t.Name)
		}
		for _, o := range s.hosts {
			if o != e && slices.Contains(o.names, t.Name) {
				return fmt.Errorf("%w: the hosted tool %q (%s) has the name of the hosted tool %q (%s)",
					hosted.ErrCollision, t.Name, h.Path(), t.Name, o.h.Path())
			}
		}
	}
	return nil
}

func (s *Server) addHostedResourceLocked() {
	if s.hostedResource {
		return
	}
	s.hostedResource = true
	s.mcp.AddResource(mcp.NewResource(resourceHostedTools, "Hosted tools",
		mcp.WithResourceDescription("The hosted tools (forge_tools functions run in sandboxes) and the saved tools of this principal: name, description, schemas, timeout, memory, persistent."),
		mcp.WithMIMEType("application/json")), s.readHostedTools)
}

// hostOf is the Host serving tool name to the principal in ctx: a global
// hosted tool or one the principal saved; nil if none.
func (s *Server) hostOf(ctx context.Context, name string) *hosted.Host {
	s.hostedMu.Lock()
	hosts := slices.Clone(s.hosts)
	var mine *hosted.Host
	if e := s.saved[s.principal(ctx).Tenant]; e != nil {
		if _, ok := e.tools[name]; ok {
			mine = e.h
		}
	}
	s.hostedMu.Unlock()
	for _, e := range hosts {
		if e.h.Has(name) {
			return e.h
		}
	}
	return mine
}

// addHosted replaces the registered hosted tools old by tools (mcp-go
// sends notifications/tools/list_changed for each change).
func (s *Server) addHosted(old []string, tools []hosted.Tool) []string {
	names := make([]string, 0, len(tools))
	entries := make([]mcpserver.ServerTool, 0, len(tools))
	for _, t := range tools {
		entries = append(entries, mcpserver.ServerTool{Tool: mcpTool(t), Handler: s.hostedHandler(t.Name)})
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

// mcpTool is hosted tool t as tools/list shows it.
func mcpTool(t hosted.Tool) mcp.Tool {
	mt := mcp.NewToolWithRawSchema(t.Name, t.Description, t.InputSchema)
	if len(t.OutputSchema) > 0 {
		mt.RawOutputSchema = t.OutputSchema
	}
	return mt
}

func (s *Server) hostedHandler(name string) mcpserver.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return s.handleHosted(ctx, name, req)
	}
}

// checkHosted answers a call of a hosted tool whose arguments break its
// inputSchema with invalid params (-32602), naming the field path; nil
// for good arguments or a tool that is not hosted (step 4 of preflight).
func (s *Server) checkHosted(ctx context.Context, id any, call toolCall) mcp.JSONRPCMessage {
	h := s.hostOf(ctx, call.Name)
	if h == nil {
		return nil
	}
	var ae *hosted.ArgumentError
	if err := h.Validate(call.Name, call.Arguments); errors.As(err, &ae) {
		return mcp.NewJSONRPCError(mcp.NewRequestId(id), mcp.INVALID_PARAMS, ae.Error(), map[string]any{"path": ae.Path})
	}
	return nil
}

func (s *Server) handleHosted(ctx context.Context, name string, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	s.active.Add(1)
	defer s.active.Done()
	if s.lateForDrain(ctx) {
		return mcp.NewToolResultError("forge is shutting down; no new calls are accepted"), nil
	}
	raw := req.Params.RawArguments
	if len(raw) == 0 && req.Params.Arguments != nil {
		var err error
		if raw, err = json.Marshal(req.Params.Arguments); err != nil {
			return nil, err
		}
	}
	h := s.hostOf(ctx, name)
	if h == nil {
		return mcp.NewToolResultError(fmt.Sprintf("the hosted tool %q is no longer served (see forge://tools/hosted)", name)), nil
	}
	ctx, cancel := s.execContext(ctx)
	defer cancel()
	p := s.principal(ctx)
	r, err := admitted(ctx, s, p, func(ctx context.Context) (*hosted.Result, error) { return h.Call(ctx, p, name, raw) })
	if err != nil {
		var ae *hosted.ArgumentError
		var lim *tenant.LimitError
		switch {
		case errors.As(err, &ae):
			return nil, err // an in-process client (no preflight), or a reload changed the schema
		case errors.As(err, &lim):
			return mcp.NewToolResultError("Not run: " + lim.Error() + ". The tool did not start."), nil
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
		Source       string          `json:"source"`
	}
	out := []entry{}
	p := s.principal(ctx)
	s.hostedMu.Lock()
	hosts := slices.Clone(s.hosts)
	if e := s.saved[p.Tenant]; e != nil {
		hosts = append(hosts, &e.hostedEntry)
	}
	s.hostedMu.Unlock()
	for _, e := range hosts {
		for _, t := range e.h.Tools() {
			out = append(out, entry{t.Name, t.Description, t.InputSchema, t.OutputSchema, t.Timeout.Seconds(), t.Memory, t.Persistent, e.h.Path()})
		}
	}
	doc := map[string]any{"tools": out}
	if s.saver != nil {
		doc["saved"] = s.saver.List(p)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}, nil
}
