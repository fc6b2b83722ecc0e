package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/server/metrics"
	"github.com/mcp-forge/forge/server/rest"
	"github.com/mcp-forge/forge/server/tenant"
	"github.com/mcp-forge/forge/server/tracing"
	"github.com/mcp-forge/forge/test/testutil"
)

// testObserver forwards the shared engine's executions to the metrics of
// the test that serves them.
var testObserver forwardObserver

type forwardObserver struct {
	to atomic.Pointer[metrics.Metrics]
}

func (f *forwardObserver) ObserveExecution(st engine.ExecutionStats) {
	if m := f.to.Load(); m != nil {
		m.ObserveExecution(st)
	}
}

// service is a real engine served over HTTP with tokens of three tenants.
type service struct {
	url    string
	tokens map[string]string // tenant -> token
}

func serveService(t *testing.T, limits profiles.TenantsConfig) *service {
	t.Helper()
	return serveServiceOn(t, realEngine(t), limits, nil)
}

// serveServiceOn serves eng; setup, if any, runs on the server before it
// listens.
func serveServiceOn(t *testing.T, eng Engine, limits profiles.TenantsConfig, setup func(*Server)) *service {
	t.Helper()
	store := auth.OpenStore(t.TempDir())
	sv := &service{tokens: map[string]string{}}
	for tenant, scopes := range map[string][]string{
		"alice": {"execute", "sessions"}, "bob": {"execute", "sessions"}, "reader": {"tools"},
		"ops": {"admin"}, "limited": {"execute"},
		"dave": {"execute", "sessions", "tools"}, "erin": {"execute", "sessions", "tools"},
	} {
		tok, _, err := store.Create(tenant, scopes)
		if err != nil {
			t.Fatal(err)
		}
		sv.tokens[tenant] = tok
	}
	// One token given by hash in the configuration, as from the environment.
	sv.tokens["carol"] = "carol-secret-token"
	authn, err := auth.NewAuthenticator(store, []profiles.TokenEntry{{Tenant: "carol", Scopes: []string{"execute"}, SHA256: auth.Hash("carol-secret-token")}})
	if err != nil {
		t.Fatal(err)
	}
	met := metrics.New()
	if src, ok := eng.(metrics.Source); ok {
		met.SetSource(src)
	}
	testObserver.to.Store(met)
	t.Cleanup(func() { testObserver.to.Store(nil) })
	s := New(eng, Options{Auth: authn, Tenants: tenant.New(limits), Metrics: met.Handler(), OnLimited: met.Limited, Version: "test"})
	if setup != nil {
		setup(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeHTTP(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	})
	sv.url = "http://" + ln.Addr().String()
	return sv
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) problem(t *testing.T) rest.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("status %d with Content-Type %q, want application/problem+json: %s", r.status, ct, r.body)
	}
	var p rest.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem %s: %v", r.body, err)
	}
	if p.RequestID == "" || p.RequestID != r.header.Get(rest.HeaderRequestID) {
		t.Errorf("problem request_id %q, header %q: want the same, non-empty", p.RequestID, r.header.Get(rest.HeaderRequestID))
	}
	if p.Status != r.status {
		t.Errorf("problem status %d, HTTP status %d", p.Status, r.status)
	}
	return p
}

