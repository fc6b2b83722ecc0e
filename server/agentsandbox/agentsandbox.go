// Package agentsandbox is forge's agent-sandbox face: the runtime API of
// kubernetes-sigs/agent-sandbox's python-runtime (its examples/
// python-runtime-sandbox, which the k8s-agent-sandbox Python client speaks
// in every connection mode but the sandboxd ones), so that a SandboxTemplate
// can run forge as its pod and the unchanged client runs commands and moves
// files through it.
//
// The API, as the client 1.0.8 calls it (paths under Options.Prefix):
//
//	GET  /                    health: {"status": "ok", ...}
//	POST /execute             {"command", "timeout_seconds"?} -> {"stdout", "stderr", "exit_code", "timed_out"}
//	POST /upload              multipart, field "file", its filename the path -> {"message"}
//	GET  /download/{path}     the file's bytes; 404 {"message"} when it is no file
//	GET  /list/{path}         [{"name", "size", "type": "file"|"directory", "mod_time"}]
//	GET  /exists/{path}       {"path", "exists"}
//
// Paths are relative to the session's /workspace (the reference runtime's
// /app); one leaving it is refused with 403 like the reference's. Each
// X-Sandbox-Namespace/X-Sandbox-ID pair the client sends (its direct mode
// does), or the one default without them, is a forge session of the
// request's principal: files uploaded stay for later commands. Unlike the
// reference runtime, whose commands run in the API server's own container,
// every command runs inside that session's forge sandbox (user, pid, mount
// and net namespaces, seccomp, cgroup limits, read-only root), apart from
// forge, which holds the API.
package agentsandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/server/rest"
)

// Headers the client's direct, gateway and tunnel modes send.
const (
	HeaderSandboxID        = "X-Sandbox-ID"
	HeaderSandboxNamespace = "X-Sandbox-Namespace"
)

// Bounds of what a request may carry.
const (
	maxCommand  = 64 << 10 // bytes of a command line
	maxJSONBody = maxCommand + 4<<10
	maxPath     = 4096
	// opTimeout bounds the helpers (stat, list) run in the session.
	opTimeout = 30 * time.Second
	// grace is what a command's run may take beyond its own timeout: the
	// helper kills its process group, then reports.
	grace = 5 * time.Second
)

// Engine is what the face needs of forge's engine beyond Execute.
type Engine interface {
	WriteFile(ctx context.Context, p engine.Principal, id, path string, data []byte) error
	ReadFile(ctx context.Context, p engine.Principal, id, path string) ([]byte, error)
}

// Options configure a Handler.
type Options struct {
	Engine Engine
	// Execute runs an engine request through the server's tenant gate,
	// egress policy and audit (the server's execute path).
	Execute func(ctx context.Context, req engine.Request) (*kernel.Result, error)
	// Principal is who a request acts for (set by the listener's
	// authentication, which runs before the face).
	Principal func(ctx context.Context) engine.Principal
	Config    *profiles.Config
	Logger    *slog.Logger
}

// Handler serves the API under Options.Config.AgentSandbox.PathPrefix.
type Handler struct {
	opts   Options
	prefix string // "" for the root, else "/agent-sandbox"
	mux    *http.ServeMux
}

// New makes the handler.
func New(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, prefix: strings.TrimSuffix(opts.Config.AgentSandbox.PathPrefix, "/")}
	m := http.NewServeMux()
	p := h.prefix
	m.HandleFunc("GET "+p+"/{$}", h.health)
	m.HandleFunc("POST "+p+"/execute", h.execute)
	m.HandleFunc("POST "+p+"/upload", h.upload)
	m.HandleFunc("GET "+p+"/download/", h.download)
	m.HandleFunc("GET "+p+"/list/", h.list)
	m.HandleFunc("GET "+p+"/exists/", h.exists)
	h.mux = m
	return h
}

// OwnsPath reports whether path is the face's when it is mounted at
// prefix (agent_sandbox.path_prefix).
func OwnsPath(prefix, path string) bool {
	switch prefix = strings.TrimSuffix(prefix, "/"); prefix {
	case "":
		switch path {
		case "/", "/execute", "/upload":
			return true
		}
		for _, op := range []string{"/download/", "/list/", "/exists/"} {
			if strings.HasPrefix(path, op) {
				return true
			}
		}
		return false
	default:
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
}

// Patterns are the listener mux patterns the face needs.
func (h *Handler) Patterns() []string {
	p := h.prefix
	if p == "" {
		return []string{"/{$}", "/execute", "/upload", "/download/", "/list/", "/exists/"}
	}
	return []string{p + "/"}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "message": "Sandbox Runtime is active (forge)."})
}

