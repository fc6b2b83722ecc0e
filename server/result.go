package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/runtime/kernel"
)

// The compact structured result. Claude Code shows the model only
// JSON.stringify(structuredContent) when it is present, so it must be small
// and sufficient alone: images live once, as ImageContent, and are referred
// to by index; text is capped; the whole has a bound (maxStructuredBytes).
const (
	// structStdoutCap and structStderrCap bound stdout and stderr in
	// structuredContent (bytes; the head and the tail are kept).
	structStdoutCap = 8 << 10
	structStderrCap = 4 << 10
	// structResultCap bounds the result value's JSON (longer ones become a
	// clipped string).
	structResultCap = 4 << 10
	// structMessageCap and structTracebackCap bound the error (the
	// traceback keeps its end, where the error is).
	structMessageCap   = 2 << 10
	structTracebackCap = 6 << 10
	// structDisplayTextCap bounds each text-like display item (HTML, SVG,
	// text, JSON) and structDisplayBudget all of them together; past it
	// only the reference remains.
	structDisplayTextCap = 2 << 10
	structDisplayBudget  = 6 << 10
	// structMaxDisplay bounds the display references listed.
	structMaxDisplay = 32
	// structNoteCap and structMaxNotes bound notes.
	structNoteCap  = 512
	structMaxNotes = 16
	// maxStructuredBytes is the bound of the whole structured result as
	// JSON; TestStructuredBound checks the worst case stays under it.
	maxStructuredBytes = 64 << 10

	// spillDir is where a session keeps output past the structured caps,
	// relative to /workspace.
	spillDir = ".forge/output"
)

// compactResult is execute_python's structuredContent (outputSchema): the
// ExecutionResult's fields, capped by compact, with display items as
// references (its Display shadows kernel.Result's, which encoding/json
// then leaves out) and the files output was saved to.
type compactResult struct {
	kernel.Result
	Display        []displayRef `json:"display"`
	DisplayOmitted int          `json:"display_omitted,omitempty"`
	Files          []outputFile `json:"files,omitempty"`
}

