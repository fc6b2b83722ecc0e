package e2b

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/server/auth"
)

// Tokens of the tests' two tenants and one without the scopes E2B needs.
const (
	keyA    = "token-of-tenant-a"
	keyB    = "token-of-tenant-b"
	keyRead = "token-without-execute"
)

// fakeClock is a settable Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// face is a handler on the real engine behind an httptest server, with
// tenants a and b.
type face struct {
	h     *Handler
	srv   *httptest.Server
	clock *fakeClock
	eng   *engine.Engine
}

func newFace(t *testing.T) *face {
	t.Helper()
	eng := realEngine(t)
	a, err := auth.NewAuthenticator(nil, []profiles.TokenEntry{
		{Tenant: "e2b-a", Scopes: []string{profiles.ScopeExecute, profiles.ScopeSessions}, SHA256: auth.Hash(keyA)},
		{Tenant: "e2b-b", Scopes: []string{profiles.ScopeAdmin}, SHA256: auth.Hash(keyB)},
		{Tenant: "e2b-r", Scopes: []string{profiles.ScopeSessions}, SHA256: auth.Hash(keyRead)},
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Now()}
	cfg := *eng.Config()
	h, err := New(Options{Engine: eng, Auth: a, Config: &cfg, StateDir: t.TempDir(), Now: clock.now,
		Execute: func(ctx context.Context, req engine.Request) (*kernel.Result, error) { return eng.Execute(ctx, req) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &face{h: h, srv: srv, clock: clock, eng: eng}
}

// call sends a control-plane request with key and decodes the reply into out.
func (f *face) call(t *testing.T, method, path, key string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, f.srv.URL+path, rd)
	if key != "" {
		req.Header.Set(HeaderAPIKey, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
	}
	if resp.StatusCode >= 300 {
		var e Error
		if err := json.Unmarshal(b, &e); err != nil || e.Code != resp.StatusCode || e.Message == "" {
			t.Errorf("%s %s: error body %s is not {code, message} of %d", method, path, b, resp.StatusCode)
		}
	}
	return resp
}

// create makes a sandbox of tenant key and kills it at the end of the test.
func (f *face) create(t *testing.T, key string, body map[string]any) sandboxReply {
	t.Helper()
	if body == nil {
		body = map[string]any{"templateID": "base"}
	}
	var sb sandboxReply
	if resp := f.call(t, "POST", "/v2/sandboxes", key, body, &sb); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: got %d, want 201", resp.StatusCode)
	}
	t.Cleanup(func() { f.call(t, "DELETE", "/sandboxes/"+sb.SandboxID, key, nil, nil) })
	return sb
}

// execute runs code in sb with the access token tok and returns the lines.
func (f *face) execute(t *testing.T, id, tok, code string) (int, []map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/execute", strings.NewReader(`{"code":`+mustJSON(code)+`}`))
	req.Header.Set(HeaderSandboxID, id)
	req.Header.Set(HeaderSandboxPort, InterpreterPort)
	if tok != "" {
		req.Header.Set(HeaderAccessToken, tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return resp.StatusCode, lines
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestOwns(t *testing.T) {
	h := &Handler{cfg: profiles.E2BConfig{Enabled: true}}
	for _, c := range []struct {
		method, path, header string
		want                 bool
	}{
		{"POST", "/sandboxes", "", true},
		{"POST", "/v2/sandboxes", "", true},
		{"DELETE", "/sandboxes/s-1", "", true},
		{"POST", "/v2/sandboxes/s-1/connect", "", true},
		{"POST", "/execute", "s-1", true},
		{"GET", "/health", "s-1", true},
		{"GET", "/healthz", "", false},
		{"POST", "/api/v1/sandboxes", "", false},
		{"POST", "/mcp", "", false},
		{"GET", "/sandboxesX", "", false},
		{"POST", "/v3/templates", "", true},
		{"GET", "/volumes/v-1", "", true},
		{"POST", "/templatesX", "", false},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		if c.header != "" {
			r.Header.Set(HeaderSandboxID, c.header)
		}
		if got := h.Owns(r); got != c.want {
			t.Errorf("Owns(%s %s, id %q) = %v, want %v", c.method, c.path, c.header, got, c.want)
		}
	}
	h.cfg.Enabled = false
	if h.Owns(httptest.NewRequest("POST", "/sandboxes", nil)) {
		t.Error("a disabled face owns /sandboxes")
	}
	var nilH *Handler
	if nilH.Owns(httptest.NewRequest("POST", "/sandboxes", nil)) {
		t.Error("a nil face owns /sandboxes")
	}
}

// TestUnmappedRefused: E2B features forge has no counterpart for get a
// 400 naming what to use instead, after the key is checked.
func TestUnmappedRefused(t *testing.T) {
	f := newFace(t)
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/v3/templates", "forge env build"},
		{"GET", "/templates/t-1/builds/b-1/status", "forge env build"},
		{"POST", "/sandboxes/s-1/snapshots", "pause()"},
		{"GET", "/snapshots", "pause()"},
		{"POST", "/volumes", "/home/user"},
		{"POST", "/sandboxes/s-1/fork", "fork_session"},
		{"PUT", "/sandboxes/s-1/network", "egress"},
	} {
		req, _ := http.NewRequest(c.method, f.srv.URL+c.path, strings.NewReader("{}"))
		req.Header.Set(HeaderAPIKey, keyA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Code != 400 || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s %s: %d %+v, want 400 naming %q", c.method, c.path, resp.StatusCode, e, c.want)
		}
		if resp := f.call(t, c.method, c.path, "wrong", map[string]any{}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong key: %d, want 401", c.method, c.path, resp.StatusCode)
		}
	}
}

func TestAuthAndIsolation(t *testing.T) {
	f := newFace(t)
	sb := f.create(t, keyA, nil)
	if sb.EnvdVersion != EnvdVersion || sb.EnvdAccessToken == "" || sb.ClientID == "" || sb.TemplateID != "base" {
		t.Errorf("create reply %+v", sb)
	}
	for _, c := range []struct {
		name, method, path, key string
		want                    int
	}{
		{"no key", "GET", "/v2/sandboxes", "", 401},
		{"wrong key", "GET", "/v2/sandboxes", "nope", 401},
		{"no scope", "POST", "/v2/sandboxes", keyRead, 403},
		{"other tenant's info", "GET", "/sandboxes/" + sb.SandboxID, keyB, 404},
		{"other tenant's kill", "DELETE", "/sandboxes/" + sb.SandboxID, keyB, 404},
		{"other tenant's connect", "POST", "/v2/sandboxes/" + sb.SandboxID + "/connect", keyB, 404},
		{"other tenant's timeout", "POST", "/sandboxes/" + sb.SandboxID + "/timeout", keyB, 404},
		{"unknown", "GET", "/sandboxes/s-00000000000000000000000000000000", keyA, 404},
		{"unknown path", "GET", "/sandboxes/x/y/z", keyA, 404},
		{"owner's info", "GET", "/sandboxes/" + sb.SandboxID, keyA, 200},
	} {
		if resp := f.call(t, c.method, c.path, c.key, map[string]any{"timeout": 10}, nil); resp.StatusCode != c.want {
			t.Errorf("%s: got %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	var listB []sandboxDetail
	f.call(t, "GET", "/v2/sandboxes", keyB, nil, &listB)
	if len(listB) != 0 {
		t.Errorf("tenant b lists %v", listB)
	}

	// The sandbox plane: the access token.
	if code, _ := f.execute(t, sb.SandboxID, "", "1"); code != 401 {
		t.Errorf("execute without token: got %d, want 401", code)
	}
	if code, _ := f.execute(t, sb.SandboxID, strings.Repeat("0", 64), "1"); code != 401 {
		t.Errorf("execute with a wrong token: got %d, want 401", code)
	}
	if code, _ := f.execute(t, "s-00000000000000000000000000000000", sb.EnvdAccessToken, "1"); code != 502 {
		t.Errorf("execute in an unknown sandbox: got %d, want 502", code)
	}
	code, lines := f.execute(t, sb.SandboxID, sb.EnvdAccessToken, "  x = 20\n  print('hi')\n  x + 1")
	if code != 200 {
		t.Fatalf("execute: %d", code)
	}
	var types []string
	for _, l := range lines {
		types = append(types, l["type"].(string))
	}
	if diff := cmp.Diff([]string{"number_of_executions", "stdout", "result", "end_of_execution"}, types); diff != "" {
		t.Errorf("execute lines (-want +got):\n%s\n%v", diff, lines)
	}
	if len(lines) == 4 && (lines[1]["text"] != "hi\n" || lines[2]["text"] != "21" || lines[2]["is_main_result"] != true) {
		t.Errorf("execute lines %v", lines)
	}
	// The token still works after connect, which hands out the same one.
	var again sandboxReply
	if resp := f.call(t, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", keyA, map[string]any{"timeout": 60}, &again); resp.StatusCode != 200 || again.EnvdAccessToken != sb.EnvdAccessToken {
		t.Errorf("connect: %d, token %q (create gave %q)", resp.StatusCode, again.EnvdAccessToken, sb.EnvdAccessToken)
	}
	// Killed: 204, then 404, and the sandbox plane answers 502.
	if resp := f.call(t, "DELETE", "/sandboxes/"+sb.SandboxID, keyA, nil, nil); resp.StatusCode != 204 {
		t.Errorf("kill: got %d, want 204", resp.StatusCode)
	}
	if resp := f.call(t, "DELETE", "/sandboxes/"+sb.SandboxID, keyA, nil, nil); resp.StatusCode != 404 {
		t.Errorf("kill again: got %d, want 404", resp.StatusCode)
	}
	if code, _ := f.execute(t, sb.SandboxID, sb.EnvdAccessToken, "1"); code != 502 {
		t.Errorf("execute after kill: got %d, want 502", code)
	}
}

func TestCreateRefusals(t *testing.T) {
	f := newFace(t)
	for _, body := range []map[string]any{
		{"templateID": "base", "allow_internet_access": true},
		{"templateID": "base", "network": map[string]any{"allowOut": []string{"example.com"}}},
		{"templateID": "base", "volumeMounts": []any{map[string]any{"name": "v", "path": "/data"}}},
		{"templateID": "base", "mcp": map[string]any{"x": 1}},
		{"templateID": "base", "timeout": 0},
		{"templateID": "base", "timeout": 10 << 20},
		{"templateID": "no-such-image-or-env"},
	} {
		if resp := f.call(t, "POST", "/v2/sandboxes", keyA, body, nil); resp.StatusCode != 400 {
			t.Errorf("create %v: got %d, want 400", body, resp.StatusCode)
		}
	}
}

func TestListPaging(t *testing.T) {
	f := newFace(t)
	var ids []string
	for i := range 3 {
		md := map[string]string{"n": string(rune('0' + i))}
		if i < 2 {
			md["pair"] = "yes"
		}
		ids = append(ids, f.create(t, keyA, map[string]any{"templateID": "base", "metadata": md}).SandboxID)
		f.clock.add(time.Second) // distinct creation times
	}
	var page1, page2 []sandboxDetail
	resp := f.call(t, "GET", "/v2/sandboxes?limit=2", keyA, nil, &page1)
	next := resp.Header.Get("X-Next-Token")
	if len(page1) != 2 || next == "" {
		t.Fatalf("page 1: %d items, next token %q", len(page1), next)
	}
	resp = f.call(t, "GET", "/v2/sandboxes?limit=2&nextToken="+next, keyA, nil, &page2)
	if len(page2) != 1 || resp.Header.Get("X-Next-Token") != "" {
		t.Fatalf("page 2: %d items, next token %q", len(page2), resp.Header.Get("X-Next-Token"))
	}
	got := []string{page1[0].SandboxID, page1[1].SandboxID, page2[0].SandboxID}
	if diff := cmp.Diff([]string{ids[2], ids[1], ids[0]}, got); diff != "" {
		t.Errorf("listing order, newest first (-want +got):\n%s", diff)
	}
	for _, d := range append(page1, page2...) {
		if d.StartedAt == "" || d.EndAt == "" || d.State != "running" || d.EnvdVersion == "" || d.MemoryMB == 0 || d.CPUCount == 0 || d.TemplateID == "" {
			t.Errorf("listed sandbox lacks a required field: %+v", d)
		}
	}
	var pair []sandboxDetail
	f.call(t, "GET", "/v2/sandboxes?metadata=pair%3Dyes", keyA, nil, &pair)
	if len(pair) != 2 {
		t.Errorf("metadata filter pair=yes: %d sandboxes, want 2", len(pair))
	}
	var paused []sandboxDetail
	f.call(t, "GET", "/v2/sandboxes?state=paused", keyA, nil, &paused)
	if len(paused) != 0 {
		t.Errorf("state=paused lists %d running sandboxes", len(paused))
	}
	var v1 []sandboxDetail
	f.call(t, "GET", "/sandboxes", keyA, nil, &v1)
	if len(v1) != 3 {
		t.Errorf("v1 list: %d sandboxes, want 3", len(v1))
	}
	if resp := f.call(t, "GET", "/v2/sandboxes?nextToken=garbage", keyA, nil, nil); resp.StatusCode != 400 {
		t.Errorf("a bad nextToken: got %d, want 400", resp.StatusCode)
	}
}

func TestTimeoutReaper(t *testing.T) {
	f := newFace(t)
	short := f.create(t, keyA, map[string]any{"templateID": "base", "timeout": 5})
	long := f.create(t, keyA, map[string]any{"templateID": "base", "timeout": 60})
	// set_timeout moves the end from now.
	if resp := f.call(t, "POST", "/sandboxes/"+long.SandboxID+"/timeout", keyA, map[string]any{"timeout": 3}, nil); resp.StatusCode != 204 {
		t.Fatalf("set_timeout: got %d, want 204", resp.StatusCode)
	}
	if resp := f.call(t, "POST", "/sandboxes/"+short.SandboxID+"/timeout", keyA, map[string]any{"timeout": 30}, nil); resp.StatusCode != 204 {
		t.Fatalf("set_timeout: got %d, want 204", resp.StatusCode)
	}
	f.clock.add(10 * time.Second)
	f.h.reap()
	p := engine.Principal{Tenant: auth.TenantPrefix + "e2b-a"}
	sessions, err := f.eng.ListSessions(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, s := range sessions {
		live[s.ID] = true
	}
	if live[long.SandboxID] {
		t.Errorf("the sandbox whose timeout ended still has its session")
	}
	if !live[short.SandboxID] {
		t.Errorf("the sandbox whose timeout was extended lost its session")
	}
	if resp := f.call(t, "GET", "/sandboxes/"+long.SandboxID, keyA, nil, nil); resp.StatusCode != 404 {
		t.Errorf("info of a reaped sandbox: got %d, want 404", resp.StatusCode)
	}
	if resp := f.call(t, "GET", "/sandboxes/"+short.SandboxID, keyA, nil, nil); resp.StatusCode != 200 {
		t.Errorf("info of a live sandbox: got %d, want 200", resp.StatusCode)
	}
}

func TestPauseConnect(t *testing.T) {
	f := newFace(t)
	sb := f.create(t, keyA, nil)
	if code, _ := f.execute(t, sb.SandboxID, sb.EnvdAccessToken, "y = 41"); code != 200 {
		t.Fatal(code)
	}
	if resp := f.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", keyA, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("pause: got %d, want 204", resp.StatusCode)
	}
	if resp := f.call(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", keyA, nil, nil); resp.StatusCode != 409 {
		t.Errorf("pause again: got %d, want 409", resp.StatusCode)
	}
	var d sandboxDetail
	f.call(t, "GET", "/sandboxes/"+sb.SandboxID, keyA, nil, &d)
	if d.State != "paused" {
		t.Errorf("state after pause: %q", d.State)
	}
	if resp := f.call(t, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", keyA, map[string]any{"timeout": 60}, nil); resp.StatusCode != 201 {
		t.Errorf("connect to a paused sandbox: got %d, want 201", resp.StatusCode)
	}
	_, lines := f.execute(t, sb.SandboxID, sb.EnvdAccessToken, "import os\n(y + 1, os.environ['HOME'])")
	var text any
	for _, l := range lines {
		if l["type"] == "result" {
			text = l["text"]
		}
	}
	if text != "(42, '/home/user')" {
		t.Errorf("after resume: %v", lines)
	}
}

func TestPyText(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{"abc", "abc"},
		{json.Number("2"), "2"},
		{json.Number("2.5"), "2.5"},
		{true, "True"},
		{[]any{json.Number("1"), "a'b", nil}, `[1, "a'b", None]`},
		{map[string]any{"b": false, "a": "x\ny"}, `{'a': 'x\ny', 'b': False}`},
	} {
		if got := pyText(c.v); got != c.want {
			t.Errorf("pyText(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestDedent(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"x = 1", "x = 1"},
		{"\n    x = 1\n    if x:\n        y = 2\n", "\nx = 1\nif x:\n    y = 2\n"},
		{"  a\n\n  b", "a\n\nb"},
		{"  a\n b", " a\nb"},
	} {
		if got := dedent(c.in); got != c.want {
			t.Errorf("dedent(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestResultLines(t *testing.T) {
	res := &kernel.Result{
		Result: json.Number("3"),
		Display: []kernel.Display{
			{MimeType: "text/html", Data: "<b>1</b>"}, {MimeType: "text/plain", Data: "one"},
			{MimeType: "image/png", Data: "iVBO"},
			{MimeType: "application/x-thing", Data: "z"},
		},
		Groups: []kernel.DisplayGroup{{First: 0}, {First: 2}, {First: 3, Main: true}},
	}
	got := resultLines(res)
	want := []map[string]any{
		{"type": "result", "is_main_result": false, "html": "<b>1</b>", "text": "one"},
		{"type": "result", "is_main_result": false, "png": "iVBO"},
		{"type": "result", "is_main_result": true, "text": "3", "extra": map[string]any{"application/x-thing": "z"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
