package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
)

// Session tools and resources.
const (
	toolDocumentState  = "document_state"
	toolListSessions   = "list_sessions"
	toolDestroySession = "destroy_session"
	toolForkSession    = "fork_session"
	toolWriteFile      = "write_file"
	toolReadFile       = "read_file"
	toolListFiles      = "list_files"

	uriSessionState     = "forge://sessions/{id}/state"
	uriSessionVariables = "forge://sessions/{id}/variables"
)

func annotations(title string, readOnly, destructive, idempotent bool) mcp.ToolAnnotation {
	f := false
	return mcp.ToolAnnotation{Title: title, ReadOnlyHint: &readOnly, DestructiveHint: &destructive,
		IdempotentHint: &idempotent, OpenWorldHint: &f}
}

func schema(props map[string]any, required ...string) json.RawMessage {
	if required == nil {
		required = []string{}
	}
	b, err := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false})
	if err != nil {
		panic(err) // static data
	}
	return b
}

var sessionIDProp = map[string]any{"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$",
	"description": "The session's id (the session_id given to or returned by execute_python)."}

// sessionTools declares the session tools.
func sessionTools(maxFile string) []mcp.Tool {
	mk := func(name, title, desc string, ann mcp.ToolAnnotation, sch json.RawMessage) mcp.Tool {
		t := mcp.NewToolWithRawSchema(name, desc, sch)
		t.Title, t.Annotations = title, ann
		return t
	}
	return []mcp.Tool{
		mk(toolDocumentState, "Document a session's state",
			"Write down what the variables of a session mean (and a note about where the work stands), so that you or another agent can pick it up later. Stores your descriptions with an introspection of every user variable (type, size, shape or length, short repr); read it back from forge://sessions/{id}/state.",
			annotations("Document a session's state", false, false, true),
			schema(map[string]any{
				"session_id": sessionIDProp,
				"variables":  map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "name → what it holds"},
				"note":       map[string]any{"type": "string", "description": "Free text: progress, next steps."},
				"clear":      map[string]any{"type": "boolean", "description": "Replace earlier descriptions instead of adding to them."},
			}, "session_id")),
		mk(toolListSessions, "List sessions",
			"List your sessions: id, image, created, last activity, status (active, hibernated, lost), memory in use and number of variables. Sessions of other clients are never shown.",
			annotations("List sessions", true, false, true), schema(map[string]any{})),
		mk(toolDestroySession, "Destroy a session",
			"Destroy a session: its sandbox, variables and /workspace files are gone for good.",
			annotations("Destroy a session", false, true, true), schema(map[string]any{"session_id": sessionIDProp}, "session_id")),
		mk(toolForkSession, "Fork a session",
			"Copy a session into a new one: its variables, imported modules and /workspace files, in a sandbox of its own. Try an alternative without losing where you are; the two then change independently. Variables that cannot be copied (open sockets and files, generators, locks) are listed in the reply as uncopied.",
			annotations("Fork a session", false, false, false),
			schema(map[string]any{
				"session_id": sessionIDProp,
				"new_session_id": map[string]any{"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$",
					"description": "The fork's id; must not exist yet. Omitted: a fresh id is returned."},
			}, "session_id")),
		mk(toolWriteFile, "Write a file into a session",
			fmt.Sprintf("Write a file into a session's /workspace (the session is created if it does not exist), where its code can open it by relative path. Up to %s; paths are relative to /workspace, and '..', absolute paths and symlinks leading outside are refused.", maxFile),
			annotations("Write a file into a session", false, false, true),
			schema(map[string]any{
				"session_id": sessionIDProp,
				"path":       map[string]any{"type": "string", "description": "Path relative to /workspace, e.g. data/input.csv"},
				"content":    map[string]any{"type": "string", "description": "The file's content: text, or base64 when encoding is base64."},
				"encoding":   map[string]any{"type": "string", "enum": []string{"text", "base64"}, "description": "text (default) or base64 for binary files"},
			}, "session_id", "path", "content")),
		mk(toolReadFile, "Read a file from a session",
			fmt.Sprintf("Read a file from a session's /workspace (up to %s): text when it is UTF-8, else base64; PNG, JPEG and GIF files also come back as images.", maxFile),
			annotations("Read a file from a session", true, false, true),
			schema(map[string]any{"session_id": sessionIDProp,
				"path": map[string]any{"type": "string", "description": "Path relative to /workspace"}}, "session_id", "path")),
		mk(toolListFiles, "List a session's files",
			"List the files in a session's /workspace with their sizes.",
			annotations("List a session's files", true, false, true), schema(map[string]any{"session_id": sessionIDProp}, "session_id")),
	}
}

