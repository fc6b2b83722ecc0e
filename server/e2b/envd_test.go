package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/test/testutil"
)

func TestMain(m *testing.M) {
	if hooks.Reexec() {
		return
	}
	code := m.Run()
	if realEng != nil {
		realEng.Close(5 * time.Second)
	}
	os.Exit(code)
}

// One engine per test binary: it owns the sandbox runtime of this process.
var (
	realOnce sync.Once
	realEng  *engine.Engine
	realErr  error
)

// realEngine is an engine on the shared test state directory with
// forge/python:3.11 imported.
func realEngine(t *testing.T) *engine.Engine {
	t.Helper()
	testutil.RequiresRoot(t)
	layout := testutil.BaseImageLayout(t, "forge/python:3.11")
	stateDir := testutil.StateDir(t)
	realOnce.Do(func() {
		realErr = errors.New("the engine's setup did not finish (see the first test that failed)")
		cfg := profiles.Default()
		cfg.StateDir = stateDir
		cfg.Pool.Size = 1
		eng, err := engine.New(context.Background(), engine.Options{Config: cfg})
		if realErr = err; err != nil {
			return
		}
		realEng = eng
		_, realErr = eng.Store().Pull(context.Background(), "oci:"+layout)
	})
	if realErr != nil {
		t.Fatalf("starting the engine: %v", realErr)
	}
	return realEng
}