func (sv *service) do(t *testing.T, method, path, tenant string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, sv.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tenant != "" {
		req.Header.Set("Authorization", "Bearer "+sv.tokens[tenant])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

func TestRESTAuth(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{})
	exec := []byte(`{"code": "1 + 1"}`)
	for _, tc := range []struct {
		name, method, path, tenant string
		body                       []byte
		want                       int
	}{
		{"probe without token", "GET", "/healthz", "", nil, 200},
		{"openapi without token", "GET", "/api/v1/openapi.json", "", nil, 200},
		{"version without token", "GET", "/api/v1/version", "", nil, 401},
		{"execute without token", "POST", "/api/v1/execute", "", exec, 401},
		{"mcp without token", "POST", "/mcp", "", []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), 401},
		{"metrics without token", "GET", "/metrics", "", nil, 401},
		{"execute, wrong scope", "POST", "/api/v1/execute", "reader", exec, 403},
		{"sessions, wrong scope", "GET", "/api/v1/sandboxes", "limited", nil, 403},
		{"metrics, not admin", "GET", "/metrics", "alice", nil, 403},
		{"version with token", "GET", "/api/v1/version", "reader", nil, 200},
		{"environments, wrong scope", "GET", "/api/v1/environments", "alice", nil, 403},
		{"build, wrong scope", "POST", "/api/v1/environments", "alice", []byte(`{"name": "x", "packages": ["six"]}`), 403},
		{"environments", "GET", "/api/v1/environments", "ops", nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sv.do(t, tc.method, tc.path, tc.tenant, tc.body)
			if r.status != tc.want {
				t.Fatalf("got %d %s, want %d", r.status, r.body, tc.want)
			}
			if tc.want >= 400 {
				p := r.problem(t)
				if tc.want == 401 && r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
				if tc.want == 403 && !strings.Contains(p.Detail, "lacks scope") {
					t.Errorf("403 detail %q does not name the missing scope", p.Detail)
				}
			}
		})
	}
	// A token that is not one.
	sv.tokens["mallory"] = "forge_000000000000_" + strings.Repeat("0", 64)
	if r := sv.do(t, "POST", "/api/v1/execute", "mallory", exec); r.status != 401 {
		t.Errorf("unknown token: got %d, want 401", r.status)
	}
}

func TestRESTExecute(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{})
	r := sv.do(t, "POST", "/api/v1/execute", "carol", []byte(`{"code": "print('hi')\n6 * 7"}`))
	if r.status != 200 {
		t.Fatalf("execute: %d %s", r.status, r.body)
	}
	var res map[string]any
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	if res["success"] != true || res["stdout"] != "hi\n" || fmt.Sprint(res["result"]) != "42" {
		t.Errorf("got %s, want success, stdout hi, result 42", r.body)
	}
	if _, ok := res["display"].([]any); !ok {
		t.Errorf("display is %v, want a list", res["display"])
	}
	// The code failing is a result, not an HTTP error.
	if r := sv.do(t, "POST", "/api/v1/execute", "carol", []byte(`{"code": "1/0"}`)); r.status != 200 || !strings.Contains(string(r.body), "ZeroDivisionError") {
		t.Errorf("failing code: got %d %s, want 200 with ZeroDivisionError", r.status, r.body)
	}

	// Malformed requests: the same decoding, and messages, as MCP.
	for _, body := range []string{`{"code": 5}`, `{"code": "1", "bogus": 1}`, `{}`, `{"code": "1", "timeout": -1}`, `{"code": "1", "memory": "lots"}`} {
		_, want := DecodeExecuteArgs([]byte(body))
		r := sv.do(t, "POST", "/api/v1/execute", "carol", []byte(body))
		if r.status != 400 {
			t.Errorf("%s: got %d %s, want 400", body, r.status, r.body)
			continue
		}
		if p := r.problem(t); want == nil || p.Detail != want.Error() {
			t.Errorf("%s: detail %q, want MCP's %v", body, p.Detail, want)
		}
	}
	// Past the engine's limits: refused by the engine, as over MCP.
	if r := sv.do(t, "POST", "/api/v1/execute", "carol", []byte(`{"code": "1", "timeout": 100000}`)); r.status != 400 || !strings.Contains(r.problem(t).Detail, "execution.max_timeout") {
		t.Errorf("timeout over the maximum: got %d %s, want 400 naming execution.max_timeout", r.status, r.body)
	}
	if r := sv.do(t, "POST", "/api/v1/execute", "carol", []byte(`{"code": "1",`)); r.status < 400 || r.status >= 500 {
		t.Errorf("malformed JSON: got %d %s, want a 4xx", r.status, r.body)
	} else {
		r.problem(t)
	}
	big := append([]byte(`{"code": "`), bytes.Repeat([]byte("x"), 8<<20)...)
	big = append(big, `"}`...)
	if r := sv.do(t, "POST", "/api/v1/execute", "carol", big); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: got %d %.200s, want 413", r.status, r.body)
	} else {
		r.problem(t)
	}
}

