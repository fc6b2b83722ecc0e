// Package hosted tests hosted tools end to end: a forge_tools module served
// by the MCP server over stdio (a JSON-RPC client on pipes), real sandboxes.
package hosted

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/server"
	"github.com/mcp-forge/forge/test/testenv"
)

func TestMain(m *testing.M) {
	if hooks.Reexec() {
		return
	}
	os.Exit(m.Run())
}

const v1 = testenv.AddTools

const v2 = v1 + `
@tool
def mul(a: int, b: int) -> int:
    return a * b
`

func newHost(t *testing.T, eng *engine.Engine, src string, reload time.Duration) (*hosted.Host, string, error) {
	t.Helper()
	cfg := testenv.HostedTools(t, src)
	cfg.ReloadInterval = profiles.Duration(reload)
	h, err := hosted.New(context.Background(), hosted.Options{Engine: eng, Config: cfg, StateDir: eng.Config().StateDir})
	if err == nil {
		t.Cleanup(func() { h.Close() })
	}
	return h, cfg.Path, err
}

// client speaks JSON-RPC lines to ServeStdio.
type client struct {
	t     *testing.T
	w     io.Writer
	lines chan map[string]any
	id    int
	notes []string
}

func (c *client) send(method string, params any) {
	c.id++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	fmt.Fprintf(c.w, "%s\n", b)
}

func (c *client) notify(method string) {
	fmt.Fprintf(c.w, `{"jsonrpc":"2.0","method":%q}`+"\n", method)
}

// reply waits for the response to the last request, keeping notifications.
func (c *client) reply() map[string]any {
	c.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case m := <-c.lines:
			if id, ok := m["id"].(float64); ok && int(id) == c.id {
				return m
			}
			if meth, ok := m["method"].(string); ok {
				c.notes = append(c.notes, meth)
			}
		case <-deadline:
			c.t.Fatalf("no reply to request %d within 60 s", c.id)
		}
	}
}

func (c *client) call(method string, params any) map[string]any {
	c.send(method, params)
	return c.reply()
}