// envdSandbox is a handler on the real engine and one sandbox of it (a
// fresh session), for calling the envd handlers directly (the router's
// authentication is e2b.go's, tested there).
func envdSandbox(t *testing.T) (*Handler, *Sandbox) {
	t.Helper()
	eng := realEngine(t)
	cfg := *eng.Config()
	cfg.Volumes.MaxFileSize = 64 << 10 // the handler's own limit, below the engine's
	h, err := New(Options{Engine: eng, Config: &cfg, StateDir: t.TempDir(),
		Execute: func(ctx context.Context, req engine.Request) (*kernel.Result, error) { return eng.Execute(ctx, req) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	p := engine.Principal{Tenant: "e2b-test"}
	res, err := eng.Execute(t.Context(), engine.Request{Principal: p, Code: "None", NewSession: true})
	if err != nil || res.SessionID == nil {
		t.Fatalf("creating a session: %v", err)
	}
	t.Cleanup(func() { eng.DestroySession(context.Background(), p, *res.SessionID) })
	now := time.Now()
	sb := &Sandbox{ID: *res.SessionID, Owner: p.Tenant, Created: now, EndAt: now.Add(time.Hour)}
	if err := h.reg.put(sb); err != nil {
		t.Fatal(err)
	}
	return h, sb
}

// unary calls an RPC of sb and decodes its reply (or Connect error).
func unary(t *testing.T, h *Handler, sb *Sandbox, method string, req any, resp any) (int, *ConnectError) {
	t.Helper()
	b, _ := json.Marshal(req)
	r := httptest.NewRequest(http.MethodPost, "/"+method, bytes.NewReader(b))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	svc, m, _ := strings.Cut(method, "/")
	if svc == "process.Process" {
		h.serveProcess(w, r, sb, m)
	} else {
		h.serveFilesystem(w, r, sb, m)
	}
	if w.Code != http.StatusOK {
		var ce ConnectError
		if err := json.Unmarshal(w.Body.Bytes(), &ce); err != nil {
			t.Fatalf("%s: %d %s is not a Connect error", method, w.Code, w.Body)
		}
		return w.Code, &ce
	}
	if resp != nil {
		if err := json.Unmarshal(w.Body.Bytes(), resp); err != nil {
			t.Fatalf("%s: %s: %v", method, w.Body, err)
		}
	}
	return w.Code, nil
}

func TestFilesystemRPCs(t *testing.T) {
	h, sb := envdSandbox(t)
	var mk struct{ Entry map[string]any }
	if code, ce := unary(t, h, sb, "filesystem.Filesystem/MakeDir", map[string]any{"path": "/home/user/d/e"}, &mk); ce != nil {
		t.Fatalf("MakeDir: %d %v", code, ce)
	}
	if mk.Entry["type"] != "FILE_TYPE_DIRECTORY" || mk.Entry["path"] != "/home/user/d/e" || mk.Entry["name"] != "e" {
		t.Errorf("MakeDir entry %v", mk.Entry)
	}
	if code, ce := unary(t, h, sb, "filesystem.Filesystem/MakeDir", map[string]any{"path": "d/e"}, nil); ce == nil || ce.Code != codeAlreadyExists || code != 409 {
		t.Errorf("MakeDir again: got %d %v, want 409 already_exists", code, ce)
	}
	if err := h.opts.Engine.WriteFile(t.Context(), sb.Principal(), sb.ID, "d/f.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	var st struct{ Entry map[string]any }
	if _, ce := unary(t, h, sb, "filesystem.Filesystem/Stat", map[string]any{"path": "/home/user/d/f.txt"}, &st); ce != nil {
		t.Fatal(ce)
	}
	e := st.Entry
	if e["type"] != "FILE_TYPE_FILE" || e["size"] != "5" || e["path"] != "/home/user/d/f.txt" || e["permissions"] != "-rw-r--r--" || e["mode"] != float64(0o644) {
		t.Errorf("Stat entry %v", e)
	}
	if _, err := time.Parse(time.RFC3339Nano, e["modifiedTime"].(string)); err != nil {
		t.Errorf("modifiedTime: %v", err)
	}
	var ls struct{ Entries []map[string]any }
	unary(t, h, sb, "filesystem.Filesystem/ListDir", map[string]any{"path": "/home/user/d", "depth": 1}, &ls)
	if got := names(ls.Entries); got != "/home/user/d/e,/home/user/d/f.txt" {
		t.Errorf("ListDir depth 1: %s", got)
	}
	if _, ce := unary(t, h, sb, "filesystem.Filesystem/Move", map[string]any{"source": "d/f.txt", "destination": "/home/user/d/e/g.txt"}, &st); ce != nil || st.Entry["path"] != "/home/user/d/e/g.txt" {
		t.Fatalf("Move: %v %v", ce, st.Entry)
	}
	unary(t, h, sb, "filesystem.Filesystem/ListDir", map[string]any{"path": "/home/user/d", "depth": 2}, &ls)
	if got := names(ls.Entries); got != "/home/user/d/e,/home/user/d/e/g.txt" {
		t.Errorf("ListDir depth 2: %s", got)
	}
	if _, ce := unary(t, h, sb, "filesystem.Filesystem/Remove", map[string]any{"path": "/home/user/d"}, nil); ce != nil {
		t.Fatal(ce)
	}
	for _, tt := range []struct {
		method string
		req    map[string]any
		status int
		code   string
		msg    string
	}{
		{"Stat", map[string]any{"path": "/home/user/d"}, 404, codeNotFound, "no such file"},
		{"Remove", map[string]any{"path": "/home/user/nope"}, 404, codeNotFound, "no such file"},
		{"ListDir", map[string]any{"path": "/home/user/nope"}, 404, codeNotFound, "no such file"},
		{"Stat", map[string]any{"path": "/etc/passwd"}, 400, codeInvalidArgument, "outside /home/user"},
		{"Stat", map[string]any{"path": "../../etc"}, 400, codeInvalidArgument, "outside /home/user"},
		{"Move", map[string]any{"source": "a", "destination": "/tmp/a"}, 400, codeInvalidArgument, "outside /home/user"},
		{"Remove", map[string]any{"path": "/home/user"}, 400, codeInvalidArgument, "cannot be removed"},
		{"WatchDir", map[string]any{"path": "/home/user"}, 501, codeUnimplemented, "does not watch"},
	} {
		if code, ce := unary(t, h, sb, "filesystem.Filesystem/"+tt.method, tt.req, nil); ce == nil || code != tt.status || ce.Code != tt.code || !strings.Contains(ce.Message, tt.msg) {
			t.Errorf("%s %v: got %d %v, want %d %s with %q", tt.method, tt.req, code, ce, tt.status, tt.code, tt.msg)
		}
	}
}

func names(entries []map[string]any) string {
	var out []string
	for _, e := range entries {
		out = append(out, e["path"].(string))
	}
	return strings.Join(out, ",")
}

func TestFiles(t *testing.T) {
	h, sb := envdSandbox(t)
	call := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.serveFiles(w, r, sb)
		return w
	}
	// Multipart as the Python SDK sends it: the destination is the filename.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "/home/user/sub/a.txt")
	fw.Write([]byte("hi there"))
	mw.Close()
	r := httptest.NewRequest(http.MethodPost, "/files?path=%2Fhome%2Fuser%2Fsub%2Fa.txt", &body)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	if w := call(r); w.Code != 200 || strings.TrimSpace(w.Body.String()) != `[{"name":"a.txt","type":"file","path":"/home/user/sub/a.txt"}]` {
		t.Fatalf("upload: %d %s", w.Code, w.Body)
	}
	// Octet-stream with gzip, a relative path.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	r = httptest.NewRequest(http.MethodPost, "/files?path=b.bin", &gz)
	r.Header.Set("Content-Type", "application/octet-stream")
	r.Header.Set("Content-Encoding", "gzip")
	if w := call(r); w.Code != 200 || !strings.Contains(w.Body.String(), `"path":"/home/user/b.bin"`) {
		t.Fatalf("octet upload: %d %s", w.Code, w.Body)
	}
	for path, want := range map[string]string{"/home/user/sub/a.txt": "hi there", "b.bin": "zipped"} {
		w := call(httptest.NewRequest(http.MethodGet, "/files?path="+path, nil))
		if w.Code != 200 || w.Body.String() != want {
			t.Errorf("download %s: %d %q, want %q", path, w.Code, w.Body, want)
		}
	}
	big := bytes.Repeat([]byte("x"), 64<<10+1)
	for _, tt := range []struct {
		name   string
		r      *http.Request
		status int
		msg    string
	}{
		{"missing", httptest.NewRequest(http.MethodGet, "/files?path=/home/user/nope.txt", nil), 404, "not found"},
		{"directory", httptest.NewRequest(http.MethodGet, "/files?path=/home/user/sub", nil), 400, "is a directory"},
		{"outside", httptest.NewRequest(http.MethodGet, "/files?path=/etc/passwd", nil), 400, "/home/user"},
		{"root user", httptest.NewRequest(http.MethodGet, "/files?path=a&username=root", nil), 400, "unprivileged user"},
		{"no path", octet("/files", []byte("x")), 400, "needs ?path="},
		{"too large", octet("/files?path=big", big), 413, "volumes.max_file_size"},
		{"outside upload", octet("/files?path=/tmp/x", []byte("x")), 400, "/home/user"},
		{"bad type", httptest.NewRequest(http.MethodPost, "/files?path=x", strings.NewReader("x")), 400, "multipart/form-data"},
	} {
		w := call(tt.r)
		var e Error
		json.Unmarshal(w.Body.Bytes(), &e)
		if w.Code != tt.status || e.Code != tt.status || !strings.Contains(e.Message, tt.msg) {
			t.Errorf("%s: got %d %s, want %d with %q", tt.name, w.Code, w.Body, tt.status, tt.msg)
		}
	}
}

func octet(target string, data []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(data))
	r.Header.Set("Content-Type", "application/octet-stream")
	return r
}

// startCommand calls process.Process/Start over HTTP/1.1 (as the SDKs
// do on plain http) with req and returns the events and the end of the
// stream; on sees each event as it arrives.
func startCommand(t *testing.T, h *Handler, sb *Sandbox, ctx context.Context, req map[string]any, timeoutMs string, on ...func(processEvent)) (events []processEvent, times []time.Time, end string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serveProcess(w, r, sb, "Start") }))
	defer srv.Close()
	b, _ := json.Marshal(req)
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/process.Process/Start", bytes.NewReader(envelope(0, string(b))))
	r.Header.Set("Content-Type", contentTypeStream)
	if timeoutMs != "" {
		r.Header.Set("Connect-Timeout-Ms", timeoutMs)
	}
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for {
		flags, payload, err := readEnvelope(resp.Body, 1<<24)
		if err != nil {
			t.Fatalf("reading the stream: %v (events so far %+v)", err, events)
		}
		if flags&flagEndStream != 0 {
			return events, times, string(payload)
		}
		var ev eventResponse
		if err := json.Unmarshal(payload, &ev); err != nil {
			t.Fatal(err)
		}
		events = append(events, ev.Event)
		times = append(times, time.Now())
		for _, f := range on {
			f(ev.Event)
		}
	}
}

