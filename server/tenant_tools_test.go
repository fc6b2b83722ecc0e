package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
)

func listNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	res, err := c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// TestToolsListByScope: tools/list shows a token the tools its scopes
// allow; a call of a hidden tool still gets the error naming the scope.
func TestToolsListByScope(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{})
	for _, tc := range []struct {
		tenant    string
		want, not []string
	}{
		{"alice", []string{toolExecute, toolListSessions, toolForkSession}, []string{toolBuild}},
		{"reader", nil, []string{toolExecute, toolListSessions, toolForkSession, toolBuild}},
		{"ops", []string{toolExecute, toolListSessions, toolBuild}, nil},
	} {
		names := listNames(t, mcpClient(t, sv, tc.tenant))
		for _, n := range tc.want {
			if !slices.Contains(names, n) {
				t.Errorf("%s: tools/list = %v, want %s in it", tc.tenant, names, n)
			}
		}
		for _, n := range tc.not {
			if slices.Contains(names, n) {
				t.Errorf("%s: tools/list = %v, want no %s (scope %s)", tc.tenant, names, n, toolScope(n))
			}
		}
	}
	res, err := call(t, mcpClient(t, sv, "reader"), map[string]any{"code": "1"})
	if err != nil || !res.IsError || !strings.Contains(text(res), "lacks scope") {
		t.Errorf("reader calling the unlisted execute_python: %v %v, want the scope error", err, res)
	}
}

// saveEngine is the shared engine with save_tool allowed (the server reads
// the policy from Config).
type saveEngine struct {
	*engine.Engine
	cfg *profiles.Config
}

func (e saveEngine) Config() *profiles.Config { return e.cfg }

