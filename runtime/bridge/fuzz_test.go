package bridge

import (
	"bufio"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func TestPyIdent(t *testing.T) {
	tests := []struct{ in, ident, global string }{
		{"read-file", "read_file", "read_file"},
		{"class", "class_", "class_"},
		{"9lives", "_9lives", "_9lives"},
		{"", "_", "_"},
		{"héllo wörld", "h_llo_w_rld", "h_llo_w_rld"},
		{"print", "print", "print_"},
		{"search", "search", "search_"},
		{"KeyError", "KeyError", "KeyError_"},
		{"__init__", "__init__", "__init___"},
		{"a.b/c", "a_b_c", "a_b_c"},
	}
	for _, tt := range tests {
		if got := pyIdent(tt.in); got != tt.ident {
			t.Errorf("pyIdent(%q) = %q, want %q", tt.in, got, tt.ident)
		}
		if got := globalName(tt.in); got != tt.global {
			t.Errorf("globalName(%q) = %q, want %q", tt.in, got, tt.global)
		}
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func FuzzPyIdent(f *testing.F) {
	for _, s := range []string{"read-file", "class", "9", "", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, id := range []string{pyIdent(s), globalName(s), attrName(s)} {
			if !identRE.MatchString(id) || pyKeywords[id] {
				t.Fatalf("%q → %q is not a usable identifier", s, id)
			}
		}
	})
}

// FuzzRequest feeds arbitrary bytes to the request reader and parser: no
// panics, and whatever parses is a named tool with object arguments.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{`{"tool":"add","arguments":{"a":1}}` + "\n", "{}\n", "\n", `{"tool":"x","arguments":null}`, "[1]\n", `{"tool":"x","arguments":"s"}` + "\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(strings.NewReader(string(data)), 16)
		for {
			line, err := readLine(r, 256)
			if err != nil {
				return
			}
			if len(line) > 257 {
				t.Fatalf("line of %d bytes passed a 256-byte limit", len(line))
			}
			req, err := parseRequest(line)
			if err != nil {
				continue
			}
			if req.Tool == "" || req.Arguments[0] != '{' || !json.Valid(req.Arguments) {
				t.Fatalf("accepted %q as %+v", line, req)
			}
		}
	})
}

// FuzzPrelude generates preludes from arbitrary names and schemas: no
// panics, and the tool-specific text never appears in the source.
func FuzzPrelude(f *testing.F) {
	f.Add("read-file", "Reads a \"\"\" file", []byte(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`))
	f.Add("x", "", []byte(`{"properties":{"a":1,"b":{"type":["null","integer"]}}}`))
	f.Fuzz(func(t *testing.T, name, desc string, schema []byte) {
		tool := Tool{Name: name, Server: "s", Module: "s", Description: desc, InputSchema: schema}
		src, err := Prelude([]Tool{tool}, "/run/forge/bridge.sock")
		if err != nil {
			return // an invalid schema is refused, never rendered
		}
		marker := "__forge_mcp_tools("
		if strings.Count(src, marker) != 2 {
			t.Fatalf("prelude shape changed: %d markers", strings.Count(src, marker))
		}
		if len(desc) > 12 && strings.Contains(src, desc) && !strings.Contains(preludeTemplate, desc) {
			t.Fatalf("description %q spliced into the source", desc)
		}
	})
}