// sessionID is the forge session of r's sandbox: one per namespace and
// sandbox id the client names, else one default.
func sessionID(r *http.Request) string {
	ns, id := r.Header.Get(HeaderSandboxNamespace), r.Header.Get(HeaderSandboxID)
	if ns == "" && id == "" {
		return "agent-sandbox-default"
	}
	sum := sha256.Sum256([]byte(ns + "/" + id))
	return "agent-sandbox-" + hex.EncodeToString(sum[:16])
}

func (h *Handler) image() string { return h.opts.Config.AgentSandbox.Image }

type executeRequest struct {
	Command        *string  `json:"command"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

type executeResponse struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out"`
}

// execSnippet runs the command line (split like the reference runtime
// does, shlex, no shell) in /workspace as the leader of its own process
// group, with stdout and stderr those of the run (forge captures and caps
// them), and kills the group at the timeout.
const execSnippet = `
import os, shlex, signal, subprocess, sys

def main(a):
    try:
        argv = shlex.split(a["command"])
    except ValueError as e:
        return {"rc": 1, "how": "error", "msg": "Failed to execute command: %s" % e}
    if not argv:
        return {"rc": 1, "how": "error", "msg": "Failed to execute command: the command is empty"}
    sys.stdout.flush()
    sys.stderr.flush()
    p, how = None, "exit"
    try:
        p = subprocess.Popen(argv, cwd="/workspace", stdin=subprocess.DEVNULL,
                             start_new_session=True, close_fds=True)
        p.wait(timeout=a["timeout"])
    except subprocess.TimeoutExpired:
        how = "timeout"
    except KeyboardInterrupt:
        how = "killed"
    except OSError as e:
        return {"rc": 1, "how": "error", "msg": "Failed to execute command: %s" % e}
    if p.returncode is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        while True:
            try:
                p.wait()
                break
            except KeyboardInterrupt:
                pass
    return {"rc": p.returncode, "how": how}
`

func (h *Handler) execute(w http.ResponseWriter, r *http.Request) {
	var q executeRequest
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	if err := dec.Decode(&q); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeMessage(w, http.StatusRequestEntityTooLarge, "the request body is over %d bytes: a command line may have at most %d bytes", maxJSONBody, maxCommand)
			return
		}
		writeMessage(w, http.StatusUnprocessableEntity, "the body is not a JSON object {\"command\": string, \"timeout_seconds\"?: number}: %v", err)
		return
	}
	cfg := h.opts.Config.Execution
	maxT := time.Duration(cfg.MaxTimeout) - grace
	timeout := time.Duration(cfg.DefaultTimeout)
	switch {
	case q.Command == nil:
		writeMessage(w, http.StatusUnprocessableEntity, "command is required: the command line to run")
		return
	case len(*q.Command) > maxCommand:
		writeMessage(w, http.StatusRequestEntityTooLarge, "the command line is %d bytes, over the limit of %d", len(*q.Command), maxCommand)
		return
	case strings.ContainsRune(*q.Command, 0):
		writeMessage(w, http.StatusUnprocessableEntity, "the command line contains a NUL byte")
		return
	case q.TimeoutSeconds != nil:
		t := *q.TimeoutSeconds
		if math.IsNaN(t) || t <= 0 || t > maxT.Seconds() {
			writeMessage(w, http.StatusUnprocessableEntity, "timeout_seconds %v: want more than 0 and at most %v (execution.max_timeout less %v)", t, maxT.Seconds(), grace)
			return
		}
		timeout = time.Duration(t * float64(time.Second))
	}
	timeout = min(timeout, maxT)
	res, err := h.run(r.Context(), r, execSnippet, map[string]any{"command": *q.Command, "timeout": timeout.Seconds()}, timeout+grace)
	if err != nil {
		h.fail(w, err)
		return
	}
	var rep struct {
		RC  *int   `json:"rc"`
		How string `json:"how"`
		Msg string `json:"msg"`
	}
	out := executeResponse{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: -1}
	switch {
	case res.OOMKilled:
		out.ExitCode, out.Stderr = 137, out.Stderr+"\n[forge] the sandbox ran out of memory and was killed; its files are lost"
	case res.TimedOut:
		out.ExitCode, out.TimedOut = 124, true
	case res.Error != nil:
		h.fail(w, fmt.Errorf("forge's helper failed in the sandbox: %s: %s", res.Error.Type, truncate(res.Error.Message, 300)))
		return
	case decodeResult(res, &rep) != nil || rep.RC == nil:
		h.fail(w, fmt.Errorf("forge's helper in the sandbox gave no reply it could read"))
		return
	case rep.How == "error":
		out.ExitCode, out.Stderr = *rep.RC, rep.Msg
	case rep.How == "timeout":
		out.ExitCode, out.TimedOut = 124, true
		out.Stderr += fmt.Sprintf("\n[forge] the command was killed at its %v time limit", timeout)
	default:
		out.ExitCode = *rep.RC
	}
	if res.Truncated {
		out.Stderr += "\n[forge] output over execution.output_limit was cut"
	}
	writeJSON(w, http.StatusOK, out)
}

