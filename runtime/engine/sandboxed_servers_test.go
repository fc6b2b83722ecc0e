package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/internal/testenv"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
)

// A downstream MCP server written with forge_tools, run inside a sandbox
// (mcp_tools.NAME.sandbox), reached from code mode like a host server; its
// code cannot see host files or open sockets.
func TestSandboxedDownstreamServer(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	server := filepath.Join(dir, "weather.py")
	src := `import os, socket
from forge_tools import tool

@tool
def forecast(city: str) -> dict:
    return {"city": city, "sky": "clear", "uid": os.getuid(), "pid1": open("/proc/1/cmdline").read().split("\0")[0]}

@tool
def peek(path: str) -> str:
    try:
        return open(path).read()
    except OSError as e:
        return type(e).__name__

@tool
def dial() -> str:
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2)
        return "connected"
    except OSError as e:
        return type(e).__name__
`
	if err := os.WriteFile(server, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.MCPTools = map[string]profiles.MCPToolServer{"wx": {Sandbox: true, Mount: server, Command: "python3",
			Args: []string{"-m", "forge_tools", "serve", "/run/forge/weather.py"}, Timeout: profiles.Duration(30e9), MaxResponseSize: 1 << 20}}
	})
	var names []string
	for _, tl := range eng.ToolCatalog() {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "forecast") || !strings.Contains(got, "peek") {
		t.Fatalf("catalog = %s, want the sandboxed server's tools", got)
	}
	res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal,
		Code:     fmt.Sprintf("[forecast(city='Oslo'), peek(path=%q), dial()]", secret),
		MCPTools: []string{"forecast", "peek", "dial"}})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(res.Result)
	t.Logf("from code mode: %s", got)
	if !res.Success || !strings.Contains(got, "Oslo") || !strings.Contains(got, "clear") {
		t.Fatalf("result %v, error %+v", got, res.Error)
	}
	if strings.Contains(got, "host secret") || !strings.Contains(got, "FileNotFoundError") {
		t.Errorf("the sandboxed server read a host file: %v", got)
	}
	if strings.Contains(got, "connected") || !strings.Contains(got, "OSError") {
		t.Errorf("the sandboxed server opened a socket: %v", got)
	}
	if !strings.Contains(got, "uid:1000") || strings.Contains(got, "pid1:python3 -m forge_tools") {
		t.Errorf("the server does not run as the sandbox user beside the agent: %v", got)
	}
}
