package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/bridge"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/pool"
	"github.com/mcp-forge/forge/runtime/session"
)

func TestMain(m *testing.M) {
	if hooks.Reexec() {
		return
	}
	code := m.Run()
	closeRealEngine()
	os.Exit(code)
}

// stubEngine answers Execute with a fixed reply; for the tests of the MCP
// surface that need no sandbox.
type stubEngine struct {
	cfg *profiles.Config
	res *kernel.Result
	err error

	mu   sync.Mutex
	reqs []engine.Request
}

func newStub() *stubEngine {
	cfg := profiles.Default()
	cfg.StateDir = "/nonexistent"
	return &stubEngine{cfg: cfg, res: &kernel.Result{Success: true, Stdout: "stub\n"}}
}

func (e *stubEngine) Execute(_ context.Context, req engine.Request) (*kernel.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reqs = append(e.reqs, req)
	return e.res, e.err
}
func (e *stubEngine) Config() *profiles.Config { return e.cfg }
func (e *stubEngine) BuildEnvironment(_ context.Context, _ engine.Principal, req build.Request) (*build.Result, error) {
	return nil, &engine.RefusedError{Kind: engine.RefusedInvalid, Err: fmt.Errorf("%w: the stub builds nothing", build.ErrDisabled)}
}
func (e *stubEngine) ListEnvironments(context.Context, engine.Principal) ([]build.Environment, error) {
	return nil, nil
}
func (e *stubEngine) Installer() string { return "uv" }

// The stub has no sessions, images, pools or tools: every session id is
// unknown, as it would be to a fresh engine.
func (e *stubEngine) notFound(id string) error {
	return &engine.RefusedError{Kind: engine.RefusedNotFound, Err: fmt.Errorf("%w: %s", session.ErrNotFound, id)}
}
func (e *stubEngine) ListSessions(context.Context, engine.Principal) ([]session.Info, error) {
	return nil, nil
}
func (e *stubEngine) SessionState(_ context.Context, _ engine.Principal, id string) (*session.Meta, error) {
	return nil, e.notFound(id)
}
func (e *stubEngine) DocumentState(_ context.Context, _ engine.Principal, id string, _ map[string]string, _ string, _ bool) (*session.Documented, error) {
	return nil, e.notFound(id)
}
func (e *stubEngine) DestroySession(_ context.Context, _ engine.Principal, id string) error {
	return e.notFound(id)
}
func (e *stubEngine) ForkSession(_ context.Context, _ engine.Principal, id, _ string) (*session.Fork, error) {
	return nil, e.notFound(id)
}
func (e *stubEngine) WriteFile(_ context.Context, _ engine.Principal, id, _ string, _ []byte) error {
	return e.notFound(id)
}
func (e *stubEngine) ReadFile(_ context.Context, _ engine.Principal, id, _ string) ([]byte, error) {
	return nil, e.notFound(id)
}
func (e *stubEngine) ListFiles(_ context.Context, _ engine.Principal, id string) ([]kernel.FileInfo, error) {
	return nil, e.notFound(id)
}
func (e *stubEngine) Images(context.Context) ([]rootfs.Image, error) { return nil, nil }
func (e *stubEngine) PoolStats() []pool.Stats                        { return nil }
func (e *stubEngine) TenantPools() bool                              { return false }
func (e *stubEngine) ToolCatalog() []bridge.Tool                     { return nil }

// The real engine is what the server is built for.
var _ Engine = (*engine.Engine)(nil)

func (e *stubEngine) calls() []engine.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.Request(nil), e.reqs...)
}

// connect serves s over stdio through pipes and returns an initialized
// mcp-go client of it; cleanup closes the client and waits for the server.
func connect(t *testing.T, s *Server) *client.Client {
	t.Helper()
	toServer, clientOut := io.Pipe()
	clientIn, fromServer := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.ServeStdio(context.Background(), toServer, fromServer)
		fromServer.Close()
		done <- err
	}()
	c := client.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
	t.Cleanup(func() {
		c.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeStdio: %v", err)
		}
	})
	ctx := t.Context()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "forge-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c
}

