package e2b

// envd's filesystem.Filesystem service (Stat, ListDir, MakeDir, Move,
// Remove) on a session's /workspace, which E2B code knows as /home/user.
// Each call runs one small fixed Python function in the session; its
// arguments travel as a JSON string literal parsed inside, never pasted
// into the code.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/server/rest"
)

// Limits of the filesystem calls.
const (
	maxPathBytes = 4096
	// maxListEntries bounds one ListDir reply.
	maxListEntries = 10000
	// maxListDepth bounds ListDir's depth (0 = 1, as envd reads it).
	maxListDepth = 64
	// fsTimeout bounds one filesystem call's run in the session.
	fsTimeout = 30 * time.Second
)

// workspacePath maps a path of E2B code to the sandbox's: /home/user and
// paths under it, and relative paths (relative to /home/user), name the
// session's /workspace (so does /workspace itself). Anything else is
// outside what forge lets a sandbox keep: invalid_argument naming
// /home/user.
func workspacePath(p string) (string, error) {
	switch {
	case p == "":
		return "", connectErrorf(codeInvalidArgument, "empty path: give a path under %s (or relative to it)", HomeDir)
	case len(p) > maxPathBytes:
		return "", connectErrorf(codeInvalidArgument, "path of %d bytes over the limit of %d", len(p), maxPathBytes)
	case strings.ContainsRune(p, 0):
		return "", connectErrorf(codeInvalidArgument, "path %q contains a NUL byte", truncate(p, 100))
	}
	clean := p
	if !strings.HasPrefix(clean, "/") {
		clean = HomeDir + "/" + clean
	}
	clean = path.Clean(clean)
	for _, root := range []string{HomeDir, sandbox.WorkspacePath} {
		if clean == root {
			return sandbox.WorkspacePath, nil
		}
		if rest, ok := strings.CutPrefix(clean, root+"/"); ok {
			return sandbox.WorkspacePath + "/" + rest, nil
		}
	}
	return "", connectErrorf(codeInvalidArgument, "path %q is outside %s: an E2B sandbox on forge keeps files in %s (the session's workspace) only; give a path under it or relative to it",
		truncate(p, 200), HomeDir, HomeDir)
}

// e2bPath maps a sandbox path under /workspace back to the /home/user one
// E2B code expects.
func e2bPath(p string) string {
	if p == sandbox.WorkspacePath {
		return HomeDir
	}
	if rest, ok := strings.CutPrefix(p, sandbox.WorkspacePath+"/"); ok {
		return HomeDir + "/" + rest
	}
	return p
}

// entryInfo is filesystem.EntryInfo in proto3 JSON.
type entryInfo struct {
	Name          string  `json:"name,omitempty"`
	Type          string  `json:"type,omitempty"` // FILE_TYPE_FILE, FILE_TYPE_DIRECTORY
	Path          string  `json:"path,omitempty"`
	Size          int64   `json:"size,string,omitempty"`
	Mode          uint32  `json:"mode,omitempty"`
	Permissions   string  `json:"permissions,omitempty"`
	Owner         string  `json:"owner,omitempty"`
	Group         string  `json:"group,omitempty"`
	ModifiedTime  string  `json:"modifiedTime,omitempty"`
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
	IsSymlink     bool    `json:"isSymlink,omitempty"`
}

// snippetEntry is what the snippets report of one entry.
type snippetEntry struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"` // file, dir, other
	Path    string  `json:"path"`
	Size    int64   `json:"size"`
	Mode    uint32  `json:"mode"`
	Perms   string  `json:"perms"`
	Owner   string  `json:"owner"`
	Group   string  `json:"group"`
	MTimeNs int64   `json:"mtime_ns"`
	Link    *string `json:"link"`
}