func bashRequest(cmd string) map[string]any {
	return map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}}, "stdin": false}
}

func output(events []processEvent) (stdout, stderr string, end *endEvent) {
	for _, e := range events {
		if e.Data != nil {
			stdout += string(e.Data.Stdout)
			stderr += string(e.Data.Stderr)
		}
		if e.End != nil {
			end = e.End
		}
	}
	return
}

func TestProcessStart(t *testing.T) {
	h, sb := envdSandbox(t)
	events, _, end := startCommand(t, h, sb, t.Context(), bashRequest("echo hi; echo oops >&2; exit 3"), "")
	if len(events) == 0 || events[0].Start == nil || events[0].Start.Pid == 0 {
		t.Fatalf("first event %+v, want start with a pid", events)
	}
	stdout, stderr, ev := output(events)
	if stdout != "hi\n" || stderr != "oops\n" || ev == nil || ev.ExitCode != 3 || !ev.Exited || ev.Status != "exit status 3" || end != "{}" {
		t.Errorf("got stdout %q stderr %q end %+v stream end %s", stdout, stderr, ev, end)
	}

	// cwd, environment (the request's over the sandbox's), HOME.
	sb.EnvVars = map[string]string{"FROM_CREATE": "c", "FOO": "overridden"}
	req := bashRequest(`pwd; echo "$FOO $FROM_CREATE $HOME"; ls`)
	req["process"].(map[string]any)["envs"] = map[string]string{"FOO": "bar"}
	req["process"].(map[string]any)["cwd"] = "/home/user"
	h.opts.Engine.WriteFile(t.Context(), sb.Principal(), sb.ID, "marker.txt", []byte("x"))
	events, _, _ = startCommand(t, h, sb, t.Context(), req, "")
	if stdout, stderr, _ := output(events); stdout != "/home/user\nbar c /home/user\nmarker.txt\n" {
		t.Errorf("got %q (stderr %q)", stdout, stderr)
	}

	// Output streams while the command runs.
	events, times, _ := startCommand(t, h, sb, t.Context(), bashRequest("echo a; sleep 1.5; echo b"), "")
	var first, last time.Time
	for i, e := range events {
		if e.Data != nil && first.IsZero() {
			first = times[i]
		}
		if e.End != nil {
			last = times[i]
		}
	}
	if first.IsZero() || last.Sub(first) < time.Second {
		t.Errorf("first output %v before the end, want it streamed at once", last.Sub(first))
	}

	// A lot of output arrives whole and in order.
	events, _, _ = startCommand(t, h, sb, t.Context(), bashRequest("seq 1 100000"), "")
	if stdout, _, _ := output(events); len(stdout) != 588895 || !strings.HasSuffix(stdout, "99999\n100000\n") {
		t.Errorf("seq: %d bytes, ends %q", len(stdout), stdout[max(0, len(stdout)-20):])
	}
}