func call(t *testing.T, c *client.Client, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = toolExecute
	req.Params.Arguments = args
	return c.CallTool(t.Context(), req)
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsList(t *testing.T) {
	c := connect(t, New(newStub(), Options{Version: "test"}))
	res, err := c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var tool mcp.Tool
	names := map[string]bool{}
	for _, tl := range res.Tools {
		names[tl.Name] = true
		if tl.Name == toolExecute {
			tool = tl
		}
	}
	for _, want := range []string{toolExecute, toolDocumentState, toolListSessions, toolDestroySession, toolForkSession, toolWriteFile, toolReadFile, toolListFiles} {
		if !names[want] {
			t.Errorf("tools/list lacks %s; got %v", want, names)
		}
	}
	if len(res.Tools) != 8 {
		t.Fatalf("got %d tools, want 8", len(res.Tools))
	}
	a := tool.Annotations
	if a.Title == "" || a.ReadOnlyHint == nil || *a.ReadOnlyHint || a.OpenWorldHint == nil || *a.OpenWorldHint ||
		a.DestructiveHint == nil || *a.DestructiveHint || a.IdempotentHint == nil || *a.IdempotentHint {
		t.Errorf("got annotations %+v, want a title and all hints false", a)
	}
	for _, want := range []string{"at most 5m", "at most 2g", "no network"} {
		if !strings.Contains(tool.Description, want) {
			t.Errorf("description lacks %q:\n%s", want, tool.Description)
		}
	}
	if tool.OutputSchema.Type != "object" || tool.OutputSchema.Properties["stdout"] == nil {
		t.Errorf("got output schema %+v, want the ExecutionResult schema", tool.OutputSchema)
	}
	if tool.InputSchema.Required[0] != "code" {
		t.Errorf("got required %v, want [code]", tool.InputSchema.Required)
	}
}

func TestInitializeInstructions(t *testing.T) {
	s := New(newStub(), Options{Version: "test"})
	toServer, clientOut := io.Pipe()
	clientIn, fromServer := io.Pipe()
	go s.ServeStdio(context.Background(), toServer, fromServer)
	c := client.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
	defer c.Close()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	res, err := c.Initialize(t.Context(), init)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Stateless", "matplotlib", "display(", "No network", "timeout: 30s by default, at most 5m"} {
		if !strings.Contains(res.Instructions, want) {
			t.Errorf("instructions lack %q", want)
		}
	}
	if res.Capabilities.Logging == nil || res.Capabilities.Tools == nil || res.Capabilities.Resources == nil {
		t.Errorf("got capabilities %+v, want logging, tools and resources", res.Capabilities)
	}
	if res.ServerInfo.Version != "test" {
		t.Errorf("got version %q, want test", res.ServerInfo.Version)
	}
}

func TestProtocolErrors(t *testing.T) {
	stub := newStub()
	c := connect(t, New(stub, Options{}))
	for _, args := range []any{
		map[string]any{},
		map[string]any{"code": 1},
		map[string]any{"code": "x", "timeout": "10"},
		map[string]any{"code": "x", "timeout": -5},
		map[string]any{"code": "x", "memory": "much"},
		map[string]any{"code": "x", "backend": "docker"},
		map[string]any{"code": "x", "unknown": true},
		[]any{"print(1)"},
	} {
		res, err := call(t, c, args)
		if !errors.Is(err, mcp.ErrInvalidParams) {
			t.Errorf("arguments %v: got %v, %v; want a JSON-RPC invalid-params error", args, res, err)
		}
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "no_such_tool"
	if _, err := c.CallTool(t.Context(), req); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown tool: got %v, want a protocol error saying not found", err)
	}
	if n := len(stub.calls()); n != 0 {
		t.Errorf("engine called %d times for malformed requests, want 0", n)
	}
}

// TestEnvAndEnvironmentReachTheEngine: env (variables) and environment (a
// preset) are passed on as they are, each to its own field.
func TestEnvAndEnvironmentReachTheEngine(t *testing.T) {
	stub := newStub()
	c := connect(t, New(stub, Options{}))
	if _, err := call(t, c, map[string]any{"code": "x", "env": map[string]string{"A": "1"}, "environment": "web"}); err != nil {
		t.Fatal(err)
	}
	reqs := stub.calls()
	if len(reqs) != 1 || reqs[0].Env["A"] != "1" || reqs[0].Environment != "web" || reqs[0].Image != "" {
		t.Errorf("engine got %+v, want env A=1 and environment web", reqs)
	}
}

func TestEngineErrors(t *testing.T) {
	stub := newStub()
	c := connect(t, New(stub, Options{}))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&engine.RefusedError{Kind: engine.RefusedInvalid, Err: fmt.Errorf("%w: timeout 10m0s exceeds the maximum 5m0s (execution.max_timeout)", engine.ErrInvalidRequest)}, "Request refused: timeout 10m0s exceeds the maximum 5m0s (execution.max_timeout)"},
		{errors.New("libcontainer exploded"), "not of your code): libcontainer exploded"},
		{engine.ErrClosed, "shutting down"},
		{&engine.RefusedError{Kind: engine.RefusedBusy, Err: fmt.Errorf("%w: 1 executions are running (execution.max_concurrent) and none finished within 1s (execution.queue_timeout); retry later", engine.ErrBusy)},
			"Not run: forge is busy: 1 executions are running (execution.max_concurrent) and none finished within 1s (execution.queue_timeout); retry later. Your code did not start; send the same call again."},
		{&engine.RefusedError{Kind: engine.RefusedNotFound, Err: fmt.Errorf("%w: \"forge/nope:1\"", rootfs.ErrImageNotFound)}, "Request refused: image not found: \"forge/nope:1\"; forge://environments/list"},
		{&engine.RefusedError{Kind: engine.RefusedBusy, Err: errors.New("forge is busy: 8 executions are running (execution.max_concurrent); retry")}, "Request refused: forge is busy"},
	} {
		stub.err = tc.err
		res, err := call(t, c, map[string]any{"code": "x", "timeout": 600, "memory": "1g", "custom_image": "forge/python:3.11"})
		if err != nil {
			t.Fatalf("got protocol error %v, want a tool error", err)
		}
		if !res.IsError || text(res) != tc.want && !strings.Contains(text(res), tc.want) {
			t.Errorf("got isError=%v %q, want a tool error containing %q", res.IsError, text(res), tc.want)
		}
		if res.StructuredContent != nil {
			t.Errorf("got structured content %v for a refused request, want none", res.StructuredContent)
		}
	}
	got := stub.calls()[0]
	if got.Timeout.Seconds() != 600 || got.Memory != 1<<30 || got.Image != "forge/python:3.11" || got.Client != "forge-test/1" {
		t.Errorf("got engine request %+v, want timeout 600s, memory 1g, the image and client forge-test/1", got)
	}
}