// sessionArgs are the decoded arguments of every session tool.
type sessionArgs struct {
	SessionID string            `json:"session_id"`
	NewID     string            `json:"new_session_id"`
	Variables map[string]string `json:"variables"`
	Note      string            `json:"note"`
	Clear     bool              `json:"clear"`
	Path      string            `json:"path"`
	Content   *string           `json:"content"`
	Encoding  string            `json:"encoding"`
}

// decodeSessionArgs checks the arguments of a session tool; errors are
// protocol errors naming the field.
func decodeSessionArgs(tool string, raw []byte) (sessionArgs, error) {
	var a sessionArgs
	if len(strings.TrimSpace(string(raw))) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	allowed := map[string][]string{
		toolDocumentState:  {"session_id", "variables", "note", "clear"},
		toolListSessions:   {},
		toolDestroySession: {"session_id"},
		toolForkSession:    {"session_id", "new_session_id"},
		toolWriteFile:      {"session_id", "path", "content", "encoding"},
		toolReadFile:       {"session_id", "path"},
		toolListFiles:      {"session_id"},
	}[tool]
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return a, argError("", "want a JSON object: "+describeJSONError(err))
	}
	for k := range fields {
		ok := false
		for _, f := range allowed {
			ok = ok || f == k
		}
		if !ok {
			return a, argError(k, fmt.Sprintf("unknown field; %s takes: %s", tool, strings.Join(allowed, ", ")))
		}
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, argError("", describeJSONError(err))
	}
	need := func(field, v string) error {
		if v == "" {
			return argError(field, "is required")
		}
		return nil
	}
	for _, f := range allowed {
		switch f {
		case "session_id":
			if err := need(f, a.SessionID); err != nil {
				return a, err
			}
			if err := session.ValidID(a.SessionID); err != nil {
				return a, argError(f, err.Error())
			}
		case "new_session_id":
			if a.NewID != "" {
				if err := session.ValidID(a.NewID); err != nil {
					return a, argError(f, err.Error())
				}
			}
		case "path":
			if err := need(f, a.Path); err != nil {
				return a, err
			}
		case "content":
			if a.Content == nil {
				return a, argError(f, "is required")
			}
		case "encoding":
			if a.Encoding != "" && a.Encoding != "text" && a.Encoding != "base64" {
				return a, argError(f, fmt.Sprintf("is %q; want \"text\" or \"base64\"", a.Encoding))
			}
			if a.Encoding == "base64" {
				if _, err := base64.StdEncoding.DecodeString(*a.Content); err != nil {
					return a, argError("content", "is not valid base64")
				}
			}
		}
	}
	return a, nil
}

func (s *Server) addSessionTools() {
	for _, t := range sessionTools(s.cfg.Volumes.MaxFileSize.String()) {
		s.mcp.AddTool(t, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.active.Add(1)
			defer s.active.Done()
			d, err := argsOf(ctx, req)
			if err != nil {
				return nil, err
			}
			ectx, cancel := s.execContext(ctx)
			defer cancel()
			res, err := s.sessionTool(ectx, s.principal(ctx), d.tool, d.session)
			if err != nil {
				return s.executeError(err), nil
			}
			return res, nil
		})
	}
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(uriSessionState, "session-state",
		mcp.WithTemplateDescription("A session's documented state (document_state) with the introspection of its variables."),
		mcp.WithTemplateMIMEType("application/json")), s.sessionResource(false))
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(uriSessionVariables, "session-variables",
		mcp.WithTemplateDescription("The user variables of a session: name, type, size, shape or length, short repr."),
		mcp.WithTemplateMIMEType("application/json")), s.sessionResource(true))
}