// await waits for a notification method.
func (c *client) await(method string, d time.Duration) bool {
	for _, n := range c.notes {
		if n == method {
			return true
		}
	}
	deadline := time.After(d)
	for {
		select {
		case m := <-c.lines:
			if m["method"] == method {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func toolNames(r map[string]any) []string {
	var out []string
	res, _ := r["result"].(map[string]any)
	tools, _ := res["tools"].([]any)
	for _, t := range tools {
		out = append(out, t.(map[string]any)["name"].(string))
	}
	return out
}

func TestHostedOverStdio(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	h, path, err := newHost(t, eng, v1, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(eng, server.Options{})
	if err := srv.AttachHosted(h); err != nil {
		t.Fatal(err)
	}
	c := startClient(t, srv)
	names := toolNames(c.call("tools/list", map[string]any{}))
	if !contains(names, "add") || !contains(names, "execute_python") {
		t.Fatalf("tools/list = %v, want add beside execute_python", names)
	}

	r := c.call("tools/call", map[string]any{"name": "add", "arguments": map[string]any{"a": "two"}})
	e, _ := r["error"].(map[string]any)
	if e == nil || e["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(e["message"]), "/a") {
		t.Fatalf("invalid arguments: got %v, want error -32602 naming /a", r)
	}

	r = c.call("tools/call", map[string]any{"name": "add", "arguments": map[string]any{"a": 2, "b": 40}})
	res, _ := r["result"].(map[string]any)
	if res == nil || res["isError"] == true || fmt.Sprint(res["structuredContent"]) != "map[result:42]" {
		t.Fatalf("add: %v", r)
	}

	// A reload is announced, and the new tool is listed and callable.
	if err := os.WriteFile(path, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	if !c.await("notifications/tools/list_changed", 60*time.Second) {
		t.Fatal("no notifications/tools/list_changed within 60 s of changing the tools file")
	}
	if names := toolNames(c.call("tools/list", map[string]any{})); !contains(names, "mul") {
		t.Fatalf("after the reload tools/list = %v, want mul", names)
	}
	r = c.call("tools/call", map[string]any{"name": "mul", "arguments": map[string]any{"a": 6, "b": 7}})
	if res, _ := r["result"].(map[string]any); res == nil || fmt.Sprint(res["structuredContent"]) != "map[result:42]" {
		t.Fatalf("mul: %v", r)
	}

	// A broken file keeps the old table.
	if err := os.WriteFile(path, []byte(v2+"\nimport no_such_module_here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "ModuleNotFoundError") {
		t.Fatalf("Reload of a broken file = %v, want the ModuleNotFoundError", err)
	}
	r = c.call("tools/call", map[string]any{"name": "mul", "arguments": map[string]any{"a": 2, "b": 2}})
	if res, _ := r["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Fatalf("mul after a broken reload: %v", r)
	}
	if len(h.Tools()) != 2 {
		t.Fatalf("after a broken reload the table has %d tools, want the old 2", len(h.Tools()))
	}
}

func TestHostedNameCollision(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	h, _, err := newHost(t, eng, "from forge_tools import tool\n\n@tool(name=\"execute_python\")\ndef mine(code: str) -> str:\n    return code\n", 0)
	if err != nil {
		t.Fatal(err)
	}
	err = server.New(eng, server.Options{}).AttachHosted(h)
	if !errors.Is(err, hosted.ErrCollision) || !strings.Contains(err.Error(), "execute_python") || !strings.Contains(err.Error(), "tools.py") {
		t.Fatalf("AttachHosted = %v, want a collision naming execute_python and the tools file", err)
	}
	// Two tools of one name in the module: an error at start too.
	_, _, err = newHost(t, eng, "from forge_tools import tool\n\n@tool(name=\"x\")\ndef a() -> int:\n    return 1\n\n@tool(name=\"x\")\ndef b() -> int:\n    return 2\n", 0)
	if err == nil || !strings.Contains(err.Error(), "'x'") {
		t.Fatalf("two tools named x: err = %v", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestSaveToolOverStdio: a function defined in a session becomes a hosted
// tool through save_tool (hosted_tools.save_tool: allow), is announced,
// called, listed in forge://tools/hosted, and removed with remove_tool.
func TestSaveToolOverStdio(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) { c.HostedTools.SaveTool = "allow"; c.HostedTools.PoolSize = 0 })
	srv := server.New(eng, server.Options{Principal: engine.Principal{Tenant: "tenant:save-stdio"}})
	sv := hosted.NewSaver(hosted.SaverOptions{Engine: eng, Config: eng.Config().HostedTools, StateDir: eng.Config().StateDir})
	t.Cleanup(sv.Close)
	if err := srv.AttachSaver(context.Background(), sv); err != nil {
		t.Fatal(err)
	}
	for _, st := range sv.List(engine.Principal{Tenant: "tenant:save-stdio"}) { // a previous run's
		_ = sv.Remove(context.Background(), engine.Principal{Tenant: "tenant:save-stdio"}, st.Name)
	}
	c := startClient(t, srv)
	if names := toolNames(c.call("tools/list", map[string]any{})); !contains(names, "save_tool") || !contains(names, "remove_tool") {
		t.Fatalf("tools/list = %v, want save_tool and remove_tool", names)
	}
	r := c.call("tools/call", map[string]any{"name": "execute_python", "arguments": map[string]any{"session_id": "savestdio",
		"code": "def triple(x: int) -> int:\n    \"\"\"Triples x.\"\"\"\n    return 3 * x\n"}})
	if res, _ := r["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Fatalf("defining triple: %v", r)
	}
	t.Cleanup(func() {
		_ = eng.DestroySession(context.Background(), engine.Principal{Tenant: "tenant:save-stdio"}, "savestdio")
	})
	r = c.call("tools/call", map[string]any{"name": "save_tool", "arguments": map[string]any{"session_id": "savestdio", "function": "triple"}})
	if res, _ := r["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Fatalf("save_tool: %v", r)
	}
	if !c.await("notifications/tools/list_changed", 30*time.Second) {
		t.Fatal("no notifications/tools/list_changed after save_tool")
	}
	r = c.call("tools/call", map[string]any{"name": "triple", "arguments": map[string]any{"x": 14}})
	if res, _ := r["result"].(map[string]any); res == nil || fmt.Sprint(res["structuredContent"]) != "map[result:42]" {
		t.Fatalf("triple: %v", r)
	}
	r = c.call("resources/read", map[string]any{"uri": "forge://tools/hosted"})
	if !strings.Contains(fmt.Sprint(r), "triple") || !strings.Contains(fmt.Sprint(r), "sha256") {
		t.Fatalf("forge://tools/hosted: %v", r)
	}
	r = c.call("tools/call", map[string]any{"name": "remove_tool", "arguments": map[string]any{"name": "triple"}})
	if res, _ := r["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Fatalf("remove_tool: %v", r)
	}
	if names := toolNames(c.call("tools/list", map[string]any{})); contains(names, "triple") {
		t.Fatalf("after remove_tool tools/list = %v", names)
	}
}

// TestSaveToolApproval: with approve and a client that cannot be asked,
// save_tool is refused and says which setting decides.
func TestSaveToolApproval(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) { c.HostedTools.SaveTool = "approve" })
	srv := server.New(eng, server.Options{})
	sv := hosted.NewSaver(hosted.SaverOptions{Engine: eng, Config: eng.Config().HostedTools, StateDir: eng.Config().StateDir})
	t.Cleanup(sv.Close)
	if err := srv.AttachSaver(context.Background(), sv); err != nil {
		t.Fatal(err)
	}
	c := startClient(t, srv)
	r := c.call("tools/call", map[string]any{"name": "save_tool", "arguments": map[string]any{"session_id": "nosuch", "function": "f"}})
	res, _ := r["result"].(map[string]any)
	if res == nil || res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "hosted_tools.save_tool") {
		t.Fatalf("save_tool without approval: %v", r)
	}
}

// startClient serves srv over stdio pipes and initializes a client.
func startClient(t *testing.T, srv *server.Server) *client {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeStdio(ctx, inR, outW); outW.Close() }()
	t.Cleanup(func() { inW.Close(); cancel(); <-done })
	c := &client{t: t, w: inW, lines: make(chan map[string]any, 64)}
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				c.lines <- m
			}
		}
	}()

	c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "test", "version": "1"}})
	c.notify("notifications/initialized")
	return c
}