func TestRESTBuildDecodedAsMCP(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{})
	for _, body := range []string{`{}`, `{"name": "x"}`, `{"name": "x", "packages": "six"}`, `{"name": "x", "pkgs": []}`} {
		_, want := DecodeBuildArgs([]byte(body))
		r := sv.do(t, "POST", "/api/v1/environments", "ops", []byte(body))
		if r.status != 400 || want == nil || r.problem(t).Detail != want.Error() {
			t.Errorf("%s: got %d %s, want 400 with %v", body, r.status, r.body, want)
		}
	}
}

func TestRESTSessionsPerTenant(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{})
	r := sv.do(t, "POST", "/api/v1/sandboxes", "alice", []byte(`{}`))
	if r.status != 200 {
		t.Fatalf("create sandbox: %d %s", r.status, r.body)
	}
	var ref rest.SandboxRef
	if err := json.Unmarshal(r.body, &ref); err != nil || ref.ID == "" {
		t.Fatalf("create sandbox: %s (%v)", r.body, err)
	}
	t.Cleanup(func() { sv.do(t, "DELETE", "/api/v1/sandboxes/"+ref.ID, "alice", nil) })
	id := ref.ID
	if r := sv.do(t, "POST", "/api/v1/execute", "alice", fmt.Appendf(nil, `{"code": "x = 41", "session_id": %q}`, id)); r.status != 200 {
		t.Fatalf("execute in session: %d %s", r.status, r.body)
	}
	if r := sv.do(t, "PUT", "/api/v1/sessions/"+id+"/files/data/in.txt", "alice", []byte("payload")); r.status != 204 {
		t.Fatalf("put file: %d %s", r.status, r.body)
	}
	if r := sv.do(t, "GET", "/api/v1/sessions/"+id+"/files/data/in.txt", "alice", nil); r.status != 200 || string(r.body) != "payload" {
		t.Errorf("get file: %d %q, want payload", r.status, r.body)
	}
	if r := sv.do(t, "GET", "/api/v1/sessions/"+id+"/files", "alice", nil); r.status != 200 || !strings.Contains(string(r.body), "data/in.txt") {
		t.Errorf("list files: %d %s", r.status, r.body)
	}
	if r := sv.do(t, "POST", "/api/v1/sessions/"+id+"/state", "alice", []byte(`{"variables": {"x": "the answer minus one"}}`)); r.status != 200 {
		t.Errorf("document state: %d %s", r.status, r.body)
	}
	if r := sv.do(t, "GET", "/api/v1/sessions/"+id+"/state", "alice", nil); r.status != 200 || !strings.Contains(string(r.body), "the answer minus one") {
		t.Errorf("get state: %d %s", r.status, r.body)
	}
	if r := sv.do(t, "GET", "/api/v1/sandboxes", "alice", nil); !strings.Contains(string(r.body), id) {
		t.Errorf("alice's sandboxes %s lack %s", r.body, id)
	}

	// Bob sees alice's session exactly as a missing one.
	if r := sv.do(t, "GET", "/api/v1/sandboxes", "bob", nil); r.status != 200 || strings.Contains(string(r.body), id) {
		t.Errorf("bob's sandboxes: %d %s, want 200 without %s", r.status, r.body, id)
	}
	unknown := "nosuchsession" + strconv.Itoa(len(id))
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/api/v1/sessions/%s/state", ""},
		{"POST", "/api/v1/sessions/%s/state", `{"variables": {}}`},
		{"GET", "/api/v1/sessions/%s/files/data/in.txt", ""},
		{"GET", "/api/v1/sessions/%s/files", ""},
		{"PUT", "/api/v1/sessions/%s/files/evil.txt", "x"},
		{"DELETE", "/api/v1/sessions/%s/files/data/in.txt", ""},
		{"DELETE", "/api/v1/sandboxes/%s", ""},
	} {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		theirs := sv.do(t, tc.method, fmt.Sprintf(tc.path, id), "bob", body)
		missing := sv.do(t, tc.method, fmt.Sprintf(tc.path, unknown), "bob", body)
		if theirs.status != missing.status {
			t.Errorf("%s %s as bob: got %d (alice's) and %d (unknown), want the same", tc.method, tc.path, theirs.status, missing.status)
			continue
		}
		if theirs.status != 404 {
			continue // writing a file creates bob's own session; destroying is idempotent
		}
		if a, b := strings.ReplaceAll(theirs.problem(t).Detail, id, "ID"), strings.ReplaceAll(missing.problem(t).Detail, unknown, "ID"); a != b {
			t.Errorf("%s %s as bob: alice's session answers %q, an unknown one %q", tc.method, tc.path, a, b)
		}
	}
	// Bob's execute with alice's id makes bob's own session, never alice's.
	if r := sv.do(t, "POST", "/api/v1/execute", "bob", fmt.Appendf(nil, `{"code": "x", "session_id": %q}`, id)); r.status != 200 || !strings.Contains(string(r.body), "NameError") {
		t.Errorf("bob in alice's session id: %d %s, want a NameError in a fresh session", r.status, r.body)
	}
	sv.do(t, "DELETE", "/api/v1/sandboxes/"+id, "bob", nil)
	if r := sv.do(t, "POST", "/api/v1/execute", "alice", fmt.Appendf(nil, `{"code": "x + 1", "session_id": %q}`, id)); !strings.Contains(string(r.body), `"result":42`) {
		t.Errorf("alice's session after bob's calls: %s, want result 42", r.body)
	}

	if r := sv.do(t, "GET", "/api/v1/sessions/"+id+"/files/data/in.txt", "alice", nil); r.status != 200 || string(r.body) != "payload" {
		t.Errorf("alice's file after bob's calls: %d %q, want payload", r.status, r.body)
	}
	if r := sv.do(t, "DELETE", "/api/v1/sessions/"+id+"/files/data/in.txt", "alice", nil); r.status != 204 {
		t.Errorf("delete file: %d %s", r.status, r.body)
	}
	if r := sv.do(t, "GET", "/api/v1/sessions/"+id+"/files/data/in.txt", "alice", nil); r.status != 404 && r.status != 400 {
		t.Errorf("get deleted file: %d %s, want a 4xx", r.status, r.body)
	}
	if r := sv.do(t, "DELETE", "/api/v1/sandboxes/"+id, "alice", nil); r.status != 204 {
		t.Errorf("delete sandbox: %d %s", r.status, r.body)
	}
	if r := sv.do(t, "GET", "/api/v1/sessions/"+id+"/state", "alice", nil); r.status != 404 {
		t.Errorf("state after delete: %d, want 404", r.status)
	}
}