func (s *Server) sessionTool(ctx context.Context, p engine.Principal, tool string, a sessionArgs) (*mcp.CallToolResult, error) {
	g := gatedEngine{s}
	switch tool {
	case toolDocumentState:
		doc, err := g.DocumentState(ctx, p, a.SessionID, a.Variables, a.Note, a.Clear)
		if err != nil {
			return nil, err
		}
		return jsonResult(fmt.Sprintf("Documented %d variable(s) of session %s; %d user variable(s) introspected.",
			len(doc.Variables), a.SessionID, len(doc.Introspection)), doc)
	case toolListSessions:
		list, err := s.eng.ListSessions(ctx, p)
		if err != nil {
			return nil, err
		}
		if list == nil {
			list = []session.Info{}
		}
		return jsonResult(fmt.Sprintf("%d session(s).", len(list)), map[string]any{"sessions": list})
	case toolDestroySession:
		if err := s.eng.DestroySession(ctx, p, a.SessionID); err != nil {
			return nil, err
		}
		return mcp.NewToolResultText("Session " + a.SessionID + " destroyed."), nil
	case toolForkSession:
		f, err := g.ForkSession(ctx, p, a.SessionID, a.NewID)
		if err != nil {
			return nil, err
		}
		summary := fmt.Sprintf("Session %s forked into %s in %d ms: %d variable(s) and %d bytes of /workspace copied.",
			a.SessionID, f.SessionID, f.ForkMillis, len(f.Copied), f.WorkspaceBytes)
		if len(f.Uncopied) > 0 {
			summary += fmt.Sprintf(" Not copied (cannot be pickled or unpickled): %s.", strings.Join(f.Uncopied, ", "))
		}
		return jsonResult(summary, f)
	case toolWriteFile:
		data := []byte(*a.Content)
		if a.Encoding == "base64" {
			data, _ = base64.StdEncoding.DecodeString(*a.Content)
		}
		if err := g.WriteFile(ctx, p, a.SessionID, a.Path, data); err != nil {
			return nil, err
		}
		return mcp.NewToolResultText(fmt.Sprintf("Wrote %d bytes to /workspace/%s in session %s.", len(data), a.Path, a.SessionID)), nil
	case toolReadFile:
		data, err := g.ReadFile(ctx, p, a.SessionID, a.Path)
		if err != nil {
			return nil, err
		}
		return fileResult(a.Path, data), nil
	case toolListFiles:
		files, err := g.ListFiles(ctx, p, a.SessionID)
		if err != nil {
			return nil, err
		}
		if files == nil {
			files = []kernel.FileInfo{}
		}
		return jsonResult(fmt.Sprintf("%d file(s) in /workspace of session %s.", len(files), a.SessionID), map[string]any{"files": files})
	}
	return nil, fmt.Errorf("unknown tool %q", tool)
}

// jsonResult is a short text for the model plus the value as structured
// content (and as JSON text for clients that only read text).
func jsonResult(summary string, v any) (*mcp.CallToolResult, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(summary + "\n" + string(b))}, StructuredContent: v}, nil
}

// fileResult returns a file as text when it is UTF-8, else base64, and
// images also as image content.
func fileResult(path string, data []byte) *mcp.CallToolResult {
	mime := sniffImage(data)
	out := map[string]any{"path": path, "size": len(data)}
	var content []mcp.Content
	if utf8.Valid(data) && mime == "" {
		out["encoding"], out["content"] = "text", string(data)
		content = append(content, mcp.NewTextContent(string(data)))
	} else {
		enc := base64.StdEncoding.EncodeToString(data)
		out["encoding"], out["content"] = "base64", enc
		content = append(content, mcp.NewTextContent(fmt.Sprintf("%s: %d bytes of binary data (base64 in structuredContent.content).", path, len(data))))
		if mime != "" {
			content = append(content, mcp.NewImageContent(enc, mime))
		}
	}
	return &mcp.CallToolResult{Content: content, StructuredContent: out}
}

func sniffImage(b []byte) string {
	switch {
	case len(b) > 8 && string(b[:8]) == "\x89PNG\r\n\x1a\n":
		return "image/png"
	case len(b) > 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF:
		return "image/jpeg"
	case len(b) > 6 && (string(b[:6]) == "GIF87a" || string(b[:6]) == "GIF89a"):
		return "image/gif"
	}
	return ""
}

// sessionResource serves forge://sessions/{id}/state or /variables of the
// caller's own sessions.
func (s *Server) sessionResource(varsOnly bool) func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		rest, ok := strings.CutPrefix(req.Params.URI, "forge://sessions/")
		id, _, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("resource %q: want forge://sessions/{id}/state or /variables", req.Params.URI)
		}
		meta, err := gatedEngine{s}.SessionState(ctx, s.principal(ctx), id)
		if err != nil {
			return nil, err
		}
		var v any = meta
		if varsOnly {
			vars := meta.Variables
			if vars == nil {
				vars = []kernel.Variable{}
			}
			v = map[string]any{"session_id": id, "status": meta.Status, "variables": vars}
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, err
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}, nil
	}
}