func (e snippetEntry) info() entryInfo {
	t := ""
	switch e.Type {
	case "file":
		t = "FILE_TYPE_FILE"
	case "dir":
		t = "FILE_TYPE_DIRECTORY"
	}
	out := entryInfo{Name: e.Name, Type: t, Path: e2bPath(e.Path), Size: e.Size, Mode: e.Mode, Permissions: e.Perms,
		Owner: e.Owner, Group: e.Group, ModifiedTime: protoTimestamp(time.Unix(0, e.MTimeNs))}
	if e.Link != nil {
		out.IsSymlink, out.SymlinkTarget = true, e.Link
	}
	return out
}

// fsSnippet is the Python of every filesystem call: main(a) returns
// {"ok": value} or {"error": [code, message]}, printed as one JSON line.
// It runs in the session's namespace, so it binds no names there (see
// snippetCode).
const fsSnippet = `
import os, stat, json

def entry(p):
    st = os.lstat(p)
    link = None
    if stat.S_ISLNK(st.st_mode):
        try:
            link = os.readlink(p)
        except OSError:
            link = ""
        try:
            st = os.stat(p)
        except OSError:
            pass
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    try:
        import pwd
        owner = pwd.getpwuid(st.st_uid).pw_name
    except Exception:
        owner = str(st.st_uid)
    try:
        import grp
        group = grp.getgrgid(st.st_gid).gr_name
    except Exception:
        group = str(st.st_gid)
    return {"name": os.path.basename(p) or p, "type": kind, "path": p, "size": st.st_size,
            "mode": stat.S_IMODE(st.st_mode), "perms": stat.filemode(st.st_mode),
            "owner": owner, "group": group, "mtime_ns": st.st_mtime_ns, "link": link}

def fail(code, msg):
    return {"error": [code, msg]}

def run(a):
    op, p = a["op"], a["path"]
    shown = a["shown"]
    if op == "stat":
        if not os.path.lexists(p):
            return fail("not_found", "%s: no such file or directory" % shown)
        return {"ok": entry(p)}
    if op == "list":
        if not os.path.lexists(p):
            return fail("not_found", "%s: no such file or directory" % shown)
        if not os.path.isdir(p):
            return fail("invalid_argument", "%s is not a directory" % shown)
        out, limit = [], a["limit"]
        def walk(d, depth):
            for name in sorted(os.listdir(d)):
                full = os.path.join(d, name)
                if len(out) >= limit:
                    raise OverflowError
                try:
                    e = entry(full)
                except OSError:
                    continue
                out.append(e)
                if depth > 1 and e["type"] == "dir" and e["link"] is None:
                    walk(full, depth - 1)
        try:
            walk(p, a["depth"])
        except OverflowError:
            return fail("invalid_argument", "%s holds more than %d entries at that depth: list a narrower directory or a smaller depth" % (shown, limit))
        return {"ok": out}
    if op == "mkdir":
        if os.path.lexists(p):
            if os.path.isdir(p):
                return fail("already_exists", "directory %s already exists" % shown)
            return fail("invalid_argument", "%s exists and is not a directory" % shown)
        try:
            os.makedirs(p)
        except (FileExistsError, NotADirectoryError):
            return fail("invalid_argument", "a parent of %s is not a directory" % shown)
        return {"ok": entry(p)}
    if op == "remove":
        if not os.path.lexists(p):
            return fail("not_found", "%s: no such file or directory" % shown)
        if os.path.isdir(p) and not os.path.islink(p):
            import shutil
            shutil.rmtree(p)
        else:
            os.remove(p)
        return {"ok": None}
    if op == "move":
        dst = a["dest"]
        if not os.path.lexists(p):
            return fail("not_found", "%s: no such file or directory" % shown)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(p, dst)
        return {"ok": entry(dst)}
    return fail("invalid_argument", "unknown operation")

def main(a):
    try:
        r = run(a)
    except PermissionError as e:
        r = fail("permission_denied", "%s: %s" % (a["shown"], e.strerror or e))
    except OSError as e:
        r = fail("invalid_argument", "%s: %s" % (a["shown"], e.strerror or e))
    import sys
    sys.stdout.write(json.dumps(r) + "\n")
    sys.stdout.flush()
`

