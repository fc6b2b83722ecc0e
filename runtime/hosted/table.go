package hosted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-forge/forge/internal/lazyre"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Tool is one entry of the tool table, as read (untrusted) from the
// sandbox and checked here.
type Tool struct {
	Name         string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage // nil: none
	Timeout      time.Duration   // 0: hosted_tools.timeout
	Memory       int64           // bytes; 0: hosted_tools.memory
	Persistent   bool

	schema *jsonschema.Schema
}

// toolNameRE is MCP's rule for tool names.
var toolNameRE = lazyre.New(`^[A-Za-z0-9_.-]{1,128}$`)

// maxDescription caps a tool's description.
const maxDescription = 16 << 10

type rawTool struct {
	Name         *string         `json:"name"`
	Description  *string         `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	Timeout      *float64        `json:"timeout"`
	Memory       *int64          `json:"memory"`
	Persistent   *bool           `json:"persistent"`
}

type limits struct {
	maxTools, maxSchema int
}

// parseTable checks the table the sandbox sent: a JSON array of at most
// maxTools objects with MCP tool names, unique, and schemas that are JSON
// objects within maxSchema bytes that compile as JSON Schema 2020-12.
func parseTable(raw []byte, lim limits) ([]Tool, error) {
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("%w: not a JSON array: %w", ErrTable, err)
	}
	if len(entries) > lim.maxTools {
		return nil, fmt.Errorf("%w: %d tools, more than %d (hosted_tools.max_tools)", ErrTable, len(entries), lim.maxTools)
	}
	seen := map[string]bool{}
	out := make([]Tool, 0, len(entries))
	for i, e := range entries {
		t, err := parseTool(e, lim)
		if err != nil {
			return nil, fmt.Errorf("%w: tool %d: %w", ErrTable, i, err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("%w: two tools are named %q", ErrTable, t.Name)
		}
		seen[t.Name] = true
		out = append(out, t)
	}
	return out, nil
}

func parseTool(raw json.RawMessage, lim limits) (Tool, error) {
	var r rawTool
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&r); err != nil {
		return Tool{}, fmt.Errorf("not a tool object: %w", err)
	}
	if r.Name == nil || !toolNameRE.MatchString(*r.Name) {
		return Tool{}, fmt.Errorf("name %s: want 1-128 of A-Z a-z 0-9 _ - . (MCP tool names)", short(raw, r.Name))
	}
	t := Tool{Name: *r.Name}
	if r.Description != nil {
		if len(*r.Description) > maxDescription {
			return t, fmt.Errorf("%s: description of %d bytes, more than %d", t.Name, len(*r.Description), maxDescription)
		}
		t.Description = *r.Description
	}
	var err error
	if t.InputSchema, t.schema, err = checkSchema(t.Name, "inputSchema", r.InputSchema, lim.maxSchema, true); err != nil {
		return t, err
	}
	if !isNullOrEmpty(r.OutputSchema) {
		if t.OutputSchema, _, err = checkSchema(t.Name, "outputSchema", r.OutputSchema, lim.maxSchema, false); err != nil {
			return t, err
		}
	}
	if r.Timeout != nil {
		if *r.Timeout <= 0 || *r.Timeout > 86400 {
			return t, fmt.Errorf("%s: timeout %g s: want (0, 86400]", t.Name, *r.Timeout)
		}
		t.Timeout = time.Duration(*r.Timeout * float64(time.Second))
	}
	if r.Memory != nil {
		if *r.Memory <= 0 {
			return t, fmt.Errorf("%s: memory %d: want a positive number of bytes", t.Name, *r.Memory)
		}
		t.Memory = *r.Memory
	}
	t.Persistent = r.Persistent != nil && *r.Persistent
	return t, nil
}

func isNullOrEmpty(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

func short(raw json.RawMessage, name *string) string {
	if name == nil {
		return "missing"
	}
	s := *name
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// refuseLoader loads no schema from anywhere: a table's $ref may point
// only inside its own schema, never at a host file or a URL.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schemas may not refer to %s: only references inside the schema are allowed", url)
}

func checkSchema(tool, field string, raw json.RawMessage, max int, required bool) (json.RawMessage, *jsonschema.Schema, error) {
	if isNullOrEmpty(raw) {
		if required {
			return nil, nil, fmt.Errorf("%s: no %s", tool, field)
		}
		return nil, nil, nil
	}
	if len(raw) > max {
		return nil, nil, fmt.Errorf("%s: %s of %d bytes, more than %d (hosted_tools.max_schema_size)", tool, field, len(raw), max)
	}
	if bytes.TrimSpace(raw)[0] != '{' {
		return nil, nil, fmt.Errorf("%s: %s is not a JSON object", tool, field)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %s: %w", tool, field, err)
	}
	if field == "inputSchema" {
		if m, _ := doc.(map[string]any); m["type"] != "object" {
			return nil, nil, fmt.Errorf("%s: inputSchema must have \"type\": \"object\" (MCP)", tool)
		}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	const url = "forge:///hosted/schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %s: %w", tool, field, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %s is not a valid JSON Schema 2020-12: %s", tool, field, firstLine(err.Error()))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, nil, fmt.Errorf("%s: %s: %w", tool, field, err)
	}
	return buf.Bytes(), sch, nil
}

func firstLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

var printer = message.NewPrinter(language.English)

// validate checks args (a JSON object, or empty for none) against the
// tool's inputSchema; a violation is an *ArgumentError with the path of
// the deepest failing value.
func (t *Tool) validate(args json.RawMessage) (any, error) {
	if isNullOrEmpty(args) {
		args = json.RawMessage("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return nil, &ArgumentError{Tool: t.Name, Reason: "arguments are not JSON: " + err.Error()}
	}
	err = t.schema.Validate(inst)
	if err == nil {
		return inst, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil, &ArgumentError{Tool: t.Name, Reason: err.Error()}
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	path := ""
	for _, p := range ve.InstanceLocation {
		path += "/" + strings.ReplaceAll(strings.ReplaceAll(p, "~", "~0"), "/", "~1")
	}
	return nil, &ArgumentError{Tool: t.Name, Path: path, Reason: ve.ErrorKind.LocalizedString(printer)}
}
