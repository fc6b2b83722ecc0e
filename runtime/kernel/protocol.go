package kernel

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
)

// request is one line to the agent; Op selects which fields matter.
type request struct {
	ID          uint64   `json:"id"`
	Op          string   `json:"op"`
	Code        *string  `json:"code,omitempty"`
	OutputLimit int      `json:"output_limit,omitempty"`
	WarmImports []string `json:"warm_imports,omitempty"`
	Modules     []string `json:"modules,omitempty"`
	Path        string   `json:"path,omitempty"`
	Data        *string  `json:"data,omitempty"`
	MaxBytes    int      `json:"max_bytes,omitempty"`
	// StreamMS asks an exec for "output" lines at most this often (ExecRequest.OnOutput).
	StreamMS int `json:"stream_ms,omitempty"`

	onOutput func(Output) // receives the exec's "output" lines; never sent
}

// reply is the union of every line the agent sends. Lists stay raw until the op that expects
// them decodes them with a cap (decodeList): a forged line of millions of tiny items must
// cost no more memory than the line itself.
type reply struct {
	// hello
	Op         string          `json:"op"`
	Python     string          `json:"python"`
	PID        int             `json:"pid"`
	RawModules json.RawMessage `json:"modules"`
	StrayFDs   int             `json:"stray_fds"`

	// every reply
	ID    *uint64    `json:"id"`
	OK    *bool      `json:"ok"`
	Error *ExecError `json:"error"` // exec: the user's exception; ok:false: why

	// exec
	Stdout     string          `json:"stdout"`
	Stderr     string          `json:"stderr"`
	Truncated  bool            `json:"truncated"`
	Result     json.RawMessage `json:"result"`
	RawDisplay json.RawMessage `json:"display"`
	RawGroups  json.RawMessage `json:"groups"`
	Count      int             `json:"count"`   // user variables afterwards
	Skipped    int64           `json:"skipped"` // output: bytes left out of the chunk

	RawVariables json.RawMessage `json:"variables"` // inspect
	Pong         bool            `json:"pong"`      // ping
	RawImported  json.RawMessage `json:"imported"`  // warm
	RawSaved     json.RawMessage `json:"saved"`     // pickle_state
	RawRestored  json.RawMessage `json:"restored"`  // restore_state
	RawFailed    json.RawMessage `json:"failed"`    // pickle_state, restore_state
	Data         string          `json:"data"`      // read_file
	Size         int64           `json:"size"`      // read_file, write_file
	RawFiles     json.RawMessage `json:"files"`     // list_files
	Port         int             `json:"port"`      // egress

	// Decoded and checked by validate, for the op that was asked.
	value     any // Result, numbers as json.Number
	modules   map[string]bool
	display   []Display
	groups    []DisplayGroup
	variables []Variable
	imported  []string
	saved     []string
	restored  []string
	failed    []string
	files     []FileInfo
}

const maxMimeType = 100

// decodeReply parses one line from the agent: its envelope, not yet the lists of any op
// (validate does that). Any error wraps ErrProtocol.
func decodeReply(line []byte) (*reply, error) {
	var r reply
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, protocolErrorf(err, "decoding reply")
	}
	if r.Op == "output" {
		return &r, r.validateOutput()
	}
	if r.Op != "" {
		if r.Op != "hello" || r.Python == "" || r.PID <= 0 {
			return nil, protocolErrorf(nil, "bad %.40q line", r.Op)
		}
		return &r, r.validateHello()
	}
	if r.ID == nil || r.OK == nil {
		return nil, protocolErrorf(nil, "reply without id or ok")
	}
	if r.Error != nil {
		if err := checkError(r.Error); err != nil {
			return nil, err
		}
	}
	if !*r.OK && r.Error == nil {
		return nil, protocolErrorf(nil, "ok:false without error")
	}
	return &r, nil
}

// validateOutput checks an "output" line: the chunks an exec streams while it runs.
func (r *reply) validateOutput() error {
	if r.ID == nil {
		return protocolErrorf(nil, "output line without id")
	}
	for _, s := range []string{r.Stdout, r.Stderr} {
		if err := checkLen("streamed output", s, 3*maxStreamChunk); err != nil {
			return err
		}
	}
	if r.Skipped < 0 {
		return protocolErrorf(nil, "output line skipping %d bytes", r.Skipped)
	}
	return nil
}

