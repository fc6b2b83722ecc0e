package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
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
	checkConfined(t, got, "python3 -m forge_tools")
}

// mcpSDKEnv is an environment holding the official MCP Python SDK, built
// from the real index and kept: its content hash does not change between
// runs, so a rerun on the same store is a cache hit (CI builds it once,
// about 30 packages).
const mcpSDKEnv = "t-mcp-sdk"

// A downstream server written with the official mcp SDK (its MCPServer,
// FastMCP's name since mcp 2), run in a sandbox on a custom environment
// that has the SDK, reached from code mode; its code cannot see host files
// or open sockets.
func TestSandboxedOfficialSDKServer(t *testing.T) {
	ctx := context.Background()
	pypi := func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.AllowedPackages = true, []string{"*"}
		if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
			b.CABundle = "/etc/ssl/certs/ca-certificates.crt" // this machine's index is behind a TLS-inspecting proxy
		}
	}
	builder := testenv.Engine(t, false, pypi)
	env, err := builder.BuildEnvironment(ctx, engine.LocalPrincipal, build.Request{Name: mcpSDKEnv, Packages: []string{"mcp==2.3.0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: cached %v, %d packages, %.0f ms", env.Image, env.Cached, len(env.Installed), env.Millis)
	if err := builder.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	secret := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	server := filepath.Join(dir, "sdkserver.py")
	src := `import importlib.metadata, os, socket
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("weather")

@mcp.tool()
def forecast(city: str) -> dict:
    return {"city": city, "sky": "clear", "uid": os.getuid(), "sdk": importlib.metadata.version("mcp"),
            "pid1": open("/proc/1/cmdline").read().split("\0")[0]}

@mcp.tool()
def peek(path: str) -> str:
    try:
        return open(path).read()
    except OSError as e:
        return type(e).__name__

@mcp.tool()
def dial() -> str:
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2)
        return "connected"
    except OSError as e:
        return type(e).__name__

if __name__ == "__main__":
    mcp.run()
`
	if err := os.WriteFile(server, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		pypi(c)
		c.MCPTools = map[string]profiles.MCPToolServer{"wx": {Sandbox: true, Image: mcpSDKEnv, Mount: server, Command: "python3",
			Args: []string{"/run/forge/sdkserver.py"}, Timeout: profiles.Duration(60e9), MaxResponseSize: 1 << 20}}
	})
	var names []string
	for _, tl := range eng.ToolCatalog() {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "forecast") || !strings.Contains(got, "peek") || !strings.Contains(got, "dial") {
		t.Fatalf("catalog = %s, want the SDK server's tools", got)
	}
	res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal,
		Code:     fmt.Sprintf("[forecast(city='Oslo'), peek(path=%q), dial()]", secret),
		MCPTools: []string{"forecast", "peek", "dial"}})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(res.Result)
	t.Logf("from code mode: %s", got)
	if !res.Success || !strings.Contains(got, "Oslo") || !strings.Contains(got, "clear") || !strings.Contains(got, "sdk:2.3.0") {
		t.Fatalf("result %v, error %+v, want the forecast from the SDK 2.3.0 server", got, res.Error)
	}
	checkConfined(t, got, "python3 /run/forge/sdkserver.py")
}

// checkConfined checks what a sandboxed server's tools reported: no host
// file, no socket, the sandbox user, and not pid 1 (the agent is).
func checkConfined(t *testing.T, got, server string) {
	t.Helper()
	if strings.Contains(got, "host secret") || !strings.Contains(got, "FileNotFoundError") {
		t.Errorf("the sandboxed server read a host file: %v", got)
	}
	if strings.Contains(got, "connected") || !strings.Contains(got, "OSError") {
		t.Errorf("the sandboxed server opened a socket: %v", got)
	}
	if !strings.Contains(got, "uid:1000") || strings.Contains(got, "pid1:"+server) {
		t.Errorf("the server does not run as the sandbox user beside the agent: %v", got)
	}
}