// snippetCode is the cell that runs src's main(args) without binding a
// name in the session's namespace: the source and the arguments are JSON
// string literals (valid Python ones too), the arguments parsed inside.
func snippetCode(src string, args any) (string, error) {
	a, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	s, _ := json.Marshal(src)
	lit, _ := json.Marshal(string(a))
	return fmt.Sprintf("(lambda ns: (exec(%s, ns), ns['main'](__import__('json').loads(%s)))[1])({'__name__': '__forge_e2b__'})", s, lit), nil
}

// runSnippet runs src's main(args) in sb's session through the server's
// execute path (tenant gate, egress policy, audit). Errors are Connect
// errors; the code's own failure is in the result.
func (h *Handler) runSnippet(ctx context.Context, sb *Sandbox, src string, args any, timeout time.Duration, progress func(engine.Progress)) (*kernel.Result, error) {
	code, err := snippetCode(src, args)
	if err != nil {
		return nil, err
	}
	if h.opts.Execute == nil {
		return nil, connectErrorf(codeUnavailable, "forge's E2B face has no execute path configured")
	}
	defer h.cmds.use(sb.ID)() // commands' polls step aside
	res, err := h.opts.Execute(ctx, engine.Request{Principal: sb.Principal(), Client: "e2b", Code: code,
		SessionID: sb.ID, Image: sb.Image, Timeout: timeout, Progress: progress})
	if err != nil {
		return nil, engineError(err)
	}
	return res, nil
}

