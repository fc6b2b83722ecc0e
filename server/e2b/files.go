package e2b

// envd's plain-HTTP file transfer, GET and POST /files, on forge's
// session file operations (the tenant gate, the session's workspace,
// volumes.max_file_size).

import (
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/server/rest"
)

// maxUploadParts bounds the files of one multipart upload.
const maxUploadParts = 100

// writeInfo is one entry of the upload reply (the SDKs' WriteInfo).
type writeInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// httpError is a /files failure: its status and message.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func httpErrorf(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// serveFiles is GET (download) and POST (upload) /files.
func (h *Handler) serveFiles(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	var err error
	if err = checkUser(r.URL.Query().Get("username")); err == nil {
		if r.Method == http.MethodGet {
			err = h.download(w, r, sb)
		} else {
			err = h.upload(w, r, sb)
		}
	}
	if err != nil {
		status, msg := fileStatus(err)
		writeError(w, status, msg)
	}
}

// checkUser refuses a user other than E2B's default one: a sandbox on
// forge runs as one unprivileged user.
func checkUser(user string) error {
	if user == "" || user == "user" {
		return nil
	}
	return httpErrorf(http.StatusBadRequest, "user %q: forge runs sandbox code as one unprivileged user (E2B's \"user\"); root and other users are not available", truncate(user, 40))
}

// rpcUser checks the user of an RPC (HTTP Basic, "user:").
func rpcUser(r *http.Request) error {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Basic ")
	if !ok {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return connectErrorf(codeInvalidArgument, "Authorization: Basic carries no base64 user")
	}
	user, _, _ := strings.Cut(string(b), ":")
	if err := checkUser(user); err != nil {
		return connectErrorf(codePermissionDenied, "%s", err.Error())
	}
	return nil
}

// workspaceRel is an E2B path as a path relative to /workspace, for the
// engine's file operations; the workspace itself is not a file.
func workspaceRel(p string) (string, error) {
	abs, err := workspacePath(p)
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(abs, sandbox.WorkspacePath+"/")
	if !ok {
		return "", connectErrorf(codeInvalidArgument, "%s is a directory, not a file", truncate(p, 200))
	}
	return rel, nil
}

// download is GET /files?path=P: the file's bytes.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, sb *Sandbox) error {
	shown := r.URL.Query().Get("path")
	rel, err := workspaceRel(shown)
	if err != nil {
		return err
	}
	p := sb.Principal()
	var data []byte
	err = h.admitted(r.Context(), p, func(ctx context.Context) error {
		var err error
		defer h.cmds.use(sb.ID)()
		data, err = h.opts.Engine.ReadFile(ctx, p, sb.ID, rel)
		return err
	})
	if errors.Is(err, kernel.ErrRequest) {
		return h.whyNotRead(r.Context(), sb, shown, rel, err)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(rel)}))
	w.Write(data)
	return nil
}

// whyNotRead turns the agent's refusal of a read into the status the SDKs
// expect, by looking at the path: 404 when it is missing (the SDKs'
// FileNotFoundException), 400 for a directory, 413 over the size limit.
func (h *Handler) whyNotRead(ctx context.Context, sb *Sandbox, shown, rel string, cause error) error {
	var e snippetEntry
	err := h.fsCall(ctx, sb, map[string]any{"op": "stat", "path": sandbox.WorkspacePath + "/" + rel, "shown": shown}, &e)
	var ce *ConnectError
	switch {
	case errors.As(err, &ce) && ce.Code == codeNotFound:
		return httpErrorf(http.StatusNotFound, "file %s not found", truncate(shown, 200))
	case err != nil:
		return cause
	case e.Type == "dir":
		return httpErrorf(http.StatusBadRequest, "%s is a directory, not a file (list it with files.list)", truncate(shown, 200))
	case e.Size > int64(h.config().Volumes.MaxFileSize):
		return httpErrorf(http.StatusRequestEntityTooLarge, "file %s is %d bytes, over the limit of %d bytes (volumes.max_file_size)", truncate(shown, 200), e.Size, int64(h.config().Volumes.MaxFileSize))
	}
	return cause
}