func TestRESTRateLimit(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{Overrides: map[string]profiles.TenantLimits{
		"limited": {ExecutionsPerMinute: 1, ExecutionBurst: 1},
	}})
	exec := []byte(`{"code": "1"}`)
	if r := sv.do(t, "POST", "/api/v1/execute", "limited", exec); r.status != 200 {
		t.Fatalf("first execution: %d %s", r.status, r.body)
	}
	r := sv.do(t, "POST", "/api/v1/execute", "limited", exec)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("second execution within the minute: got %d %s, want 429", r.status, r.body)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Errorf("Retry-After %q, want 1..60 seconds", r.header.Get("Retry-After"))
	}
	if p := r.problem(t); !strings.Contains(p.Detail, "executions_per_minute") {
		t.Errorf("429 detail %q does not name the setting", p.Detail)
	}
	// Another tenant has its own bucket.
	if r := sv.do(t, "POST", "/api/v1/execute", "carol", exec); r.status != 200 {
		t.Errorf("another tenant: %d %s", r.status, r.body)
	}

	// MCP: a tool error with the retry time.
	c := mcpClient(t, sv, "limited")
	res, err := call(t, c, map[string]any{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text(res), "retry in") {
		t.Errorf("MCP over the limit: isError=%v %q, want a tool error with the retry time", res.IsError, text(res))
	}
}

