package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
)

func toolsEngine(t *testing.T, pool bool) *engine.Engine {
	t.Helper()
	bin := testenv.MCPServer(t)
	return testenv.Engine(t, false, func(c *profiles.Config) {
		srv := profiles.MCPToolServer{Command: bin, Env: map[string]string{"FORGE_TEST_SECRET": "hunter2"}}
		c.MCPTools = map[string]profiles.MCPToolServer{"test": srv}
		c.Pool.Enabled, c.Pool.Size = pool, 1
	})
}

func TestCodeModeStateless(t *testing.T) {
	eng := toolsEngine(t, true)
	ctx := context.Background()
	res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: `import os, mcp_tools
r = add(a=2, b=3)["sum"]
try:
    fail(message="boom")
    err = None
except Exception as e:
    err = str(e)
[r, err, env_probe(), 'FORGE_TEST_SECRET' in os.environ, [n for n, _ in mcp_tools.search("add")]]`,
		MCPTools: []string{"add", "fail", "env_probe"}})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(res.Result)
	if !res.Success || !strings.HasPrefix(got, "[5 boom map[set:true] false [add") {
		t.Errorf("result %v, error %+v", got, res.Error)
	}
	// A tool not granted is not there, and calling it through the socket is refused.
	res, err = eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: `import socket, json
s = socket.socket(socket.AF_UNIX)
s.connect('/run/forge/bridge.sock')
s.sendall(json.dumps({"tool": "echo", "arguments": {"text": "x"}}).encode() + b"\n")
[('echo' in globals()), s.makefile().readline()]`, MCPTools: []string{"add"}})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := res.Result.([]any)
	if len(v) != 2 || v[0] != false || !strings.Contains(fmt.Sprint(v[1]), "not granted") {
		t.Errorf("ungranted call: %v error %+v", res.Result, res.Error)
	}
	// Unknown tool names are a bad request naming what exists.
	if _, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: "1", MCPTools: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), "add") {
		t.Errorf("unknown tool: %v", err)
	}
	checkZygoteChildren(t, eng)
}

// checkZygoteChildren fails a test run in zygote mode (the default) if a
// sandbox was started as a container instead of a zygote child.
func checkZygoteChildren(t *testing.T, eng *engine.Engine) {
	t.Helper()
	if testenv.Mode() != sandbox.ModeZygote {
		return
	}
	if st := eng.Runtime().ZygoteStats(); st.Forks == 0 || st.Fallbacks != 0 {
		t.Errorf("zygote stats %+v: want code mode's sandboxes forked, none started as containers", st)
	}
}

func TestCodeModeSession(t *testing.T) {
	eng := toolsEngine(t, false)
	ctx := context.Background()
	for i, code := range []string{"x = add(a=1, b=1)[\"sum\"]", "add(a=x, b=40)[\"sum\"]"} {
		res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: code, SessionID: "tools", MCPTools: []string{"add"}})
		if err != nil || !res.Success {
			t.Fatalf("call %d: %v %+v", i, err, res)
		}
		if i == 1 && fmt.Sprint(res.Result) != "42" {
			t.Errorf("add across session calls = %v", res.Result)
		}
	}
	checkZygoteChildren(t, eng)
}