// upload is POST /files: multipart/form-data (each part named "file",
// its filename the destination, or ?path= for the first) or
// application/octet-stream with ?path=.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, sb *Sandbox) error {
	query := r.URL.Query().Get("path")
	var written []writeInfo
	put := func(dest string, body io.Reader) error {
		rel, err := workspaceRel(dest)
		if err != nil {
			return err
		}
		data, err := h.readLimited(body, dest)
		if err != nil {
			return err
		}
		p := sb.Principal()
		if err := h.admitted(r.Context(), p, func(ctx context.Context) error {
			defer h.cmds.use(sb.ID)()
			return h.opts.Engine.WriteFile(ctx, p, sb.ID, rel, data)
		}); err != nil {
			return err
		}
		full := HomeDir + "/" + rel
		written = append(written, writeInfo{Name: path.Base(rel), Type: "file", Path: full})
		return nil
	}
	ct := baseContentType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/octet-stream":
		if query == "" {
			return httpErrorf(http.StatusBadRequest, "an application/octet-stream upload needs ?path= (the destination under %s)", HomeDir)
		}
		body := io.Reader(r.Body)
		switch enc := r.Header.Get("Content-Encoding"); enc {
		case "", "identity":
		case "gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				return httpErrorf(http.StatusBadRequest, "Content-Encoding gzip: the body is not gzip: %v", err)
			}
			defer zr.Close()
			body = zr
		default:
			return httpErrorf(http.StatusBadRequest, "Content-Encoding %q: forge accepts gzip or none", truncate(enc, 40))
		}
		if err := put(query, body); err != nil {
			return err
		}
	case "multipart/form-data":
		mr, err := r.MultipartReader()
		if err != nil {
			return httpErrorf(http.StatusBadRequest, "multipart body: %v", err)
		}
		for n := 0; ; n++ {
			part, err := mr.NextRawPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return httpErrorf(http.StatusBadRequest, "multipart body: %v", err)
			}
			if n >= maxUploadParts {
				return httpErrorf(http.StatusBadRequest, "more than %d files in one upload", maxUploadParts)
			}
			if part.FormName() != "file" {
				continue
			}
			dest := rawFilename(part.Header.Get("Content-Disposition"))
			if query != "" && len(written) == 0 {
				dest = query
			}
			if dest == "" {
				return httpErrorf(http.StatusBadRequest, "a multipart file part without a filename: give the destination as its filename or as ?path=")
			}
			if err := put(dest, part); err != nil {
				return err
			}
		}
		if len(written) == 0 {
			return httpErrorf(http.StatusBadRequest, "no file in the upload: send multipart parts named \"file\"")
		}
	default:
		return httpErrorf(http.StatusBadRequest, "Content-Type %q: upload as multipart/form-data (parts named \"file\") or application/octet-stream with ?path=", truncate(r.Header.Get("Content-Type"), 60))
	}
	writeJSON(w, http.StatusOK, written)
	return nil
}

// rawFilename is the filename of a Content-Disposition as sent: the SDKs
// put the whole destination path there (multipart.Part.FileName keeps
// only its last element).
func rawFilename(cd string) string {
	_, params, err := mime.ParseMediaType(cd)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// readLimited reads an upload of at most volumes.max_file_size bytes.
func (h *Handler) readLimited(body io.Reader, dest string) ([]byte, error) {
	limit := int64(h.config().Volumes.MaxFileSize)
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, httpErrorf(http.StatusRequestEntityTooLarge, "upload over the request limit of %d bytes (volumes.max_file_size per file)", mbe.Limit)
	case err != nil:
		return nil, httpErrorf(http.StatusBadRequest, "reading the upload of %s: %v", truncate(dest, 200), err)
	case int64(len(data)) > limit:
		return nil, httpErrorf(http.StatusRequestEntityTooLarge, "file %s is over the limit of %d bytes (volumes.max_file_size)", truncate(dest, 200), limit)
	}
	return data, nil
}

// fileStatus is the status and message of a /files failure, as the SDKs
// read them: 404 FileNotFoundException, 400 InvalidArgumentException,
// 401, 429 RateLimitException, 502 the sandbox is gone, others
// SandboxException.
func fileStatus(err error) (int, string) {
	var he *httpError
	var ce *ConnectError
	var refused *engine.RefusedError
	switch {
	case errors.As(err, &he):
		return he.status, he.msg
	case errors.As(err, &ce):
		if s, ok := connectStatus[ce.Code]; ok {
			return s, ce.Message
		}
		return http.StatusInternalServerError, ce.Message
	case errors.As(err, &refused) && refused.Kind == engine.RefusedNotFound:
		return http.StatusBadGateway, "the sandbox's session is gone: " + refused.Error()
	}
	if status, _ := rest.StatusOf(err); status != 0 {
		return status, err.Error()
	}
	return http.StatusInternalServerError, "forge failed (not the request's fault): " + err.Error()
}