func mcpClient(t *testing.T, sv *service, tenant string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(sv.url+EndpointPath, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + sv.tokens[tenant]}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMCPOverHTTPWithTokens(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{})
	// Without a token the client cannot even initialize.
	c, err := client.NewStreamableHttpClient(sv.url + EndpointPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(t.Context(), init); err == nil {
		t.Errorf("initialize without a token succeeded")
	}

	alice := mcpClient(t, sv, "alice")
	res, err := call(t, alice, map[string]any{"code": "print(2 + 2)", "backend": "jupyter"})
	if err != nil || res.IsError {
		t.Fatalf("alice: %v %v", err, res)
	}
	sid, _ := structured(t, res)["session_id"].(string)
	if sid == "" {
		t.Fatalf("no session id in %v", structured(t, res))
	}
	// The session is alice's tenant's, over REST too; not bob's.
	if r := sv.do(t, "GET", "/api/v1/sessions/"+sid+"/state", "alice", nil); r.status != 200 {
		t.Errorf("alice's MCP session over REST: %d %s", r.status, r.body)
	}
	if r := sv.do(t, "GET", "/api/v1/sessions/"+sid+"/state", "bob", nil); r.status != 404 {
		t.Errorf("alice's MCP session as bob: %d, want 404", r.status)
	}
	sv.do(t, "DELETE", "/api/v1/sandboxes/"+sid, "alice", nil)

	// A token without the tool's scope gets a tool error.
	reader := mcpClient(t, sv, "reader")
	res, err = call(t, reader, map[string]any{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text(res), "lacks scope") {
		t.Errorf("reader calling execute_python: isError=%v %q, want a scope error", res.IsError, text(res))
	}
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = "forge://sessions/" + sid + "/state"
	if _, err := reader.ReadResource(t.Context(), rr); err == nil || !strings.Contains(err.Error(), "lacks scope") {
		t.Errorf("reader reading a session resource: %v, want a scope error", err)
	}
}

func TestMetricsScrape(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{})
	if r := sv.do(t, "POST", "/api/v1/execute", "alice", []byte(`{"code": "1"}`)); r.status != 200 {
		t.Fatalf("execute: %d %s", r.status, r.body)
	}
	sess := sv.do(t, "POST", "/api/v1/sandboxes", "alice", []byte(`{}`))
	var ref rest.SandboxRef
	if err := json.Unmarshal(sess.body, &ref); err != nil || ref.ID == "" {
		t.Fatalf("create sandbox: %d %s", sess.status, sess.body)
	}
	if live, _ := sessionGauges(t, sv, "alice"); live < 1 {
		t.Errorf("forge_sessions_live{tenant=alice} = %v with her session live, want >= 1", live)
	}
	sv.do(t, "DELETE", "/api/v1/sandboxes/"+ref.ID, "alice", nil)
	r := sv.do(t, "GET", "/metrics", "ops", nil)
	if r.status != 200 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	execs := fams["forge_executions_total"]
	if execs == nil {
		t.Fatalf("no forge_executions_total in the scrape")
	}
	found, session := false, false
	for _, m := range execs.GetMetric() {
		labels := model.LabelSet{}
		for _, l := range m.GetLabel() {
			labels[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
		}
		if labels["tenant"] == "alice" && labels["outcome"] == "ok" && (labels["mode"] == "warm" || labels["mode"] == "cold") && m.GetCounter().GetValue() >= 1 {
			found = true
		}
		if labels["tenant"] == "alice" && labels["mode"] == "session" {
			session = true
		}
	}
	if !session {
		t.Errorf("no session execution of tenant alice in %v", execs)
	}
	if !found {
		t.Errorf("no ok stateless execution of tenant alice in %v", execs)
	}
	for _, name := range []string{"forge_execution_duration_seconds", "forge_pool_ready", "forge_pool_misses_total"} {
		if fams[name] == nil {
			t.Errorf("no %s in the scrape", name)
		}
	}
}

// sessionGauges scrapes /metrics (parsed by Prometheus's text parser) for
// tenant's forge_sessions_live and forge_sessions_hibernated.
func sessionGauges(t *testing.T, sv *service, tenant string) (live, hibernated float64) {
	t.Helper()
	r := sv.do(t, "GET", "/metrics", "ops", nil)
	if r.status != 200 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	value := func(name string) float64 {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() == tenant {
					return m.GetGauge().GetValue()
				}
			}
		}
		return 0
	}
	return value("forge_sessions_live"), value("forge_sessions_hibernated")
}