// statSnippet resolves a path under /workspace (refusing one that leaves
// it, through '..' or a symlink) and says what is there; with list, the
// directory's entries too.
const statSnippet = `
import os, stat

def main(a):
    base = "/workspace"
    full = os.path.realpath(os.path.join(base, a["path"].lstrip("/")))
    if os.path.commonpath([base, full]) != base:
        return {"kind": "denied"}
    rel = os.path.relpath(full, base)
    try:
        st = os.stat(full)
    except OSError:
        return {"kind": "missing", "rel": rel}
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    out = {"kind": kind, "rel": rel}
    if kind == "dir" and a["list"]:
        entries = []
        with os.scandir(full) as it:
            for e in it:
                if len(entries) >= a["max"]:
                    out["more"] = True
                    break
                try:
                    s = e.stat()
                except OSError:
                    continue
                entries.append({"name": e.name, "size": s.st_size,
                                "type": "directory" if e.is_dir() else "file", "mod_time": s.st_mtime})
        out["entries"] = entries
    return out
`

// maxEntries bounds a listing (the reply passes the agent's limits).
const maxEntries = 5000

type statReply struct {
	Kind    string            `json:"kind"`
	Rel     string            `json:"rel"`
	Entries []json.RawMessage `json:"entries"`
	More    bool              `json:"more"`
}

func (h *Handler) stat(ctx context.Context, r *http.Request, rel string, list bool) (*statReply, error) {
	res, err := h.run(ctx, r, statSnippet, map[string]any{"path": rel, "list": list, "max": maxEntries}, opTimeout)
	if err != nil {
		return nil, err
	}
	var rep statReply
	switch {
	case res.TimedOut:
		return nil, fmt.Errorf("the file operation did not finish within %v", opTimeout)
	case res.Error != nil:
		return nil, fmt.Errorf("forge's helper failed in the sandbox: %s: %s", res.Error.Type, truncate(res.Error.Message, 300))
	case decodeResult(res, &rep) != nil || rep.Kind == "":
		return nil, fmt.Errorf("forge's helper in the sandbox gave no reply it could read")
	}
	return &rep, nil
}

// pathParam is the client's one percent-encoded segment after op/.
func (h *Handler) pathParam(w http.ResponseWriter, r *http.Request, op string) (string, bool) {
	raw := strings.TrimPrefix(r.URL.EscapedPath(), h.prefix+"/"+op+"/")
	p, err := url.PathUnescape(raw)
	switch {
	case err != nil:
		writeMessage(w, http.StatusBadRequest, "the path is not percent-encoded correctly: %v", err)
	case len(p) > maxPath:
		writeMessage(w, http.StatusBadRequest, "the path is %d bytes, over the limit of %d", len(p), maxPath)
	case strings.ContainsRune(p, 0):
		writeMessage(w, http.StatusBadRequest, "the path contains a NUL byte")
	default:
		return p, true
	}
	return "", false
}

func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	p, ok := h.pathParam(w, r, "download")
	if !ok {
		return
	}
	st, err := h.stat(r.Context(), r, p, false)
	if err != nil {
		h.fail(w, err)
		return
	}
	switch st.Kind {
	case "denied":
		writeMessage(w, http.StatusForbidden, "Access denied: the path leaves the sandbox's base directory")
		return
	case "file":
	default:
		writeMessage(w, http.StatusNotFound, "File not found")
		return
	}
	data, err := h.opts.Engine.ReadFile(r.Context(), h.opts.Principal(r.Context()), sessionID(r), st.Rel)
	if err != nil {
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	p, ok := h.pathParam(w, r, "list")
	if !ok {
		return
	}
	st, err := h.stat(r.Context(), r, p, true)
	if err != nil {
		h.fail(w, err)
		return
	}
	switch {
	case st.Kind == "denied":
		writeMessage(w, http.StatusForbidden, "Access denied: the path leaves the sandbox's base directory")
	case st.Kind != "dir":
		writeMessage(w, http.StatusNotFound, "Path is not a directory")
	case st.More:
		writeMessage(w, http.StatusRequestEntityTooLarge, "the directory has more than %d entries: list a narrower one", maxEntries)
	default:
		if st.Entries == nil {
			st.Entries = []json.RawMessage{}
		}
		writeJSON(w, http.StatusOK, st.Entries)
	}
}

func (h *Handler) exists(w http.ResponseWriter, r *http.Request) {
	p, ok := h.pathParam(w, r, "exists")
	if !ok {
		return
	}
	st, err := h.stat(r.Context(), r, p, false)
	if err != nil {
		h.fail(w, err)
		return
	}
	if st.Kind == "denied" {
		writeMessage(w, http.StatusForbidden, "Access denied: the path leaves the sandbox's base directory")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"path": p, "exists": st.Kind != "missing"})
}

