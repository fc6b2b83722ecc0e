package hosted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mcp-forge/forge/internal/lazyre"
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

	schema *jsonschema.Resolved
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

// schemaURI is the base URI of a table's schemas: a $ref may point only
// inside its own schema, never at a host file or a URL.
const schemaURI = "forge:///hosted/schema.json"

func refuseLoader(u *url.URL) (*jsonschema.Schema, error) {
	return nil, fmt.Errorf("schemas may not refer to %s: only references inside the schema are allowed", u)
}

// The $schema values jsonschema-go validates; "" is 2020-12.
var knownDrafts = map[string]bool{
	"": true,
	"https://json-schema.org/draft/2020-12/schema": true,
	"http://json-schema.org/draft-07/schema#":      true,
	"https://json-schema.org/draft-07/schema#":     true,
}

func checkSchema(tool, field string, raw json.RawMessage, max int, required bool) (json.RawMessage, *jsonschema.Resolved, error) {
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
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, nil, fmt.Errorf("%s: %s: %w", tool, field, err)
	}
	invalid := func(reason string) error {
		return fmt.Errorf("%s: %s is not a valid JSON Schema 2020-12: %s", tool, field, firstLine(reason))
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		var doc any
		_ = json.Unmarshal(raw, &doc)
		return nil, nil, invalid("at " + badKeyword(doc, "") + ": " + err.Error())
	}
	if field == "inputSchema" && s.Type != "object" {
		return nil, nil, fmt.Errorf("%s: inputSchema must have \"type\": \"object\" (MCP)", tool)
	}
	if !knownDrafts[s.Schema] {
		return nil, nil, invalid(fmt.Sprintf("$schema %q: want draft 2020-12 or draft-07", s.Schema))
	}
	rs, err := s.Resolve(&jsonschema.ResolveOptions{BaseURI: schemaURI, Loader: refuseLoader})
	if err != nil {
		return nil, nil, invalid(err.Error())
	}
	return buf.Bytes(), rs, nil
}

// badKeyword is the JSON pointer of the deepest keyword in doc that does
// not unmarshal as a schema's keyword ("/" when none is found).
func badKeyword(doc any, at string) string {
	obj, _ := doc.(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		one, _ := json.Marshal(map[string]any{k: obj[k]})
		if json.Unmarshal(one, new(jsonschema.Schema)) == nil {
			continue
		}
		here := at + "/" + escape(k)
		var subs map[string]any
		switch v := obj[k].(type) {
		case map[string]any:
			subs = map[string]any{"": v}
			for m, c := range v {
				subs["/"+escape(m)] = c
			}
		case []any:
			subs = map[string]any{}
			for i, c := range v {
				subs["/"+strconv.Itoa(i)] = c
			}
		}
		for _, p := range slices.Sorted(maps.Keys(subs)) {
			raw, _ := json.Marshal(subs[p])
			if _, isObj := subs[p].(map[string]any); isObj && json.Unmarshal(raw, new(jsonschema.Schema)) != nil {
				return badKeyword(subs[p], here+p)
			}
		}
		return here
	}
	if at == "" {
		return "/"
	}
	return at
}

func firstLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// validate checks args (a JSON object, or empty for none) against the
// tool's inputSchema; a violation is an *ArgumentError with the path of
// the deepest failing value.
func (t *Tool) validate(args json.RawMessage) (any, error) {
	if isNullOrEmpty(args) {
		args = json.RawMessage("{}")
	}
	var inst any
	if err := json.Unmarshal(args, &inst); err != nil {
		return nil, &ArgumentError{Tool: t.Name, Reason: "arguments are not JSON: " + err.Error()}
	}
	err := t.schema.Validate(inst)
	if err == nil {
		return inst, nil
	}
	chain, reason := schemaChain(err)
	return nil, &ArgumentError{Tool: t.Name, Path: t.locate(chain, inst), Reason: reason}
}

// schemaChain splits a jsonschema-go validation error into the schemas
// it passed through, outermost first ("root", then JSON pointers into
// the schema, or a subschema's $id), and the innermost reason. Each
// schema's validation wraps its callee's error as "validating S: ...".
func schemaChain(err error) ([]string, string) {
	var chain []string
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return chain, err.Error()
		}
		prefix, ok := strings.CutSuffix(err.Error(), ": "+inner.Error())
		s, isSchema := strings.CutPrefix(prefix, "validating ")
		if !ok || !isSchema {
			return chain, err.Error()
		}
		chain = append(chain, s)
		err = inner
	}
}