// TestMetricsHibernatedSessions: a session that hibernates moves from the
// tenant's live gauge to its hibernated one, and leaves it when destroyed
// (TestMetricsScrape checks the live gauge of a live session: here it may
// hibernate before the first scrape).
func TestMetricsHibernatedSessions(t *testing.T) {
	// Its own engine, whose sessions hibernate after 300 ms idle; not
	// testenv.Engine, whose check for leftovers of this process would count
	// the shared engine's sandboxes.
	realEngine(t) // the images are in the store
	cfg := profiles.Default()
	cfg.StateDir = testutil.StateDir(t)
	cfg.Pool.Enabled = false
	cfg.Sessions.IdleTimeout = profiles.Duration(300 * time.Millisecond)
	cfg.Sessions.Persist = true
	eng, err := engine.New(t.Context(), engine.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eng.Close(5 * time.Second); err != nil {
			t.Errorf("engine.Close: %v", err)
		}
	})
	sv := serveServiceOn(t, eng, profiles.TenantsConfig{}, nil)
	p := engine.Principal{Tenant: auth.TenantPrefix + "dave"}
	_, base := sessionGauges(t, sv, "dave") // a previous run's, if any
	r := sv.do(t, "POST", "/api/v1/execute", "dave", []byte(`{"code": "x = 41", "backend": "jupyter"}`))
	var res struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 || res.SessionID == "" {
		t.Fatalf("execute in a new session: %d %s", r.status, r.body)
	}
	t.Cleanup(func() { _ = eng.DestroySession(context.Background(), p, res.SessionID) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		infos, err := eng.ListSessions(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(infos, func(i session.Info) bool { return i.ID == res.SessionID }); i >= 0 && infos[i].Status == session.Hibernated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s not hibernated within 30 s: %+v", res.SessionID, infos)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if live, hib := sessionGauges(t, sv, "dave"); live != 0 || hib != base+1 {
		t.Errorf("after hibernation: live %v, hibernated %v; want 0 and %v", live, hib, base+1)
	}
	if err := eng.DestroySession(t.Context(), p, res.SessionID); err != nil {
		t.Fatal(err)
	}
	if _, hib := sessionGauges(t, sv, "dave"); hib != base {
		t.Errorf("after destroying it: hibernated %v, want %v", hib, base)
	}
}

// otlpReceiver counts OTLP/HTTP trace exports, and the span names in them
// (the protobuf carries them as plain strings).
type otlpReceiver struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
		o.mu.Lock()
		o.bodies = append(o.bodies, b)
		o.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

func TestTracesExported(t *testing.T) {
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	tracer, stop, err := tracing.Setup(t.Context(), collector.URL, "test")
	if err != nil {
		t.Fatal(err)
	}
	s := New(realEngine(t), Options{Tracer: tracer, InsecureNoAuth: true})
	h, _ := s.HTTPHandler()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/v1/execute", "application/json", strings.NewReader(`{"code": "1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("execute: %d", resp.StatusCode)
	}
	if err := stop(t.Context()); err != nil { // flushes
		t.Fatal(err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	all := bytes.Join(recv.bodies, nil)
	for _, name := range []string{"POST /api/v1/execute", "execute", "forge.request_id"} {
		if !bytes.Contains(all, []byte(name)) {
			t.Errorf("no %q in the %d OTLP export(s)", name, len(recv.bodies))
		}
	}
}

// Concurrent requests of two tenants each act for their own token's tenant
// (the principal is per request, never shared by the listener's requests).
func TestConcurrentTenantsStayApart(t *testing.T) {
	sv := serveService(t, profiles.TenantsConfig{})
	r := sv.do(t, "POST", "/api/v1/sandboxes", "alice", []byte(`{}`))
	var ref rest.SandboxRef
	if err := json.Unmarshal(r.body, &ref); err != nil || ref.ID == "" {
		t.Fatalf("create sandbox: %d %s", r.status, r.body)
	}
	defer sv.do(t, "DELETE", "/api/v1/sandboxes/"+ref.ID, "alice", nil)
	var wg sync.WaitGroup
	var leaks, misses atomic.Int64
	for i := range 64 {
		wg.Go(func() {
			tenant := []string{"alice", "bob"}[i%2]
			r := sv.do(t, "GET", "/api/v1/sandboxes", tenant, nil)
			has := strings.Contains(string(r.body), ref.ID)
			if tenant == "bob" && has {
				leaks.Add(1)
			}
			if tenant == "alice" && !has {
				misses.Add(1)
			}
		})
	}
	wg.Wait()
	if leaks.Load() > 0 || misses.Load() > 0 {
		t.Errorf("%d of bob's listings showed alice's session, %d of alice's lacked it", leaks.Load(), misses.Load())
	}
}