func TestProcessTimeoutAndKill(t *testing.T) {
	h, sb := envdSandbox(t)
	start := time.Now()
	_, _, end := startCommand(t, h, sb, t.Context(), bashRequest("sleep 30"), "1500")
	if !strings.Contains(end, `"code":"deadline_exceeded"`) || time.Since(start) > 10*time.Second {
		t.Errorf("timeout: end %s after %v", end, time.Since(start))
	}

	done := make(chan []processEvent)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		events, _, _ := startCommand(t, h, sb, t.Context(), bashRequest("echo started; sleep 30"), "", func(e processEvent) {
			if e.Data != nil {
				once.Do(func() { close(started) })
			}
		})
		done <- events
	}()
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("the command's first output did not stream")
	}
	var list listResponse
	unary(t, h, sb, "process.Process/List", struct{}{}, &list)
	if len(list.Processes) != 1 || list.Processes[0].Config.Cmd != "/bin/bash" {
		t.Fatalf("List: %+v", list)
	}
	pid := list.Processes[0].Pid
	if _, ce := unary(t, h, sb, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"}, nil); ce != nil {
		t.Fatal(ce)
	}
	select {
	case events := <-done:
		stdout, _, ev := output(events)
		if stdout != "started\n" || ev == nil || ev.ExitCode != -1 || ev.Status != "signal: killed" {
			t.Errorf("killed: stdout %q end %+v", stdout, ev)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the killed command's stream did not end")
	}
	if code, ce := unary(t, h, sb, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"}, nil); ce == nil || code != 404 {
		t.Errorf("signal to an ended command: %d %v, want 404 not_found", code, ce)
	}
	// The session still works after the kill.
	events, _, _ := startCommand(t, h, sb, t.Context(), bashRequest("echo again"), "")
	if stdout, _, _ := output(events); stdout != "again\n" {
		t.Errorf("after the kill: %q", stdout)
	}
}