func TestRenderResult(t *testing.T) {
	png := "iVBORw0KGgo="
	r := renderResult(&kernel.Result{
		Success: false, Stdout: "hi\n", Stderr: "warn\n", Result: map[string]any{"a": 1},
		Display: []kernel.Display{{MimeType: "image/png", Data: png}, {MimeType: "image/svg+xml", Data: "<svg/>"},
			{MimeType: "text/html", Data: "<b>x</b>"}, {MimeType: "application/x-weird", Data: "?"}},
		Error:     &kernel.ExecError{Type: "ValueError", Message: "bad", Traceback: "Traceback...\nValueError: bad\n"},
		Truncated: true, TimedOut: true, OOMKilled: true,
	})
	if !r.IsError {
		t.Error("got isError false for a failed run")
	}
	txt := r.Content[0].(mcp.TextContent).Text
	for _, want := range []string{"stdout:\nhi", "stderr:\nwarn", "result:\n{\"a\":1}", "error:\nTraceback...\nValueError: bad", "1 image(s)", "truncated", "timeout", "out of memory"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text lacks %q:\n%s", want, txt)
		}
	}
	if len(r.Content) != 4 {
		t.Fatalf("got %d contents, want text, image, svg and html", len(r.Content))
	}
	if img, ok := r.Content[1].(mcp.ImageContent); !ok || img.Data != png || img.MIMEType != "image/png" {
		t.Errorf("got %#v, want the png as image content", r.Content[1])
	}
	if res, ok := r.Content[2].(mcp.EmbeddedResource); !ok || res.Resource.(mcp.TextResourceContents).MIMEType != "image/svg+xml" {
		t.Errorf("got %#v, want the svg as an embedded resource", r.Content[2])
	}
	if empty := resultText(&kernel.Result{Success: true}); !strings.Contains(empty, "no output") {
		t.Errorf("got %q for an empty run, want a no-output note", empty)
	}
	// structuredContent must satisfy the declared schema's required fields.
	b, _ := json.Marshal(renderResult(&kernel.Result{Success: true}).StructuredContent)
	var m map[string]any
	json.Unmarshal(b, &m)
	var schema struct{ Required []string }
	json.Unmarshal(outputSchema, &schema)
	for _, k := range schema.Required {
		if _, ok := m[k]; !ok {
			t.Errorf("structured content lacks required %q: %s", k, b)
		}
	}
	if string(mustJSON(m["display"])) != "[]" {
		t.Errorf("got display %s, want []", mustJSON(m["display"]))
	}
	sc := r.StructuredContent.(*compactResult)
	if len(sc.Display) != 4 || sc.Display[0].Data != "" || *sc.Display[0].Content != 1 || sc.Display[2].Data != "<b>x</b>" || sc.Display[3].Content != nil {
		t.Errorf("got display refs %s, want the png by reference, html by text, the weird type without content", mustJSON(sc.Display))
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestResourcesStub(t *testing.T) {
	c := connect(t, New(newStub(), Options{Version: "9.9", Host: func() any { return map[string]bool{"user_ns": true} }}))
	list, err := c.ListResources(t.Context(), mcp.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Resources) != 4 { // three forge:// resources and the result App
		t.Errorf("got %d resources, want 4", len(list.Resources))
	}
	read := func(uri string) map[string]any {
		req := mcp.ReadResourceRequest{}
		req.Params.URI = uri
		res, err := c.ReadResource(t.Context(), req)
		if err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(res.Contents[0].(mcp.TextResourceContents).Text), &m); err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		return m
	}
	if tools := read(uriToolsAvailable)["tools"].([]any); len(tools) != 0 {
		t.Errorf("got tools %v, want none", tools)
	}
	info := read(uriEnvironmentInfo)
	if info["forge_version"] != "9.9" || info["limits"].(map[string]any)["max_memory"] != "2g" || info["kernel_features"] == nil {
		t.Errorf("got environment info %v, want version 9.9, max_memory 2g and kernel features", info)
	}
	if imgs := read(uriEnvironments)["images"].([]any); len(imgs) != 0 {
		t.Errorf("got images %v from an engine without a store, want none", imgs)
	}
	req := mcp.ReadResourceRequest{}
	req.Params.URI = "forge://nope"
	if _, err := c.ReadResource(t.Context(), req); err == nil {
		t.Error("reading an unknown resource succeeded, want an error")
	}
}

