package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
)

// The code interpreter (port 49999): POST /execute streams JSON lines, as
// E2B's Jupyter server does; contexts (contexts.go) are Python namespaces
// of the sandbox's one interpreter.

// keepaliveEvery is how often /execute writes a keepalive line while the
// code runs: the SDKs ignore it, and a failed write tells forge the client
// went away (the run is then interrupted).
var keepaliveEvery = 5 * time.Second

// DefaultContext is the id of a sandbox's first Python context, which
// every run without a context_id uses.
const DefaultContext = "default"

type executeRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// contextInfo is the interpreter's Context.
type contextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	var req executeRequest
	max := int64(h.opts.Config.Execution.MaxCodeSize)*6 + maxControlBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, max)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "the body of /execute is not the JSON expected ({code, context_id, language, env_vars}): "+err.Error())
		return
	}
	if req.Language != nil && *req.Language != "" && *req.Language != "python" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("language %q: forge sandboxes run Python only; run other languages through commands.run", truncate(*req.Language, 40)))
		return
	}
	ctxID := DefaultContext
	if req.ContextID != nil && *req.ContextID != "" {
		ctxID = *req.ContextID
	}
	if msg := checkMap("env_vars", req.EnvVars); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	// Commands' polls step aside for the run, and the context's namespace
	// is the live one for the whole of it.
	defer h.cmds.use(sb.ID)()
	unlock, err := h.ctxs.enter(r.Context(), h, sb, ctxID)
	if err != nil {
		h.contextError(w, r, err, sb)
		return
	}
	defer unlock()
	up, err := h.reg.update(sb.ID, func(s *Sandbox) { s.Executions++ })
	if err != nil {
		writeError(w, http.StatusBadGateway, notRunning(sb.ID))
		return
	}
	out := newLineWriter(w)
	defer out.close()
	out.send(map[string]any{"type": "number_of_executions", "execution_count": up.Executions})

	env := mergeEnv(sb.EnvVars, req.EnvVars)
	var st struct { // what progress streamed
		mu      sync.Mutex
		n       [2]int
		skipped bool
	}
	kinds := [2]string{"stdout", "stderr"}
	progress := func(p engine.Progress) {
		now := time.Now().UTC().Format(time.RFC3339Nano)
		st.mu.Lock()
		defer st.mu.Unlock()
		st.skipped = st.skipped || p.Skipped > 0
		for i, s := range []string{p.Stdout, p.Stderr} {
			if s != "" {
				st.n[i] += len(s)
				out.send(map[string]any{"type": kinds[i], "text": s, "timestamp": now})
			}
		}
	}
	res, err := h.opts.Execute(r.Context(), engine.Request{Principal: sb.Principal(), Client: "e2b", Code: dedent(req.Code),
		SessionID: sb.ID, Env: env, Progress: progress, Timeout: time.Duration(h.opts.Config.Execution.MaxTimeout)})
	if err != nil {
		out.send(map[string]any{"type": "error", "name": "SandboxError", "value": err.Error(), "traceback": err.Error()})
		out.send(map[string]any{"type": "end_of_execution"})
		return
	}
	// The output progress did not report (the last chunk comes with the result).
	now := time.Now().UTC().Format(time.RFC3339Nano)
	st.mu.Lock()
	for i, s := range []string{res.Stdout, res.Stderr} {
		if n := st.n[i]; !st.skipped && n < len(s) {
			out.send(map[string]any{"type": kinds[i], "text": s[n:], "timestamp": now})
		}
	}
	st.mu.Unlock()
	for _, line := range resultLines(res) {
		out.send(line)
	}
	if res.Error != nil {
		out.send(map[string]any{"type": "error", "name": res.Error.Type, "value": res.Error.Message, "traceback": res.Error.Traceback})
	}
	out.send(map[string]any{"type": "end_of_execution"})
	h.afterRun(r.Context(), sb, req.EnvVars, res)
}