// displayRef is one display item in structuredContent: images by their
// index in content, text-like items with their (capped) text.
type displayRef struct {
	MimeType string `json:"mime_type"`
	// Content is the index of the item in the result's content array.
	Content   *int   `json:"content,omitempty"`
	Data      string `json:"data,omitempty"`
	Bytes     int    `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
}

// outputFile is a stream saved in full to the session's /workspace.
type outputFile struct {
	Stream string `json:"stream"`
	Path   string `json:"path"`
	Bytes  int    `json:"bytes"`
	URI    string `json:"uri"`
}

// render is the reply to one execution: renderResult, with output past the
// structured caps saved to the session's /workspace and linked.
func (s *Server) render(ctx context.Context, res *kernel.Result) *mcp.CallToolResult {
	var files []outputFile
	if res.SessionID != nil {
		files = s.spill(ctx, *res.SessionID, res)
	}
	return renderCompact(res, files)
}

// spill writes stdout and stderr that exceed their structured caps to
// /workspace/.forge/output of session id; a failure is a note, not an
// error (the run itself succeeded).
func (s *Server) spill(ctx context.Context, id string, res *kernel.Result) []outputFile {
	var files []outputFile
	stamp := time.Now().UTC().Format("20060102T150405.000")
	for _, st := range []struct {
		name, data string
		limit      int
	}{{"stdout", res.Stdout, structStdoutCap}, {"stderr", res.Stderr, structStderrCap}} {
		if len(st.data) <= st.limit {
			continue
		}
		path := fmt.Sprintf("%s/%s-%s.txt", spillDir, stamp, st.name)
		if err := s.eng.WriteFile(ctx, s.principal(ctx), id, path, []byte(st.data)); err != nil {
			s.log.Warn("saving long output", "session", id, "stream", st.name, "err", err)
			res.Notes = append(res.Notes, fmt.Sprintf("%s could not be saved to /workspace/%s: %v", st.name, path, err))
			continue
		}
		files = append(files, outputFile{Stream: st.name, Path: path, Bytes: len(st.data),
			URI: fmt.Sprintf("forge://sessions/%s/files/%s", id, path)})
	}
	return files
}

// renderResult is renderCompact without saved files.
func renderResult(r *kernel.Result) *mcp.CallToolResult { return renderCompact(r, nil) }

// renderCompact builds the reply: text for the model, each image once as
// ImageContent, other rich items as resources or text, a resource_link per
// saved file, and the compact structured result; isError when the code
// failed.
func renderCompact(r *kernel.Result, files []outputFile) *mcp.CallToolResult {
	sc := compact(r, files)
	content := []mcp.Content{mcp.NewTextContent(resultText(r) + spillText(files))}
	budget := structDisplayBudget
	for i, d := range r.Display {
		c := displayContent(i, d)
		if c != nil {
			content = append(content, c)
		}
		if i >= structMaxDisplay {
			sc.DisplayOmitted++
			continue
		}
		ref := displayRef{MimeType: d.MimeType, Bytes: len(d.Data)}
		if c != nil {
			n := len(content) - 1
			ref.Content = &n
		}
		if !isImage(d.MimeType) {
			cut := min(structDisplayTextCap, budget)
			ref.Data, ref.Truncated = clipHead(d.Data, cut)
			budget -= len(ref.Data)
		}
		sc.Display = append(sc.Display, ref)
	}
	for _, f := range files {
		content = append(content, mcp.NewResourceLink(f.URI, f.Stream+".txt",
			fmt.Sprintf("the whole %s of the run (%d bytes); read it with read_file {session_id, path: %q}", f.Stream, f.Bytes, f.Path), "text/plain"))
	}
	return &mcp.CallToolResult{Content: content, StructuredContent: sc, IsError: !r.Success}
}

// compact is r with every field capped (see the struct* constants).
func compact(r *kernel.Result, files []outputFile) *compactResult {
	sc := &compactResult{Result: kernel.Result{
		Success: r.Success, ExitCode: r.ExitCode, TimedOut: r.TimedOut, OOMKilled: r.OOMKilled,
		ExecutionTimeMS: r.ExecutionTimeMS, MemoryPeakBytes: r.MemoryPeakBytes, SessionID: r.SessionID,
		Result: r.Result,
	}, Display: []displayRef{}, Files: files}
	var cut bool
	sc.Stdout, cut = clipMiddle(r.Stdout, structStdoutCap)
	sc.Truncated = r.Truncated || cut
	sc.Stderr, cut = clipMiddle(r.Stderr, structStderrCap)
	sc.Truncated = sc.Truncated || cut
	if r.Result != nil {
		if v := formatValue(r.Result); len(v) > structResultCap {
			sc.Result.Result, _ = clipHead(v, structResultCap)
			sc.Truncated = true
		}
	}
	if e := r.Error; e != nil {
		ce := *e
		ce.Type, _ = clipHead(e.Type, 256)
		ce.Message, _ = clipHead(e.Message, structMessageCap)
		ce.Traceback, _ = clipTail(e.Traceback, structTracebackCap)
		sc.Error = &ce
	}
	for i, n := range r.Notes {
		if i >= structMaxNotes {
			sc.Notes = append(sc.Notes, fmt.Sprintf("(%d more notes omitted)", len(r.Notes)-i))
			break
		}
		n, _ = clipHead(n, structNoteCap)
		sc.Notes = append(sc.Notes, n)
	}
	for _, f := range files {
		sc.Notes = append(sc.Notes, fmt.Sprintf("%s was %d bytes: the whole of it is in /workspace/%s (read_file with this session_id and path).", f.Stream, f.Bytes, f.Path))
	}
	if sc.Truncated && len(files) == 0 {
		sc.Notes = append(sc.Notes, "Output was shortened here; print less (summaries, head()), or run in a session, where long output is saved under /workspace/"+spillDir+".")
	}
	return sc
}

// spillText tells a model reading the text content where saved output is.
func spillText(files []outputFile) string {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "\n(the whole %s, %d bytes, is saved at /workspace/%s)", f.Stream, f.Bytes, f.Path)
	}
	return b.String()
}

func isImage(mt string) bool {
	mt = strings.ToLower(mt)
	return strings.HasPrefix(mt, "image/") && mt != "image/svg+xml"
}

// clipHead keeps the first n bytes of s (on a rune boundary) and "…".
func clipHead(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	return runeCut(s, max(n, 0)) + "…", true
}

// clipTail keeps the last n bytes of s (on a rune boundary) after "…".
func clipTail(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return "…" + s[i:], true
}

// clipMiddle keeps a quarter of n from the head and the rest from the tail
// (where a program's last words and errors are), marking what went.
func clipMiddle(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	head := runeCut(s, n/4)
	tail, _ := clipTail(s, n-n/4)
	return fmt.Sprintf("%s\n[… %d bytes omitted …]\n%s", head, len(s)-n, strings.TrimPrefix(tail, "…")), true
}

// runeCut is s[:n], moved back to a rune boundary.
func runeCut(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// outputSchema is the JSON Schema of compactResult (DESIGN's ExecutionResult,
// compacted).
var outputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "success": {"type": "boolean", "description": "true when the code ran to the end without an exception"},
    "stdout": {"type": "string", "description": "captured stdout; past 8 KiB only its head and tail (the whole is in the text content, and in a session also in files)"},
    "stderr": {"type": "string", "description": "captured stderr; past 4 KiB only its head and tail"},
    "result": {"description": "value of the last expression: its JSON value, or its repr as a string (clipped at 4 KiB); null when none"},
    "display": {"type": "array", "description": "rich output in order; images are not repeated here: content[content] holds them", "items": {"type": "object", "properties": {
      "mime_type": {"type": "string"},
      "content": {"type": "integer", "minimum": 0, "description": "index of this item in the result's content array"},
      "data": {"type": "string", "description": "text-like items (HTML, SVG, text, JSON): their text, clipped at 2 KiB; absent for images"},
      "bytes": {"type": "integer", "minimum": 0, "description": "size of the whole item (base64 for images)"},
      "truncated": {"type": "boolean"}
    }, "required": ["mime_type", "bytes"]}},
    "display_omitted": {"type": "integer", "description": "display items past the first 32, not listed here (still in content)"},
    "error": {"type": ["object", "null"], "properties": {
      "type": {"type": "string"},
      "message": {"type": "string"},
      "traceback": {"type": "string", "description": "the traceback's last 6 KiB"},
      "line": {"type": "integer"},
      "column": {"type": "integer"}
    }, "required": ["type", "message", "traceback"]},
    "exit_code": {"type": "integer"},
    "timed_out": {"type": "boolean"},
    "oom_killed": {"type": "boolean"},
    "truncated": {"type": "boolean", "description": "output was cut, at the output limit or in this structured result"},
    "execution_time_ms": {"type": "number"},
    "memory_peak_bytes": {"type": "integer", "minimum": 0},
    "session_id": {"type": ["string", "null"]},
    "notes": {"type": "array", "items": {"type": "string"}, "description": "what forge has to say beyond the code's output: a session restored or lost, where long output was saved"},
    "files": {"type": "array", "description": "in a session, streams longer than their cap, saved whole under /workspace (read them with read_file; content has a resource_link to each)", "items": {"type": "object", "properties": {
      "stream": {"type": "string", "enum": ["stdout", "stderr"]},
      "path": {"type": "string", "description": "relative to /workspace"},
      "bytes": {"type": "integer"},
      "uri": {"type": "string"}
    }, "required": ["stream", "path", "bytes", "uri"]}}
  },
  "required": ["success", "stdout", "stderr", "display", "error", "exit_code", "timed_out", "oom_killed", "truncated", "execution_time_ms", "memory_peak_bytes", "session_id"]
}`)

// uriSessionFile is a file of a session's /workspace: the resource_link of
// saved output points here, and resources/read reads it as read_file does.
const uriSessionFile = "forge://sessions/{id}/files/{+path}"

// addFileResource serves uriSessionFile for the caller's own sessions.
func (s *Server) addFileResource() {
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(uriSessionFile, "session-file",
		mcp.WithTemplateDescription("A file in a session's /workspace (as the read_file tool reads it), e.g. output that execute_python saved under .forge/output.")),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			rest, _ := strings.CutPrefix(req.Params.URI, "forge://sessions/")
			id, path, ok := strings.Cut(rest, "/files/")
			if !ok || id == "" || path == "" {
				return nil, fmt.Errorf("resource %q: want %s", req.Params.URI, uriSessionFile)
			}
			data, err := gatedEngine{s}.ReadFile(ctx, s.principal(ctx), id, path)
			if err != nil {
				return nil, err
			}
			if utf8.Valid(data) {
				return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "text/plain", Text: string(data)}}, nil
			}
			return []mcp.ResourceContents{mcp.BlobResourceContents{URI: req.Params.URI, MIMEType: "application/octet-stream",
				Blob: base64.StdEncoding.EncodeToString(data)}}, nil
		})
}
