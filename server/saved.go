package server

import (
	"context"
	"sort"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
)

// Saved tools (save_tool) belong to the principal that saved them: listed,
// read in forge://tools/hosted and callable for it alone. mcp-go keeps one
// tool registry for every client, so each saved name is registered once, as
// a placeholder, while any principal has a tool of that name; the tool
// filter (savedFilter) puts the caller's own tool in its place or drops it,
// in tools/list and in tools/call alike, so that another principal's tool
// answers exactly like an unknown one. Two principals may save tools of the
// same name, each with its own schema.

// savedEntry is one principal's Host of saved tools, with its tools as
// tools/list shows them.
type savedEntry struct {
	hostedEntry
	tools map[string]mcp.Tool
}

// openSaved serves p's saved tools, if it has any and they are not served
// yet (a principal's first request after a start). Reading their table
// takes a sandbox, so it is done once per principal and process.
// A table that does not load is tried again after savedRetry, not at every
// request.
func (s *Server) openSaved(ctx context.Context, p engine.Principal) {
	s.hostedMu.Lock()
	sv, open := s.saver, s.saved[p.Tenant] != nil
	failed, ok := s.savedFailed[p.Tenant]
	s.hostedMu.Unlock()
	if sv == nil || open || p.Tenant == "" || (ok && time.Since(failed) < savedRetry) {
		return
	}
	h, err := sv.Open(ctx, p)
	if err == nil && h != nil {
		err = s.attachSaved(p, h)
	}
	if err != nil {
		s.log.Warn("serving saved tools", "principal", p.Tenant, "err", err, "retry_in", savedRetry)
		s.hostedMu.Lock()
		if s.savedFailed == nil {
			s.savedFailed = map[string]time.Time{}
		}
		s.savedFailed[p.Tenant] = time.Now()
		s.hostedMu.Unlock()
	}
}

const savedRetry = time.Minute

// attachSaved serves h, p's saved tools (the Saver's Attach). Their names
// may not be forge's own or a global hosted tool's.
func (s *Server) attachSaved(p engine.Principal, h *hosted.Host) error {
	tools := h.Tools() // before hostedMu: see AttachHosted
	s.hostedMu.Lock()
	defer s.hostedMu.Unlock()
	if e := s.saved[p.Tenant]; e != nil && e.h == h {
		return nil
	}
	e := &savedEntry{hostedEntry: hostedEntry{h: h}}
	check := func(tools []hosted.Tool) error { return s.collisionLocked(h, &e.hostedEntry, tools) }
	if err := check(tools); err != nil {
		return err
	}
	if s.saved == nil {
		s.saved, s.savedRefs = map[string]*savedEntry{}, map[string]int{}
	}
	s.saved[p.Tenant] = e
	delete(s.savedFailed, p.Tenant)
	s.setSavedLocked(e, tools)
	s.setHooks(h, check, func(tools []hosted.Tool) { s.setSavedLocked(e, tools) })
	s.addHostedResourceLocked()
	return nil
}

// setSavedLocked makes tools e's table and registers or deletes the
// placeholders whose count of principals changed. mcp-go announces a
// registry change to every client; a change that leaves the registry as it
// was is announced here, to every client as well (mcp-go cannot tell
// which clients are the principal's: the notification carries nothing, and
// another principal's client that lists again sees only its own tools).
func (s *Server) setSavedLocked(e *savedEntry, tools []hosted.Tool) {
	next := map[string]mcp.Tool{}
	for _, t := range tools {
		next[t.Name] = mcpTool(t)
	}
	var gone []string
	var added []mcpserver.ServerTool
	for name := range e.tools {
		if _, ok := next[name]; !ok {
			if s.savedRefs[name]--; s.savedRefs[name] <= 0 {
				delete(s.savedRefs, name)
				gone = append(gone, name)
			}
		}
	}
	for name := range next {
		if _, ok := e.tools[name]; !ok {
			if s.savedRefs[name]++; s.savedRefs[name] == 1 {
				added = append(added, mcpserver.ServerTool{Tool: mcp.NewToolWithRawSchema(name, "A tool saved with save_tool.", []byte(`{"type":"object"}`)),
					Handler: s.hostedHandler(name)})
			}
		}
	}
	e.tools = next
	e.names = make([]string, 0, len(next))
	for name := range next {
		e.names = append(e.names, name)
	}
	sort.Strings(e.names)
	if len(gone) > 0 {
		s.mcp.DeleteTools(gone...)
	}
	if len(added) > 0 {
		s.mcp.AddTools(added...)
	}
	if len(gone) == 0 && len(added) == 0 {
		s.mcp.SendNotificationToAllClients(mcp.MethodNotificationToolsListChanged, nil)
	}
}

// savedFilter (an mcp-go tool filter, for tools/list and tools/call) puts
// the caller's own saved tool in place of each placeholder, or drops it.
func (s *Server) savedFilter(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	s.hostedMu.Lock()
	defer s.hostedMu.Unlock()
	if len(s.savedRefs) == 0 {
		return tools
	}
	mine := map[string]mcp.Tool{}
	if e := s.saved[s.principal(ctx).Tenant]; e != nil {
		mine = e.tools
	}
	out := make([]mcp.Tool, 0, len(tools))
	for _, t := range tools {
		if s.savedRefs[t.Name] == 0 {
			out = append(out, t)
		} else if own, ok := mine[t.Name]; ok {
			out = append(out, own)
		}
	}
	return out
}
