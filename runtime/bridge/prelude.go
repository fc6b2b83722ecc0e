package bridge

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// SandboxSocketPath is where the bridge socket appears inside a sandbox:
// sandbox.Config.BridgeDir is bind-mounted at /run/forge.
const SandboxSocketPath = "/run/forge/bridge.sock"

//go:embed prelude.py
var preludeTemplate string

// preludeSpec is the JSON document the prelude decodes. Every string in it
// came from a downstream server, so it travels as data (base64 of JSON) and
// is never spliced into Python source.
type preludeSpec struct {
	Socket string        `json:"socket"`
	Doc    string        `json:"doc"`
	Tools  []preludeTool `json:"tools"`
}

type preludeTool struct {
	Name        string         `json:"name"` // sent on the wire
	Py          string         `json:"py"`   // function name
	Server      string         `json:"server"`
	Module      string         `json:"module"` // submodule mcp_tools.<module>, "" for none
	Attr        string         `json:"attr"`   // name inside the submodule
	Description string         `json:"description"`
	Doc         string         `json:"doc"`
	Params      []preludeParam `json:"params"`
	Extra       bool           `json:"extra"` // accepts **arguments
}

type preludeParam struct {
	Key      string `json:"key"` // property name in the schema
	Py       string `json:"py"`
	Type     string `json:"type"` // a key of the prelude's hints table, or ""
	Required bool   `json:"required"`
}

// Prelude returns Python source that, executed in the user's namespace,
// defines one function per tool there and in a module mcp_tools (also in
// sys.modules, with mcp_tools.search, mcp_tools.tools and the exception
// classes), each calling the tool over the unix socket at socketPath.
// Tools without Python names (not from Catalog) get them from their Name.
func Prelude(tools []Tool, socketPath string) (string, error) {
	spec := preludeSpec{Socket: socketPath, Doc: moduleDoc, Tools: make([]preludeTool, 0, len(tools))}
	taken, attrs := uniqueNames{}, map[string]uniqueNames{}
	for _, t := range tools {
		if t.Python != "" && taken[t.Python] {
			return "", fmt.Errorf("two tools share the Python name %q", t.Python)
		}
		py := t.Python
		if py == "" {
			py = globalName(t.Name)
		}
		pt, err := preludeToolOf(t, taken.take(py))
		if err != nil {
			return "", fmt.Errorf("tool %q: %w", t.Name, err)
		}
		if pt.Module != "" {
			if attrs[pt.Module] == nil {
				attrs[pt.Module] = uniqueNames{}
			}
			pt.Attr = attrs[pt.Module].take(pt.Attr)
		}
		spec.Tools = append(spec.Tools, pt)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	// Base64 has no character a Python string literal would interpret.
	lit := `"` + base64.StdEncoding.EncodeToString(data) + `"`
	return strings.Replace(preludeTemplate, "__SPEC__", lit, 1), nil
}

const moduleDoc = `MCP tools granted to this execution, as Python functions.

Each function calls one tool of a downstream MCP server through forge and
returns its result (structured content, else JSON parsed from the text, else
the text). A failing tool raises mcp_tools.ToolError. Discover tools with
mcp_tools.search("keywords") and read one with help(function).`

// schema is the part of a tool's JSON Schema the prelude uses.
type schema struct {
	Properties           orderedProps    `json:"properties"`
	Required             []string        `json:"required"`
	AdditionalProperties json.RawMessage `json:"additionalProperties"`
}

type property struct {
	Type        json.RawMessage `json:"type"`
	Description string          `json:"description"`
	Enum        []any           `json:"enum"`
	Default     any             `json:"default"`
}

type namedProp struct {
	name string
	prop property
}

// orderedProps keeps the properties in the schema's order, which is the
// order a tool's author meant for its parameters.
type orderedProps []namedProp

func (o *orderedProps) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("properties is not an object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		var p property
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		_ = json.Unmarshal(raw, &p) // a property that is not an object has no type or description
		*o = append(*o, namedProp{name: tok.(string), prop: p})
	}
	return nil
}

var pyTypes = map[string]string{"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict"}

// pyType maps a JSON Schema type ("integer", or ["integer", "null"]) to a
// hint name; unknown or mixed types get none.
func pyType(raw json.RawMessage) string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return pyTypes[one]
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		many = slices.DeleteFunc(many, func(s string) bool { return s == "null" })
		if len(many) == 1 {
			return pyTypes[many[0]]
		}
	}
	return ""
}

func preludeToolOf(t Tool, py string) (preludeTool, error) {
	var s schema
	if len(t.InputSchema) > 0 {
		if err := json.Unmarshal(t.InputSchema, &s); err != nil {
			return preludeTool{}, fmt.Errorf("input schema: %w", err)
		}
	}
	pt := preludeTool{Name: t.Name, Py: py, Server: t.Server, Module: t.Module, Description: t.Description}
	if t.Module != "" {
		pt.Attr = attrName(t.remoteOrName())
	}
	required := set(s.Required...)
	params := uniqueNames{}
	var req, opt []preludeParam
	var docReq, docOpt []string
	for _, np := range s.Properties {
		p := preludeParam{Key: np.name, Py: params.take(pyIdent(np.name)), Type: pyType(np.prop.Type), Required: required[np.name]}
		line := paramDoc(p, np)
		if p.Required {
			req, docReq = append(req, p), append(docReq, line)
		} else {
			opt, docOpt = append(opt, p), append(docOpt, line)
		}
	}
	// Python needs parameters without defaults first.
	pt.Params = append(append([]preludeParam{}, req...), opt...)
	pt.Extra = len(s.Properties) == 0 && string(s.AdditionalProperties) != "false"
	pt.Doc = toolDoc(t, append(docReq, docOpt...), pt.Extra)
	return pt, nil
}

func paramDoc(p preludeParam, np namedProp) string {
	var b strings.Builder
	b.WriteString(p.Py)
	var attrs []string
	if p.Type != "" {
		attrs = append(attrs, p.Type)
	}
	if p.Required {
		attrs = append(attrs, "required")
	} else {
		attrs = append(attrs, "optional")
	}
	fmt.Fprintf(&b, " (%s)", strings.Join(attrs, ", "))
	if p.Py != np.name {
		fmt.Fprintf(&b, " [sent as %q]", np.name)
	}
	b.WriteString(":")
	if d := strings.TrimSpace(np.prop.Description); d != "" {
		b.WriteString(" " + indent(d, "        "))
	}
	if len(np.prop.Enum) > 0 {
		enum, _ := json.Marshal(np.prop.Enum)
		fmt.Fprintf(&b, " One of %s.", enum)
	}
	if np.prop.Default != nil {
		def, _ := json.Marshal(np.prop.Default)
		fmt.Fprintf(&b, " Server default: %s.", def)
	}
	return b.String()
}

func toolDoc(t Tool, params []string, extra bool) string {
	var b strings.Builder
	if d := strings.TrimSpace(t.Description); d != "" {
		b.WriteString(d + "\n\n")
	}
	switch {
	case len(params) > 0:
		b.WriteString("Args:\n")
		for _, p := range params {
			b.WriteString("    " + p + "\n")
		}
		b.WriteString("\n")
	case extra:
		b.WriteString("Takes any keyword arguments; they are passed to the tool as given.\n\n")
	}
	fmt.Fprintf(&b, "Calls MCP tool %q of server %q. Returns its result; raises mcp_tools.ToolError when it fails.", t.Name, t.Server)
	return b.String()
}

func indent(s, prefix string) string {
	return strings.ReplaceAll(s, "\n", "\n"+prefix)
}