func TestProcessRefusals(t *testing.T) {
	h, sb := envdSandbox(t)
	for _, tt := range []struct {
		name string
		req  map[string]any
		want string
	}{
		{"pty", map[string]any{"process": map[string]any{"cmd": "/bin/bash"}, "pty": map[string]any{"size": map[string]any{"cols": 80, "rows": 24}}}, "no PTY"},
		{"no command", map[string]any{"process": map[string]any{}}, "process.cmd is required"},
		{"cwd outside", map[string]any{"process": map[string]any{"cmd": "/bin/true", "cwd": "/etc"}}, "outside /home/user"},
		{"missing cwd", map[string]any{"process": map[string]any{"cmd": "/bin/true", "cwd": "/home/user/nope"}}, "is not a directory"},
		{"missing program", map[string]any{"process": map[string]any{"cmd": "/bin/nope"}}, "No such file"},
	} {
		_, _, end := startCommand(t, h, sb, t.Context(), tt.req, "")
		if !strings.Contains(end, `"error"`) || !strings.Contains(end, tt.want) {
			t.Errorf("%s: end %s, want an error with %q", tt.name, end, tt.want)
		}
	}
	for _, tt := range []struct {
		method string
		code   int
	}{{"SendInput", 404}, {"CloseStdin", 404}, {"Update", 501}, {"StreamInput", 501}} {
		if code, ce := unary(t, h, sb, "process.Process/"+tt.method, map[string]any{"process": map[string]any{"pid": 1}}, nil); ce == nil || code != tt.code {
			t.Errorf("%s: %d %v, want %d", tt.method, code, ce, tt.code)
		}
	}
	// A user other than E2B's default is refused.
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"path":"/home/user"}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	w := httptest.NewRecorder()
	h.serveFilesystem(w, r, sb, "Stat")
	if w.Code != 403 || !strings.Contains(w.Body.String(), "permission_denied") {
		t.Errorf("root: %d %s", w.Code, w.Body)
	}
}
