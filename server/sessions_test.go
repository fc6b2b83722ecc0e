package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/runtime/engine"
)

func callTool(t *testing.T, c *client.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(t.Context(), req)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

func TestSessionToolsReal(t *testing.T) {
	eng := realEngine(t)
	c := connect(t, New(eng, Options{Version: "test"}))
	id := "srv-" + strings.ReplaceAll(t.Name(), "/", "-")
	t.Cleanup(func() { eng.DestroySession(context.Background(), engine.LocalPrincipal, id) })

	res := callTool(t, c, toolExecute, map[string]any{"code": "x = 41\nitems = [1, 2, 3]", "session_id": id})
	if res.IsError {
		t.Fatalf("first call: %s", text(res))
	}
	res = callTool(t, c, toolExecute, map[string]any{"code": "x + 1", "session_id": id})
	if m := structured(t, res); fmt.Sprint(m["result"]) != "42" || m["session_id"] != id {
		t.Errorf("x + 1 in the session: %v", m)
	}
	res = callTool(t, c, toolDocumentState, map[string]any{"session_id": id, "variables": map[string]any{"x": "the answer minus one"}, "note": "halfway"})
	if res.IsError || !strings.Contains(text(res), "the answer minus one") || !strings.Contains(text(res), `"items"`) {
		t.Errorf("document_state: %s", text(res))
	}
	rr, err := c.ReadResource(t.Context(), mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: "forge://sessions/" + id + "/state"}})
	if err != nil || !strings.Contains(rr.Contents[0].(mcp.TextResourceContents).Text, "halfway") {
		t.Errorf("state resource: %v %+v", err, rr)
	}
	rr, err = c.ReadResource(t.Context(), mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: "forge://sessions/" + id + "/variables"}})
	if err != nil || !strings.Contains(rr.Contents[0].(mcp.TextResourceContents).Text, `"list"`) {
		t.Errorf("variables resource: %v %+v", err, rr)
	}
	res = callTool(t, c, toolWriteFile, map[string]any{"session_id": id, "path": "in/data.csv", "content": "a,b\n1,2\n"})
	if res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	res = callTool(t, c, toolExecute, map[string]any{"code": "import csv\nlist(csv.reader(open('in/data.csv')))", "session_id": id})
	if m := structured(t, res); fmt.Sprint(m["result"]) != "[[a b] [1 2]]" {
		t.Errorf("reading the written file: %v", m["result"])
	}
	png := "\x89PNG\r\n\x1a\n0000"
	res = callTool(t, c, toolWriteFile, map[string]any{"session_id": id, "path": "p.png", "content": base64.StdEncoding.EncodeToString([]byte(png)), "encoding": "base64"})
	res = callTool(t, c, toolReadFile, map[string]any{"session_id": id, "path": "p.png"})
	if len(res.Content) != 2 || res.Content[1].(mcp.ImageContent).MIMEType != "image/png" {
		t.Errorf("read_file of a PNG: %+v", res.Content)
	}
	callTool(t, c, toolExecute, map[string]any{"code": "import os\nos.symlink('/etc/passwd', 'escape')", "session_id": id})
	if res = callTool(t, c, toolReadFile, map[string]any{"session_id": id, "path": "escape"}); !res.IsError || !strings.Contains(text(res), "outside /workspace") {
		t.Errorf("symlink escape: isError %v %s", res.IsError, text(res))
	}
	if _, err := c.CallTool(t.Context(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: toolReadFile, Arguments: map[string]any{"session_id": "../x", "path": "a"}}}); err == nil {
		t.Error("a malformed session id must be a protocol error")
	}
	res = callTool(t, c, toolListSessions, map[string]any{})
	if !strings.Contains(text(res), id) {
		t.Errorf("list_sessions: %s", text(res))
	}
	res = callTool(t, c, toolDestroySession, map[string]any{"session_id": id})
	if res.IsError {
		t.Errorf("destroy_session: %s", text(res))
	}
	if res = callTool(t, c, toolListFiles, map[string]any{"session_id": id}); !res.IsError || !strings.Contains(text(res), "not found") {
		t.Errorf("after destroy: %s", text(res))
	}
	// backend jupyter without an id creates a session and returns its id.
	res = callTool(t, c, toolExecute, map[string]any{"code": "y = 1", "backend": "jupyter"})
	sid, _ := structured(t, res)["session_id"].(string)
	if !strings.HasPrefix(sid, "s-") {
		t.Errorf("jupyter backend: session_id %v", sid)
	} else {
		eng.DestroySession(context.Background(), engine.LocalPrincipal, sid)
	}
}

func TestCodeModeReal(t *testing.T) {
	eng := realEngine(t)
	c := connect(t, New(eng, Options{Version: "test"}))
	rr, err := c.ReadResource(t.Context(), mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: uriToolsAvailable}})
	if err != nil || !strings.Contains(rr.Contents[0].(mcp.TextResourceContents).Text, `"add"`) {
		t.Fatalf("tools/available: %v %+v", err, rr)
	}
	res := callTool(t, c, toolExecute, map[string]any{"code": "add(a=40, b=2)['sum']", "mcp_tools": []string{"add"}})
	if m := structured(t, res); fmt.Sprint(m["result"]) != "42" {
		t.Errorf("code mode: %s", text(res))
	}
	res = callTool(t, c, toolExecute, map[string]any{"code": "1", "mcp_tools": []string{"nope"}})
	if !res.IsError || !strings.Contains(text(res), "add") {
		t.Errorf("unknown tool: %s", text(res))
	}
}
