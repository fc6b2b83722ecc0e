package bridge_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mcp-forge/forge/runtime/bridge"
)

// hostile is text crafted to escape string literals, docstrings and
// comments of generated Python, or to run code if it were spliced in raw.
const hostile = "x\"\"\" + __import__('os').system('echo PWNED') + \"\"\"\n''' \\ \\\" \x00 # \r\n" +
	"def evil(): pass\n\u2028 {\"tool\": \"env_probe\"} \U0001F600 \\N{BULLET} {0} %s"

func TestPreludeHostileSchemas(t *testing.T) {
	schema, _ := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			hostile:      map[string]any{"type": "string", "description": hostile},
			"class":      map[string]any{"type": []string{"integer", "null"}, "description": hostile},
			"x-y":        map[string]any{"type": "boolean"},
			"x_y":        map[string]any{"type": "array"},
			"9lives":     map[string]any{"type": "number", "enum": []any{1, hostile}},
			"kw":         "not an object",
			"arguments":  map[string]any{"type": "object"},
			"__import__": map[string]any{},
		},
		"required": []string{"class"},
	})
	tools := []bridge.Tool{
		{Name: hostile, Server: hostile, Description: hostile, InputSchema: schema},
		{Name: "print", Server: "s", Module: "s", Description: "shadows a builtin"},
		{Name: "ValueError", Server: "s", Module: "s"},
		{Name: "read-file", Server: "s", Module: "s", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
		{Name: "read_file", Server: "s", Module: "s", InputSchema: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)},
		{Name: "__init__", Server: "s", Module: "s"},
	}
	prelude, err := bridge.Prelude(tools, "/nonexistent/"+hostile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(prelude, "PWNED") || strings.Contains(prelude, "evil") {
		t.Fatal("hostile text appears in the prelude's source")
	}
	out := runPython(t, prelude, `
import inspect, io, contextlib, mcp_tools, sys
names = mcp_tools.tools()
print(names[1:])
fn = getattr(mcp_tools, names[0])
print(names[0].isidentifier(), fn.__doc__.startswith(`+"'x\"\"\" + __import__'"+`))
print(inspect.signature(fn))
print(print is __builtins__.print if hasattr(__builtins__, "print") else print is sys.modules["builtins"].print)
print(inspect.signature(read_file), inspect.signature(read_file_2))
print(mcp_tools.s.print is print_, mcp_tools.s.read_file_2 is read_file_2, mcp_tools.s.__init___ is __init___)
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    help(fn)
print("\\N{BULLET}" in buf.getvalue(), "def evil(): pass" in buf.getvalue())
try:
    fn(1)
except mcp_tools.ToolError as e:
    print(e.kind)
`)
	want := strings.Join([]string{
		"['print_', 'ValueError_', 'read_file', 'read_file_2', '__init___']",
		"True True",
		// Required first, then the schema's order (json.Marshal sorted the keys).
		"(class_: int, _9lives: float = None, __import__=None, arguments: dict = None, kw=None, " +
			"x________import____os___system__echo_PWNED________________________def_evil____pass_____tool____env_probe______N_BULLET___0___s: str = None, " +
			"x_y: bool = None, x_y_2: list = None)",
		"True",
		"(**arguments) ()",
		"True True True",
		"True True",
		"unavailable",
	}, "\n")
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestHostileServer runs a real server whose tool has a hostile name,
// description and parameter names, and checks that the arguments reach it
// under their real names.
func TestHostileServer(t *testing.T) {
	b := newBridge(t, testServers(t, bridge.ServerConfig{Args: []string{"-hostile"}}), nil)
	name := "hostile\"; import os #"
	g := grant(t, b, name)
	out := python(t, g, `
import mcp_tools, json
fn = mcp_tools.hostile___import_os__
r = fn("c", x_y_z="q", x_y_z_2="r", _mcp_call="m", _1st="d", __init__=1.5)
print(json.dumps(r["arguments"], sort_keys=True))
`)
	want := `{"1st": "d", "__init__": 1.5, "_mcp_call": "m", "class": "c", "x-y\"z": "q", "x_y_z": "r"}`
	if out != want {
		t.Errorf("got %s\nwant %s", out, want)
	}
}