// fsCall runs one filesystem operation and decodes its value into out.
func (h *Handler) fsCall(ctx context.Context, sb *Sandbox, args map[string]any, out any) error {
	res, err := h.runSnippet(ctx, sb, fsSnippet, args, fsTimeout, nil)
	switch {
	case err != nil:
		return err
	case res.TimedOut:
		return connectErrorf(codeDeadlineExceeded, "the operation did not finish within %s", fsTimeout)
	case res.OOMKilled:
		return connectErrorf(codeResourceExhausted, "the sandbox ran out of memory")
	case res.Error != nil:
		return connectErrorf(codeInternal, "forge's helper failed in the sandbox: %s: %s", res.Error.Type, truncate(res.Error.Message, 300))
	case res.Truncated:
		return connectErrorf(codeInvalidArgument, "the reply is over execution.output_limit: list a narrower directory or a smaller depth")
	}
	line := strings.TrimSpace(res.Stdout)
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	var rep struct {
		OK    json.RawMessage `json:"ok"`
		Error []string        `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		return connectErrorf(codeInternal, "forge's helper in the sandbox gave no reply it could read (%s)", truncate(line, 100))
	}
	if len(rep.Error) == 2 {
		return &ConnectError{Code: rep.Error[0], Message: rep.Error[1]}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rep.OK, out)
}

// engineError maps an error of the execute path to a Connect error: the
// engine's refusals and the tenant's limits by their HTTP status
// (rest.StatusOf), the rest internal.
func engineError(err error) error {
	var ce *ConnectError
	if errors.As(err, &ce) {
		return ce
	}
	switch status, _ := rest.StatusOf(err); status {
	case http.StatusNotFound:
		return &ConnectError{Code: codeNotFound, Message: err.Error()}
	case http.StatusTooManyRequests:
		return &ConnectError{Code: codeResourceExhausted, Message: err.Error()}
	case http.StatusServiceUnavailable:
		return &ConnectError{Code: codeUnavailable, Message: err.Error()}
	case http.StatusBadRequest:
		return &ConnectError{Code: codeInvalidArgument, Message: err.Error()}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &ConnectError{Code: codeDeadlineExceeded, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &ConnectError{Code: codeCanceled, Message: err.Error()}
	}
	return asConnectError(err)
}

// serveFilesystem is POST /filesystem.Filesystem/{method}.
func (h *Handler) serveFilesystem(w http.ResponseWriter, r *http.Request, sb *Sandbox, method string) {
	if err := rpcUser(r); err != nil {
		writeConnectError(w, err)
		return
	}
	switch method {
	case "Stat":
		serveUnary(w, r, func(r *http.Request, q *pathRequest) (*entryResponse, error) {
			p, err := workspacePath(q.Path)
			if err != nil {
				return nil, err
			}
			var e snippetEntry
			if err := h.fsCall(r.Context(), sb, map[string]any{"op": "stat", "path": p, "shown": q.Path}, &e); err != nil {
				return nil, err
			}
			return &entryResponse{Entry: e.info()}, nil
		})
	case "ListDir":
		serveUnary(w, r, func(r *http.Request, q *listDirRequest) (*listDirResponse, error) {
			p, err := workspacePath(q.Path)
			if err != nil {
				return nil, err
			}
			depth := max(int(q.Depth), 1)
			if depth > maxListDepth {
				return nil, connectErrorf(codeInvalidArgument, "depth %d over the limit of %d", depth, maxListDepth)
			}
			var list []snippetEntry
			if err := h.fsCall(r.Context(), sb, map[string]any{"op": "list", "path": p, "shown": q.Path, "depth": depth, "limit": maxListEntries}, &list); err != nil {
				return nil, err
			}
			out := &listDirResponse{Entries: make([]entryInfo, 0, len(list))}
			for _, e := range list {
				out.Entries = append(out.Entries, e.info())
			}
			return out, nil
		})
	case "MakeDir":
		serveUnary(w, r, func(r *http.Request, q *pathRequest) (*entryResponse, error) {
			p, err := workspacePath(q.Path)
			if err != nil {
				return nil, err
			}
			var e snippetEntry
			if err := h.fsCall(r.Context(), sb, map[string]any{"op": "mkdir", "path": p, "shown": q.Path}, &e); err != nil {
				return nil, err
			}
			return &entryResponse{Entry: e.info()}, nil
		})
	case "Move":
		serveUnary(w, r, func(r *http.Request, q *moveRequest) (*entryResponse, error) {
			src, err := workspacePath(q.Source)
			if err != nil {
				return nil, err
			}
			dst, err := workspacePath(q.Destination)
			if err != nil {
				return nil, err
			}
			if src == sandbox.WorkspacePath || dst == sandbox.WorkspacePath {
				return nil, connectErrorf(codeInvalidArgument, "%s itself cannot be moved or replaced", HomeDir)
			}
			var e snippetEntry
			if err := h.fsCall(r.Context(), sb, map[string]any{"op": "move", "path": src, "dest": dst, "shown": q.Source}, &e); err != nil {
				return nil, err
			}
			return &entryResponse{Entry: e.info()}, nil
		})
	case "Remove":
		serveUnary(w, r, func(r *http.Request, q *pathRequest) (*struct{}, error) {
			p, err := workspacePath(q.Path)
			if err != nil {
				return nil, err
			}
			if p == sandbox.WorkspacePath {
				return nil, connectErrorf(codeInvalidArgument, "%s itself cannot be removed", HomeDir)
			}
			return &struct{}{}, h.fsCall(r.Context(), sb, map[string]any{"op": "remove", "path": p, "shown": q.Path}, nil)
		})
	case "WatchDir", "CreateWatcher", "GetWatcherEvents", "RemoveWatcher":
		writeConnectError(w, connectErrorf(codeUnimplemented, "filesystem.Filesystem/%s: forge does not watch directories; poll with files.list or files.get_info instead", method))
	default:
		writeConnectError(w, connectErrorf(codeUnimplemented, "filesystem.Filesystem has no method %q here (forge serves Stat, ListDir, MakeDir, Move, Remove)", truncate(method, 60)))
	}
}

type pathRequest struct {
	Path string `json:"path"`
}

type listDirRequest struct {
	Path  string      `json:"path"`
	Depth protoUint32 `json:"depth"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type entryResponse struct {
	Entry entryInfo `json:"entry"`
}

type listDirResponse struct {
	Entries []entryInfo `json:"entries,omitempty"`
}