func (r *reply) validateHello() error {
	if len(r.Python) > maxPythonVersion {
		return protocolErrorf(nil, "hello: python version of %d bytes, over %d", len(r.Python), maxPythonVersion)
	}
	mods, err := decodeMap(r.RawModules, maxHelloModules, "hello modules")
	if err != nil {
		return err
	}
	for name := range mods {
		if err := checkLen("hello module name", name, maxModuleNameBytes); err != nil {
			return err
		}
	}
	r.modules = mods
	return nil
}

func checkError(e *ExecError) error {
	if e.Type == "" {
		return protocolErrorf(nil, "error without type")
	}
	if err := checkLen("error type", e.Type, maxNameBytes); err != nil {
		return err
	}
	if err := checkLen("error message", e.Message, maxErrorTextBytes); err != nil {
		return err
	}
	return checkLen("error traceback", e.Traceback, maxErrorTextBytes)
}

// checkLen refuses a string over max bytes, naming what it was.
func checkLen(what, s string, max int) error {
	if len(s) > max {
		return protocolErrorf(nil, "%s of %d bytes, over the limit of %d", what, len(s), max)
	}
	return nil
}

// checkDisplay rejects items the host could not pass on as MCP content.
func checkDisplay(d *Display) error {
	mt := d.MimeType
	slash := strings.IndexByte(mt, '/')
	if len(mt) > maxMimeType || slash <= 0 || slash == len(mt)-1 {
		return protocolErrorf(nil, "bad display mime type %.40q", mt)
	}
	for _, ch := range mt {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || strings.ContainsRune("/.+-", ch)) {
			return protocolErrorf(nil, "bad display mime type %.40q", mt)
		}
	}
	if strings.HasPrefix(mt, "image/") && mt != "image/svg+xml" {
		if _, err := base64.StdEncoding.DecodeString(d.Data); err != nil {
			return protocolErrorf(err, "display %s is not base64", mt)
		}
	}
	return nil
}

func checkVariable(v *Variable) error {
	switch {
	case len(v.Name) > maxNameBytes:
		return protocolErrorf(nil, "inspect: variable name of %d bytes, over the limit of %d", len(v.Name), maxNameBytes)
	case len(v.Type) > maxNameBytes:
		return protocolErrorf(nil, "inspect: type name of %d bytes, over the limit of %d", len(v.Type), maxNameBytes)
	case v.Kind != "value" && v.Kind != "function" && v.Kind != "class":
		return protocolErrorf(nil, "inspect: kind %.40q", v.Kind)
	case len(v.Repr) > maxReprBytes:
		return protocolErrorf(nil, "inspect: repr of %d bytes, over the limit of %d", len(v.Repr), maxReprBytes)
	case len(v.Shape) > maxShapeDims:
		return protocolErrorf(nil, "inspect: shape of %d dimensions, over the limit of %d", len(v.Shape), maxShapeDims)
	}
	return nil
}

func checkName(what string) func(*string) error {
	return func(s *string) error { return checkLen(what, *s, maxNameBytes) }
}

// validate decodes and checks what a successful reply to req must carry, with the caps of
// limits.go; it is called on ok:true replies only.
func (r *reply) validate(req *request) error {
	var err error
	switch req.Op {
	case "ping":
		if !r.Pong {
			return protocolErrorf(nil, "ping reply without pong")
		}
	case "exec":
		return r.validateExec(req)
	case "inspect":
		r.variables, err = decodeList(r.RawVariables, maxInspectVariables, "inspect variables", checkVariable)
	case "warm":
		r.imported, err = decodeList(r.RawImported, len(req.Modules), "warm imported", func(s *string) error {
			for _, m := range req.Modules {
				if m == *s {
					return nil
				}
			}
			return protocolErrorf(nil, "warm: imported %.40q, which was not asked for", *s)
		})
	case "pickle_state", "restore_state":
		if r.saved, err = decodeList(r.RawSaved, maxStateNames, req.Op+" saved", checkName(req.Op+" name")); err != nil {
			return err
		}
		if r.restored, err = decodeList(r.RawRestored, maxStateNames, req.Op+" restored", checkName(req.Op+" name")); err != nil {
			return err
		}
		r.failed, err = decodeList(r.RawFailed, maxStateNames, req.Op+" failed", checkName(req.Op+" name"))
	case "egress":
		if (req.Path == "") != (r.Port == 0) || r.Port < 0 || r.Port > 65535 {
			return protocolErrorf(nil, "egress reply with port %d", r.Port)
		}
	case "list_files":
		r.files, err = decodeList(r.RawFiles, maxListFiles, "list_files entries", func(f *FileInfo) error {
			return checkLen("list_files path", f.Path, maxPathBytes)
		})
	}
	return err
}