func TestSetLevel(t *testing.T) {
	c := connect(t, New(newStub(), Options{}))
	req := mcp.SetLevelRequest{}
	req.Params.Level = mcp.LoggingLevelDebug
	if err := c.SetLevel(t.Context(), req); err != nil {
		t.Fatalf("logging/setLevel: %v", err)
	}
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

func TestGuard(t *testing.T) {
	stub := newStub()
	stub.cfg.Server.AllowedHosts = []string{"forge.internal"}
	stub.cfg.Server.AllowedOrigins = []string{"https://app.example"}
	h, _ := New(stub, Options{InsecureNoAuth: true}).HTTPHandler()
	for _, tc := range []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:8080", "", http.StatusOK},
		{"localhost:8080", "http://localhost:8080", http.StatusOK},
		{"[::1]:8080", "http://[::1]:8080", http.StatusOK},
		{"forge.internal:8080", "https://app.example", http.StatusOK},
		{"evil.example.com", "", http.StatusForbidden},
		{"evil.example.com:8080", "http://evil.example.com:8080", http.StatusForbidden},
		{"127.0.0.1:8080", "http://evil.example.com", http.StatusForbidden},
		{"127.0.0.1:8080", "null", http.StatusForbidden},
		{"", "", http.StatusForbidden},
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		r := httptest.NewRequest(http.MethodPost, "http://x"+EndpointPath, strings.NewReader(body))
		r.Host = tc.host
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("Host %q Origin %q: got %d, want %d (%s)", tc.host, tc.origin, w.Code, tc.want, w.Body)
		}
	}
}

// TestGuardProbes: a kubelet probes a pod by its IP (Host 198.18.0.73:8080,
// never in allowed_hosts): GET/HEAD of /healthz and /readyz must answer, while
// every other path and method from that Host is still refused.
func TestGuardProbes(t *testing.T) {
	stub := newStub()
	stub.cfg.Server.AllowedHosts = []string{"forge"}
	h, _ := New(stub, Options{InsecureNoAuth: true}).HTTPHandler()
	for _, tc := range []struct {
		method, path string
		forbidden    bool
	}{
		{http.MethodGet, HealthPath, false},
		{http.MethodHead, HealthPath, false},
		{http.MethodGet, ReadyPath, false},
		{http.MethodPost, ReadyPath, true},
		{http.MethodGet, HealthPath + "?x=1", true},
		{http.MethodGet, MetricsPath, true},
		{http.MethodGet, "/api/v1/version", true},
		{http.MethodPost, EndpointPath, true},
	} {
		r := httptest.NewRequest(tc.method, "http://198.18.0.73:8080"+tc.path, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Code == http.StatusForbidden; got != tc.forbidden {
			t.Errorf("%s %s from Host %s: got %d, want forbidden=%v (%s)", tc.method, tc.path, r.Host, w.Code, tc.forbidden, w.Body)
		}
	}
}

func TestHTTPPrecheck(t *testing.T) {
	h, _ := New(newStub(), Options{InsecureNoAuth: true}).HTTPHandler()
	body := `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"execute_python","arguments":{"code":7}}}`
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+EndpointPath, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var resp struct {
		ID    string
		Error struct{ Code int }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.ID != "a" || resp.Error.Code != mcp.INVALID_PARAMS {
		t.Errorf("got %d %s, want a JSON-RPC invalid-params error for id a", w.Code, w.Body)
	}
}

// BenchmarkToolsListStdio is one tools/list round trip through forge's stdio
// transport and mcp-go's client (pipes, same process).
func BenchmarkToolsListStdio(b *testing.B) {
	s := New(newStub(), Options{})
	toServer, clientOut := io.Pipe()
	clientIn, fromServer := io.Pipe()
	go s.ServeStdio(context.Background(), toServer, fromServer)
	c := client.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
	defer c.Close()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, init); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.ListTools(ctx, mcp.ListToolsRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}