// afterRun puts back what one run changed for itself (its env_vars) and
// what a restore from hibernation or a lost sandbox lost (the working
// directory, HOME, the sandbox's envVars).
func (h *Handler) afterRun(ctx context.Context, sb *Sandbox, runEnv map[string]string, res *kernel.Result) {
	var code strings.Builder
	if len(res.Notes) > 0 {
		code.WriteString(setupCode)
	}
	if len(runEnv) > 0 {
		keys := make([]string, 0, len(runEnv))
		for k := range runEnv {
			if _, ok := sb.EnvVars[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		b, _ := json.Marshal(keys)
		fmt.Fprintf(&code, "import os as _os\nfor _k in %s: _os.environ.pop(_k, None)\ndel _os\n", b)
	}
	if code.Len() == 0 {
		return
	}
	var env map[string]string
	if len(runEnv) > 0 || len(res.Notes) > 0 {
		env = sb.EnvVars // restores the sandbox's values of the run's keys
	}
	_, err := h.opts.Execute(context.WithoutCancel(ctx), engine.Request{Principal: sb.Principal(), Client: "e2b", Code: code.String(), SessionID: sb.ID, Env: env})
	if err != nil {
		h.log.Warn("restoring a sandbox's environment after a run", "sandbox", sb.ID, "err", err)
	}
}

// resultError is the error of a failed run, for a message.
func resultError(res *kernel.Result) string {
	if res.Error == nil {
		return "the code failed"
	}
	return res.Error.Type + ": " + res.Error.Message
}

func mergeEnv(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// mimeFields map display MIME types to the fields of an E2B result.
var mimeFields = map[string]string{
	"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "text/latex": "latex",
	"image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf",
	"application/json": "json", "application/javascript": "javascript",
}

// resultLines are the result lines of a run: one per shown object (a
// display() argument, a figure), and the cell's value as the main result.
func resultLines(res *kernel.Result) []map[string]any {
	groups := res.Groups
	if len(groups) == 0 && len(res.Display) > 0 { // an agent without groups: an item each
		for i := range res.Display {
			groups = append(groups, kernel.DisplayGroup{First: i})
		}
	}
	var lines []map[string]any
	mainSeen := false
	for gi, g := range groups {
		end := len(res.Display)
		if gi+1 < len(groups) {
			end = groups[gi+1].First
		}
		if g.First >= end {
			continue
		}
		line := map[string]any{"type": "result", "is_main_result": g.Main}
		extra := map[string]any{}
		for _, d := range res.Display[g.First:end] {
			field, ok := mimeFields[d.MimeType]
			switch {
			case !ok:
				extra[d.MimeType] = d.Data
			case field == "json" && json.Valid([]byte(d.Data)):
				line[field] = json.RawMessage(d.Data)
			default:
				line[field] = d.Data
			}
		}
		if len(extra) > 0 {
			line["extra"] = extra
		}
		if g.Main {
			mainSeen = true
			if _, ok := line["text"]; !ok && res.Result != nil {
				line["text"] = pyText(res.Result)
			}
		}
		lines = append(lines, line)
	}
	if !mainSeen && res.Result != nil {
		lines = append(lines, map[string]any{"type": "result", "is_main_result": true, "text": pyText(res.Result)})
	}
	return lines
}

// pyText is the text/plain of a cell's value as E2B gives it: the
// value's Python repr, a str without its quotes. forge's result is the
// value itself when it is plain JSON (rendered here as Python would print
// it), else its repr (a string, as it is).
func pyText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var b strings.Builder
	pyRepr(&b, v)
	return b.String()
}

func pyRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case json.Number:
		b.WriteString(string(x)) // json.dumps wrote Python's own repr of the number
	case float64:
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case string:
		b.WriteString(pyStr(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			pyRepr(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		// Python keeps insertion order, which JSON decoding lost: sorted.
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pyStr(k))
			b.WriteString(": ")
			pyRepr(b, x[k])
		}
		b.WriteByte('}')
	default:
		fmt.Fprint(b, x)
	}
}

// pyStr is Python's repr of a str: single quotes unless it holds a single
// quote and no double one, backslash escapes for the rest.
func pyStr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case !unicode.IsPrint(r) && r != ' ':
			switch {
			case r <= 0xff:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// dedent removes the whitespace every non-blank line starts with, as
// Python's textwrap.dedent (the SDKs' tests send indented cells).
func dedent(code string) string {
	lines := strings.Split(code, "\n")
	prefix, first := "", true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ws := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = ws, false
			continue
		}
		for !strings.HasPrefix(ws, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	if prefix == "" {
		return code
	}
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			lines[i] = strings.TrimLeft(l, " \t")
		} else {
			lines[i] = strings.TrimPrefix(l, prefix)
		}
	}
	return strings.Join(lines, "\n")
}

// lineWriter writes JSON lines to a streamed response from several
// goroutines (the engine's progress, the keepalive ticker, the handler).
type lineWriter struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	rc   *http.ResponseController
	stop chan struct{}
	done chan struct{}
}

func newLineWriter(w http.ResponseWriter) *lineWriter {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	l := &lineWriter{w: w, rc: http.NewResponseController(w), stop: make(chan struct{}), done: make(chan struct{})}
	go l.keepalive()
	return l
}

func (l *lineWriter) keepalive() {
	defer close(l.done)
	t := time.NewTicker(keepaliveEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.send(map[string]any{"type": "keepalive"})
		}
	}
}

// send writes v as one line and flushes it.
func (l *lineWriter) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(b); err == nil {
		_ = l.rc.Flush()
	}
}

func (l *lineWriter) close() {
	close(l.stop)
	<-l.done
}