// upload stores the multipart field "file" at its filename (a path under
// /workspace), at most volumes.max_file_size bytes.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	limit := int64(h.opts.Config.Volumes.MaxFileSize)
	r.Body = http.MaxBytesReader(w, r.Body, limit+64<<10)
	mr, err := r.MultipartReader()
	if err != nil {
		writeMessage(w, http.StatusUnprocessableEntity, "want a multipart/form-data body with a field \"file\": %v", err)
		return
	}
	for {
		part, err := mr.NextPart()
		if err != nil {
			if errors.Is(err, io.EOF) {
				writeMessage(w, http.StatusUnprocessableEntity, "the multipart body has no field \"file\"")
			} else {
				h.bodyError(w, err, limit)
			}
			return
		}
		if part.FormName() != "file" {
			continue
		}
		// Part.FileName keeps only the base name; the client sends a path.
		_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		name := params["filename"]
		if err != nil || name == "" {
			writeMessage(w, http.StatusUnprocessableEntity, "the field \"file\" names no filename (the path to write)")
			return
		}
		rel, ok := cleanRel(name)
		if !ok {
			writeMessage(w, http.StatusForbidden, "Access denied: %q leaves the sandbox's base directory or names no file", truncate(name, 200))
			return
		}
		data, err := io.ReadAll(io.LimitReader(part, limit+1))
		if err != nil {
			h.bodyError(w, err, limit)
			return
		}
		if int64(len(data)) > limit {
			writeMessage(w, http.StatusRequestEntityTooLarge, "the file is over %d bytes (volumes.max_file_size)", limit)
			return
		}
		// The sandbox's own view decides (a symlink in the workspace may
		// point out): the agent's write refuses what leaves /workspace.
		if st, err := h.stat(r.Context(), r, rel, false); err != nil {
			h.fail(w, err)
			return
		} else if st.Kind == "denied" || st.Kind == "dir" {
			writeMessage(w, http.StatusForbidden, "Access denied: %q is a directory or leaves the sandbox's base directory", truncate(name, 200))
			return
		}
		if err := h.opts.Engine.WriteFile(r.Context(), h.opts.Principal(r.Context()), sessionID(r), rel, data); err != nil {
			h.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"message": fmt.Sprintf("File '%s' uploaded successfully.", name)})
		return
	}
}

func (h *Handler) bodyError(w http.ResponseWriter, err error, limit int64) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeMessage(w, http.StatusRequestEntityTooLarge, "the upload is over %d bytes (volumes.max_file_size)", limit)
		return
	}
	writeMessage(w, http.StatusBadRequest, "reading the multipart body: %v", err)
}

// cleanRel is name as a path relative to /workspace (leading slashes
// dropped, like the reference runtime), or false when it leaves it,
// names no file or has control characters.
func cleanRel(name string) (string, bool) {
	if len(name) > maxPath {
		return "", false
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return "", false
		}
	}
	rel := strings.TrimLeft(path.Clean("/"+name), "/")
	if rel == "" || strings.HasSuffix(name, "/") {
		return "", false
	}
	for _, seg := range strings.Split(strings.TrimLeft(name, "/"), "/") {
		if seg == ".." {
			return "", false
		}
	}
	return rel, true
}

// run runs src's main(args) in r's session through the server's execute
// path; the value main returns is the result's Result.
func (h *Handler) run(ctx context.Context, r *http.Request, src string, args any, timeout time.Duration) (*kernel.Result, error) {
	a, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	s, _ := json.Marshal(src)
	lit, _ := json.Marshal(string(a))
	code := fmt.Sprintf("(lambda ns: (exec(%s, ns), ns['main'](__import__('json').loads(%s)))[1])({'__name__': '__forge_agent_sandbox__'})", s, lit)
	return h.opts.Execute(ctx, engine.Request{Principal: h.opts.Principal(ctx), Client: "agent-sandbox", Code: code,
		SessionID: sessionID(r), Image: h.image(), Timeout: timeout})
}

func decodeResult(res *kernel.Result, out any) error {
	b, err := json.Marshal(res.Result)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// fail answers an error of forge (not of the command): the caller's to
// fix by kind, else 500, with the reason in {"message"}.
func (h *Handler) fail(w http.ResponseWriter, err error) {
	status, retry := rest.StatusOf(err)
	switch {
	case status != 0:
	case errors.Is(err, context.Canceled):
		return // the client is gone
	case errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	default:
		status = http.StatusInternalServerError
		h.opts.Logger.Error("agent-sandbox request failed", "err", err)
	}
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
	}
	writeMessage(w, status, "%s", err.Error())
}

func writeMessage(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]string{"message": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