func (r *reply) validateExec(req *request) error {
	// Captured output is at most OutputLimit bytes, each decoded to at most 3 (U+FFFD).
	for _, s := range []string{r.Stdout, r.Stderr} {
		if err := checkLen("exec output", s, 3*req.OutputLimit); err != nil {
			return err
		}
	}
	if len(r.Result) > maxResultBytes {
		return protocolErrorf(nil, "exec result of %d bytes, over the limit of %d", len(r.Result), maxResultBytes)
	}
	var err error
	if r.display, err = decodeList(r.RawDisplay, maxDisplayItems, "exec display", checkDisplay); err != nil {
		return err
	}
	if r.groups, err = decodeGroups(r.RawGroups, len(r.display)); err != nil {
		return err
	}
	if len(r.Result) > 0 {
		dec := json.NewDecoder(bytes.NewReader(r.Result))
		dec.UseNumber()
		if err := dec.Decode(&r.value); err != nil {
			return protocolErrorf(err, "decoding result")
		}
	}
	return nil
}

// decodeGroups decodes exec's display groups: [first, main] pairs with
// first ascending within the n display items (older agents send none).
func decodeGroups(raw json.RawMessage, n int) ([]DisplayGroup, error) {
	pairs, err := decodeList(raw, maxDisplayItems+1, "exec display groups", func(p *[2]any) error { return nil })
	if err != nil {
		return nil, err
	}
	var out []DisplayGroup
	for _, p := range pairs {
		first, ok1 := p[0].(float64)
		main, ok2 := p[1].(bool)
		prev := 0
		if len(out) > 0 {
			prev = out[len(out)-1].First
		}
		if !ok1 || !ok2 || first != float64(int(first)) || int(first) < prev || int(first) > n {
			return nil, protocolErrorf(nil, "bad exec display group %v", p)
		}
		out = append(out, DisplayGroup{First: int(first), Main: main})
	}
	return out, nil
}

// decodeList decodes a JSON list of at most max items, checking each, without ever holding
// more than max of them; null or absent is an empty list.
func decodeList[T any](raw json.RawMessage, max int, what string, check func(*T) error) ([]T, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, protocolErrorf(err, "%s is not a list", what)
	}
	out := []T{}
	for dec.More() {
		if len(out) >= max {
			return nil, protocolErrorf(nil, "%s: more than %d items", what, max)
		}
		var v T
		if err := dec.Decode(&v); err != nil {
			return nil, protocolErrorf(err, "decoding %s", what)
		}
		if err := check(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// decodeMap decodes a JSON object of booleans with at most max keys.
func decodeMap(raw json.RawMessage, max int, what string) (map[string]bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, protocolErrorf(err, "%s is not an object", what)
	}
	out := map[string]bool{}
	for dec.More() {
		if len(out) >= max {
			return nil, protocolErrorf(nil, "%s: more than %d keys", what, max)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, protocolErrorf(err, "decoding %s", what)
		}
		var v bool
		if err := dec.Decode(&v); err != nil {
			return nil, protocolErrorf(err, "decoding %s", what)
		}
		out[tok.(string)] = v
	}
	return out, nil
}

func (r *reply) requestError() error {
	return &RequestError{Type: r.Error.Type, Message: r.Error.Message, Traceback: r.Error.Traceback}
}
