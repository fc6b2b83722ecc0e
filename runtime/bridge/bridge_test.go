package bridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/bridge"
)

func testServers(t testing.TB, cfg bridge.ServerConfig) map[string]bridge.ServerConfig {
	cfg.Command = mcpServer(t)
	if cfg.Env == nil {
		cfg.Env = map[string]string{"FORGE_TEST_SECRET": "hunter2"}
	}
	return map[string]bridge.ServerConfig{"test": cfg}
}

func TestCalls(t *testing.T) {
	b := newBridge(t, testServers(t, bridge.ServerConfig{}), nil)
	g := grant(t, b, "add", "echo", "json_text", "fail", "env_probe")
	out := python(t, g, `
import mcp_tools
print(add(2, 3)["sum"], mcp_tools.add(a=40, b=2)["sum"])
print(repr(echo("hi")), repr(echo(text="a\nb\"c", suffix="!")), repr(echo("x", suffix=None)))
print(json_text()["items"])
try:
    fail("boom: it \"broke\"")
except mcp_tools.ToolError as e:
    print("ToolError", e, e.tool, e.kind)
print(env_probe())
try:
    add(1)
except TypeError as e:
    print("TypeError", e)
`)
	want := strings.Join([]string{
		"5 42",
		`'hi' 'a\nb"c!' 'x'`,
		"[1, 2, 3]",
		`ToolError boom: it "broke" fail tool_error`,
		"{'set': True}",
		"TypeError missing a required argument: 'b'",
	}, "\n")
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestCatalog(t *testing.T) {
	b := newBridge(t, testServers(t, bridge.ServerConfig{}), nil)
	var add *bridge.Tool
	for _, tool := range b.Catalog() {
		if tool.Name == "add" {
			add = &tool
		}
	}
	if add == nil {
		t.Fatalf("add not in catalog %v", b.Catalog())
	}
	var schema struct {
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(add.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	got := []string{add.Server, add.Python, add.Module, strings.Join(schema.Required, ",")}
	if diff := cmp.Diff([]string{"test", "add", "test", "a,b"}, got); diff != "" {
		t.Errorf("add (-want +got):\n%s", diff)
	}
}

func TestGrantUnknownTool(t *testing.T) {
	b := newBridge(t, testServers(t, bridge.ServerConfig{}), nil)
	_, err := b.Grant(context.Background(), hostSandbox{"sb", t.TempDir()}, []string{"add", "nope"})
	if !errors.Is(err, bridge.ErrUnknownTool) || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "echo") {
		t.Errorf("got %v, want ErrUnknownTool naming nope and listing echo", err)
	}
}

// rawCall sends one raw line on the grant's socket and returns the reply
// and whether the bridge closed the connection afterwards.
func rawCall(t *testing.T, g *bridge.Grant, line string) (reply map[string]any, closed bool) {
	t.Helper()
	c, err := net.Dial("unix", g.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(line)); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	l, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading reply to %.60q: %v", line, err)
	}
	if err := json.Unmarshal(l, &reply); err != nil {
		t.Fatalf("reply %q: %v", l, err)
	}
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = r.ReadByte()
	return reply, err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func errKind(reply map[string]any) string {
	if e, ok := reply["error"].(map[string]any); ok {
		return e["kind"].(string)
	}
	return ""
}

func TestUngrantedToolIsRefusedAndAudited(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "audit.log")
	al, err := audit.Open(logPath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := newBridge(t, testServers(t, bridge.ServerConfig{}), al)
	g := grant(t, b, "add")

	reply, closed := rawCall(t, g, `{"tool":"env_probe","arguments":{}}`+"\n")
	if errKind(reply) != "not_granted" || !closed {
		t.Errorf("got %v (closed %v), want a not_granted error and a closed connection", reply, closed)
	}
	// From Python, the same is a ToolNotGranted (a PermissionError).
	out := python(t, g, `
import json, socket, mcp_tools
s = socket.socket(socket.AF_UNIX); s.connect(`+fmt.Sprintf("%q", g.SocketPath())+`)
s.sendall(b'{"tool":"echo","arguments":{"text":"x"}}\n')
print(json.loads(s.makefile().readline())["error"]["kind"])
print(add(1, 1)["sum"])
`)
	if out != "not_granted\n2" {
		t.Errorf("python: got %q", out)
	}
	if err := al.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var violations, calls []audit.Event
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev audit.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		switch ev.Event {
		case audit.EventSecurityViolation:
			violations = append(violations, ev)
		case audit.EventToolCall:
			calls = append(calls, ev)
		}
	}
	if len(violations) != 2 || violations[0].Tool != "env_probe" || violations[1].Tool != "echo" ||
		violations[0].Severity != audit.SeverityCritical || violations[0].SandboxID != "sb-test" {
		t.Errorf("violations: %+v", violations)
	}
	if len(calls) != 1 || calls[0].Tool != "add" || calls[0].Server != "test" {
		t.Errorf("tool calls: %+v", calls)
	}
	if strings.Contains(string(data), `"a"`) || strings.Contains(string(data), "text") {
		t.Errorf("audit log holds arguments:\n%s", data)
	}
}

func TestMalformedRequests(t *testing.T) {
	servers := testServers(t, bridge.ServerConfig{})
	b, err := bridge.New(context.Background(), bridge.Options{Servers: servers, MaxRequestSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dir := t.TempDir()
	g, err := b.Grant(context.Background(), hostSandbox{"sb", dir}, []string{"echo"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	tests := []struct {
		name, line, kind string
	}{
		{"garbage", "not json\n", "bad_request"},
		{"array", "[1,2]\n", "bad_request"},
		{"tool not a string", `{"tool":1}` + "\n", "bad_request"},
		{"no tool", `{"arguments":{}}` + "\n", "bad_request"},
		{"unknown field", `{"tool":"echo","arguments":{},"x":1}` + "\n", "bad_request"},
		{"arguments not an object", `{"tool":"echo","arguments":[1]}` + "\n", "bad_request"},
		{"two values", `{"tool":"echo"} {"tool":"echo"}` + "\n", "bad_request"},
		{"too long", `{"tool":"echo","arguments":{"text":"` + strings.Repeat("x", 2000) + `"}}` + "\n", "limit"},
		{"invalid utf-8", "{\"tool\":\"ech\xff\"}\n", "not_granted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, closed := rawCall(t, g, tt.line)
			if errKind(reply) != tt.kind || !closed {
				t.Errorf("got %v (closed %v), want kind %s and a closed connection", reply, closed, tt.kind)
			}
		})
	}
	// A connection may carry several good requests; the bridge still works.
	reply, closed := rawCall(t, g, `{"tool":"echo","arguments":{"text":"ok"}}`+"\n")
	if reply["result"] != "ok" || closed {
		t.Errorf("got %v (closed %v), want ok on an open connection", reply, closed)
	}
}

func TestLimits(t *testing.T) {
	servers := testServers(t, bridge.ServerConfig{MaxCalls: 3, Timeout: 300 * time.Millisecond, MaxResponseSize: 1000})
	b := newBridge(t, servers, nil)
	g := grant(t, b, "add", "slow", "big")
	out := python(t, g, `
import mcp_tools
for i in range(3):
    try:
        print(add(i, 0)["sum"])
    except mcp_tools.ToolLimitError as e:
        print("limit", e)
try:
    add(1, 1)
except mcp_tools.ToolLimitError as e:
    print("limit:", e)
`)
	want := "0\n1\n2\nlimit: tool call limit reached: at most 3 calls to MCP server \"test\" per execution (mcp_tools.test.max_calls)"
	if out != want {
		t.Errorf("max calls: got\n%s\nwant\n%s", out, want)
	}
	g.Reset()
	out = python(t, g, `
import mcp_tools
print(len(big(100)))
try:
    big(5000)
except mcp_tools.ToolLimitError as e:
    print(e)
try:
    slow(3000)
except TimeoutError as e:
    print(type(e).__name__, e)
`)
	want = "100\n" +
		`the response of tool "big" is 5002 bytes, over the limit of 1000 bytes (mcp_tools.test.max_response_size)` + "\n" +
		`ToolTimeout tool "slow" timed out after 300ms (mcp_tools.test.timeout)`
	if out != want {
		t.Errorf("limits: got\n%s\nwant\n%s", out, want)
	}
}

func TestDuplicateToolNames(t *testing.T) {
	srv := mcpServer(t)
	_, err := bridge.New(context.Background(), bridge.Options{Servers: map[string]bridge.ServerConfig{
		"alpha": {Command: srv}, "beta": {Command: srv},
	}})
	if !errors.Is(err, bridge.ErrDuplicateTool) || !strings.Contains(err.Error(), `"alpha" and "beta"`) || !strings.Contains(err.Error(), `"add"`) {
		t.Fatalf("got %v, want ErrDuplicateTool naming alpha, beta and add", err)
	}
	b := newBridge(t, map[string]bridge.ServerConfig{"alpha": {Command: srv}, "beta": {Command: srv, Prefix: "gh"}}, nil)
	g := grant(t, b, "add", "gh_add")
	out := python(t, g, `
import mcp_tools
from mcp_tools.gh import add as gh_add2
print(add(1, 2)["sum"], gh_add(3, 4)["sum"], gh_add2(5, 6)["sum"], mcp_tools.alpha.add(7, 8)["sum"])
`)
	if out != "3 7 11 15" {
		t.Errorf("got %q", out)
	}
}

func TestRestartAfterCrash(t *testing.T) {
	servers := testServers(t, bridge.ServerConfig{Args: []string{"-crash-after", "1"}})
	b := newBridge(t, servers, nil)
	g := grant(t, b, "crash", "pid")
	out := python(t, g, `
import mcp_tools
before = pid()["pid"]
try:
    crash()
except mcp_tools.ToolError as e:
    print(e.kind)
print(pid()["pid"] != before)
`)
	if out != "unavailable\nTrue" {
		t.Errorf("got %q", out)
	}
}

func TestGrantCloseRemovesSocket(t *testing.T) {
	b := newBridge(t, testServers(t, bridge.ServerConfig{}), nil)
	dir := t.TempDir()
	g, err := b.Grant(context.Background(), hostSandbox{"sb", dir}, []string{"add"})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(g.SocketPath())
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	// Leave a connection open: Close must not wait for it.
	c, err := net.Dial("unix", g.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(g.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket still there: %v", err)
	}
	// A new grant on the same directory works (sessions re-grant).
	g2, err := b.Grant(context.Background(), hostSandbox{"sb", dir}, []string{"echo"})
	if err != nil {
		t.Fatal(err)
	}
	g2.Close()
}

func TestMemoryServer(t *testing.T) {
	mem := memoryServer(t)
	servers := testServers(t, bridge.ServerConfig{})
	servers["memory"] = mem
	b := newBridge(t, servers, nil)
	g := grant(t, b, "create_entities", "create_relations", "read_graph", "add")
	out := python(t, g, `
create_entities(entities=[
    {"name": "alice", "entityType": "person", "observations": ["likes tea", "age 31"]},
    {"name": "bob", "entityType": "person", "observations": ["age 29"]},
    {"name": "forge", "entityType": "project", "observations": []},
])
create_relations(relations=[{"from": "alice", "to": "forge", "relationType": "works_on"}])
g = read_graph()
people = sorted(e["name"] for e in g["entities"] if e["entityType"] == "person")
ages = [int(o.split()[1]) for e in g["entities"] for o in e["observations"] if o.startswith("age ")]
print(people, add(*ages)["sum"], [(r["from"], r["to"]) for r in g["relations"]])
`)
	if want := "['alice', 'bob'] 60 [('alice', 'forge')]"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestHelpAndSearch(t *testing.T) {
	b := newBridge(t, testServers(t, bridge.ServerConfig{}), nil)
	g := grant(t, b, "add", "echo", "slow", "big")
	out := python(t, g, `
import io, contextlib, mcp_tools
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    help(add)
h = buf.getvalue()
print("add(a: int, b: int)" in h, "Add two integers" in h, "first addend" in h)
print(mcp_tools.search("echo text")[0][0], [n for n, _ in mcp_tools.search("sleep")])
print(sorted(mcp_tools.tools()))
`)
	want := "True True True\necho ['slow']\n['add', 'big', 'echo', 'slow']"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

func TestViolationFloodIsCapped(t *testing.T) {
	rec := &recorder{}
	b := newBridge(t, testServers(t, bridge.ServerConfig{}), rec)
	g := grant(t, b, "add")
	for range 50 {
		if reply, _ := rawCall(t, g, `{"tool":"echo"}`+"\n"); errKind(reply) != "not_granted" {
			t.Fatalf("got %v, want not_granted", reply)
		}
	}
	evs := rec.find(audit.EventSecurityViolation)
	if len(evs) != 20 || !strings.Contains(evs[19].Reason, "further ones are refused without audit") {
		t.Errorf("got %d violation events (last %+v), want 20 ending with a summary", len(evs), evs[len(evs)-1])
	}
}