// TestSavedToolsPerTenant is an attack test: tenant erin lists, calls,
// reads and removes tenant dave's saved tool over HTTP with tokens. Each
// saved tool is its owner's: to erin it answers like an unknown tool, and
// erin may save one of the same name that is hers.
func TestSavedToolsPerTenant(t *testing.T) {
	eng := realEngine(t)
	cfg := *eng.Config()
	cfg.HostedTools.SaveTool, cfg.HostedTools.PoolSize = "allow", 0
	var b [4]byte
	_, _ = rand.Read(b[:])
	tool := "triple_" + hex.EncodeToString(b[:])
	var srv *Server
	saver := hosted.NewSaver(hosted.SaverOptions{Engine: eng, Config: cfg.HostedTools, StateDir: cfg.StateDir,
		// What forge serve passed before saved tools were per principal
		// (AttachSaver replaces it now).
		Attach: func(_ engine.Principal, h *hosted.Host) error { return srv.AttachHosted(h) }})
	t.Cleanup(saver.Close)
	sv := serveServiceOn(t, saveEngine{eng, &cfg}, profiles.TenantsConfig{}, func(s *Server) {
		srv = s
		if err := s.AttachSaver(t.Context(), saver); err != nil {
			t.Fatal(err)
		}
	})
	for _, tenant := range []string{"tenant:dave", "tenant:erin"} { // a previous run's
		p := engine.Principal{Tenant: tenant}
		for _, st := range saver.List(p) {
			_ = saver.Remove(context.Background(), p, st.Name)
		}
	}
	dave, erin := mcpClient(t, sv, "dave"), mcpClient(t, sv, "erin")
	define := func(c *client.Client, tenant, body string) string {
		t.Helper()
		res := callTool(t, c, toolExecute, map[string]any{"backend": "jupyter",
			"code": fmt.Sprintf("def %s(x: int) -> int:\n    return %s\n", tool, body)})
		sid, _ := structured(t, res)["session_id"].(string)
		if res.IsError || sid == "" {
			t.Fatalf("%s defining %s: %s", tenant, tool, text(res))
		}
		t.Cleanup(func() { sv.do(t, "DELETE", "/api/v1/sandboxes/"+sid, tenant, nil) })
		if res := callTool(t, c, toolSaveTool, map[string]any{"session_id": sid, "function": tool}); res.IsError {
			t.Fatalf("%s save_tool: %s", tenant, text(res))
		}
		return sid
	}
	define(dave, "dave", "3 * x")
	t.Cleanup(func() { _ = saver.Remove(context.Background(), engine.Principal{Tenant: "tenant:dave"}, tool) })
	if names := listNames(t, dave); !slices.Contains(names, tool) {
		t.Fatalf("dave's tools/list = %v, want his %s", names, tool)
	}
	if res := callTool(t, dave, tool, map[string]any{"x": 14}); res.IsError || fmt.Sprint(structured(t, res)["result"]) != "42" {
		t.Fatalf("dave calling %s: %s", tool, text(res))
	}

	// erin: not listed, not callable (exactly as a tool that does not
	// exist), not in her forge://tools/hosted, not removable.
	if names := listNames(t, erin); slices.Contains(names, tool) {
		t.Errorf("erin's tools/list shows dave's %s: %v", tool, names)
	}
	callErr := func(name string) string {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = name, map[string]any{"x": 14}
		res, err := erin.CallTool(t.Context(), req)
		if err == nil {
			return "a result: " + text(res)
		}
		return strings.ReplaceAll(err.Error(), name, "NAME")
	}
	if got, unknown := callErr(tool), callErr("no_such_"+tool); got != unknown {
		t.Errorf("erin calling dave's %s: %q, want what an unknown tool gets: %q", tool, got, unknown)
	}
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = resourceHostedTools
	if res, err := erin.ReadResource(t.Context(), rr); err != nil || strings.Contains(fmt.Sprint(res.Contents), tool) {
		t.Errorf("erin's forge://tools/hosted: %v %v, want no %s", res, err, tool)
	}
	if res := callTool(t, erin, toolRemoveTool, map[string]any{"name": tool}); !res.IsError {
		t.Errorf("erin removed dave's %s: %s", tool, text(res))
	}
	if names := listNames(t, dave); !slices.Contains(names, tool) {
		t.Errorf("after erin's remove_tool dave's tools/list = %v, want his %s", names, tool)
	}

	// erin's own tool of the same name is hers; dave's stays his.
	define(erin, "erin", "x + 1")
	t.Cleanup(func() { _ = saver.Remove(context.Background(), engine.Principal{Tenant: "tenant:erin"}, tool) })
	for _, tc := range []struct {
		c    *client.Client
		who  string
		want string
	}{{erin, "erin", "15"}, {dave, "dave", "42"}} {
		if res := callTool(t, tc.c, tool, map[string]any{"x": 14}); res.IsError || fmt.Sprint(structured(t, res)["result"]) != tc.want {
			t.Errorf("%s calling %s: %s, want %s", tc.who, tool, text(res), tc.want)
		}
	}

	// After a restart (a new server and saver on the same state dir) each
	// tenant's saved tools are served again from its first request.
	saver2 := hosted.NewSaver(hosted.SaverOptions{Engine: eng, Config: cfg.HostedTools, StateDir: cfg.StateDir})
	t.Cleanup(saver2.Close)
	sv2 := serveServiceOn(t, saveEngine{eng, &cfg}, profiles.TenantsConfig{}, func(s *Server) {
		if err := s.AttachSaver(t.Context(), saver2); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct{ who, want string }{{"dave", "42"}, {"erin", "15"}} {
		c := mcpClient(t, sv2, tc.who)
		if names := listNames(t, c); !slices.Contains(names, tool) {
			t.Errorf("after a restart %s's tools/list = %v, want %s", tc.who, names, tool)
		}
		if res := callTool(t, c, tool, map[string]any{"x": 14}); res.IsError || fmt.Sprint(structured(t, res)["result"]) != tc.want {
			t.Errorf("after a restart %s calling %s: %s, want %s", tc.who, tool, text(res), tc.want)
		}
	}
	saver2.Close()

	if res := callTool(t, dave, toolRemoveTool, map[string]any{"name": tool}); res.IsError {
		t.Fatalf("dave removing his %s: %s", tool, text(res))
	}
	if names := listNames(t, dave); slices.Contains(names, tool) {
		t.Errorf("after remove_tool dave's tools/list = %v", names)
	}
	if res := callTool(t, erin, tool, map[string]any{"x": 1}); res.IsError || fmt.Sprint(structured(t, res)["result"]) != "2" {
		t.Errorf("erin's %s after dave removed his: %s", tool, text(res))
	}
}