// locate follows the chain of schemas a failed validation went through
// over the instance, and returns the JSON pointer of the deepest value it
// can name. Where the schema step does not say which item or property
// failed (items, additionalProperties, ...), it finds the first one that
// fails that subschema on its own.
func (t *Tool) locate(chain []string, inst any) string {
	if len(chain) == 0 {
		return ""
	}
	path := ""
	prev := "" // the JSON pointer of chain[i-1]; the root's is ""
	for _, cur := range chain[1:] {
		if cur == "root" {
			cur = "" // a $ref to the whole schema ("#")
		} else if !strings.HasPrefix(cur, "/") {
			return path // a subschema named by its $id
		}
		rest, inside := strings.CutPrefix(cur, prev+"/")
		prev = cur
		if !inside {
			continue // a $ref to elsewhere in the schema: the same value
		}
		base := strings.TrimSuffix(cur, "/"+rest)
		toks := strings.Split(rest, "/")
		for i := 0; i < len(toks); i++ {
			kw := toks[i]
			next := ""
			if i+1 < len(toks) {
				next = toks[i+1]
			}
			here := base + "/" + strings.Join(toks[:i+1], "/")
			switch kw {
			case "properties", "prefixItems":
				v, ok := child(inst, unescape(next))
				if !ok {
					return path
				}
				inst, path = v, path+"/"+next
				i++
			case "items", "additionalItems", "unevaluatedItems":
				if _, err := strconv.Atoi(next); next != "" && err == nil { // draft-07 tuple items
					v, ok := child(inst, next)
					if !ok {
						return path
					}
					inst, path = v, path+"/"+next
					i++
					continue
				}
				arr, _ := inst.([]any)
				j := t.firstFailing(here, len(arr), func(k int) any { return arr[k] })
				if j < 0 {
					return path
				}
				inst, path = arr[j], path+"/"+strconv.Itoa(j)
			case "additionalProperties", "unevaluatedProperties", "patternProperties":
				obj, _ := inst.(map[string]any)
				keys := slices.Sorted(maps.Keys(obj))
				if kw == "patternProperties" {
					i++
					here += "/" + next
					re, err := regexp.Compile(unescape(next))
					if err != nil {
						return path
					}
					keys = slices.DeleteFunc(keys, func(k string) bool { return !re.MatchString(k) })
				}
				j := t.firstFailing(here, len(keys), func(k int) any { return obj[keys[k]] })
				if j < 0 {
					return path
				}
				inst, path = obj[keys[j]], path+"/"+escape(keys[j])
			case "allOf", "anyOf", "oneOf", "dependentSchemas", "$defs", "definitions":
				i++ // the same value, against one of the subschemas
			case "not", "if", "then", "else":
			default:
				return path // propertyNames, contains, or a keyword unknown here
			}
		}
	}
	return path
}

// child is the member of an object or the item of an array at tok.
func child(v any, tok string) (any, bool) {
	switch v := v.(type) {
	case map[string]any:
		c, ok := v[tok]
		return c, ok
	case []any:
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(v) {
			return nil, false
		}
		return v[i], true
	}
	return nil, false
}

// firstFailing is the first of n values that the subschema at ptr (a
// JSON pointer into the inputSchema) rejects, or -1.
func (t *Tool) firstFailing(ptr string, n int, value func(int) any) int {
	var s jsonschema.Schema
	if json.Unmarshal(t.InputSchema, &s) != nil {
		return -1
	}
	if s.ID == "" {
		s.ID = schemaURI
	}
	id, err := url.Parse(s.ID)
	if err != nil {
		return -1
	}
	ref := (&url.URL{Scheme: "forge", Path: "/hosted/schema.json"}).ResolveReference(id)
	ref.Fragment = ptr
	wrap := &jsonschema.Schema{Ref: ref.String(), Defs: map[string]*jsonschema.Schema{"forge": &s}}
	rs, err := wrap.Resolve(&jsonschema.ResolveOptions{BaseURI: schemaURI, Loader: refuseLoader})
	if err != nil {
		return -1
	}
	for k := range n {
		if rs.Validate(value(k)) != nil {
			return k
		}
	}
	return -1
}

var (
	pointerEscaper   = strings.NewReplacer("~", "~0", "/", "~1")
	pointerUnescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

func escape(s string) string   { return pointerEscaper.Replace(s) }
func unescape(s string) string { return pointerUnescaper.Replace(s) }
