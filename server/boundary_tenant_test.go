package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/test/testenv"
)

// Attack tests of the tenant gate (server/gate.go): every operation that
// runs in, starts or makes a sandbox counts against the tenant's
// max_sessions, executions_per_minute and max_concurrent, over MCP and REST,
// not execute_python alone.

var dave = engine.Principal{Tenant: "tenant:dave"}

// uniq is an id no earlier run left behind.
func uniq(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// clearSessions destroys every session of p, now and when the test ends.
func clearSessions(t *testing.T, eng *engine.Engine, p engine.Principal) {
	t.Helper()
	clear := func() {
		infos, _ := eng.ListSessions(context.Background(), p)
		for _, i := range infos {
			_ = eng.DestroySession(context.Background(), p, i.ID)
		}
	}
	clear()
	t.Cleanup(clear)
}

func sessionCount(t *testing.T, eng *engine.Engine, p engine.Principal) int {
	t.Helper()
	infos, err := eng.ListSessions(context.Background(), p)
	if err != nil {
		t.Fatalf("listing %s's sessions: %v", p, err)
	}
	return len(infos)
}

// outcome is one operation's answer: ok, or the refusal's text.
type outcome struct {
	ok   bool
	text string
}

func mcpOutcome(t *testing.T, c *client.Client, tool string, args map[string]any) outcome {
	t.Helper()
	res := callTool(t, c, tool, args)
	return outcome{!res.IsError, text(res)}
}

func restOutcome(r reply) outcome {
	return outcome{r.status/100 == 2, fmt.Sprintf("%d %s", r.status, r.body)}
}

// gateTool is the hosted tool of these tests.
const gateTool = `
from forge_tools import tool

@tool
def gate_double(x: int) -> int:
    return 2 * x
`

// gateHost serves gateTool on eng.
func gateHost(t *testing.T, eng *engine.Engine) *hosted.Host {
	t.Helper()
	h, err := hosted.New(context.Background(), hosted.Options{Engine: eng, Config: testenv.HostedTools(t, gateTool), StateDir: eng.Config().StateDir})
	if err != nil {
		t.Fatalf("hosted.New: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// gateService serves eng with tenant dave's limits lim and the hosted
// tool of h; srv is the server.
func gateService(t *testing.T, eng *engine.Engine, h *hosted.Host, lim profiles.TenantLimits) (sv *service, srv *Server) {
	t.Helper()
	sv = serveServiceOn(t, eng, profiles.TenantsConfig{Overrides: map[string]profiles.TenantLimits{"dave": lim}}, func(s *Server) {
		srv = s
		if h != nil {
			if err := s.AttachHosted(h); err != nil {
				t.Fatal(err)
			}
		}
	})
	return sv, srv
}

// gateOp is one sandbox-consuming operation of dave besides execute_python.
type gateOp struct {
	name string
	do   func(t *testing.T, sv *service, c *client.Client) outcome
}

// gateOps are those operations on dave's session src (which exists): each
// makes a new session only where that is what it is for (a fork, a sandbox
// create).
func gateOps(src string) []gateOp {
	rest := func(method, path string, body []byte) func(*testing.T, *service, *client.Client) outcome {
		return func(t *testing.T, sv *service, _ *client.Client) outcome {
			return restOutcome(sv.do(t, method, path, "dave", body))
		}
	}
	mcpOp := func(tool string, args func() map[string]any) func(*testing.T, *service, *client.Client) outcome {
		return func(t *testing.T, _ *service, c *client.Client) outcome { return mcpOutcome(t, c, tool, args()) }
	}
	fixed := func(m map[string]any) func() map[string]any { return func() map[string]any { return m } }
	return []gateOp{
		{"MCP write_file", mcpOp(toolWriteFile, fixed(map[string]any{"session_id": src, "path": "a.txt", "content": "a"}))},
		{"MCP read_file", mcpOp(toolReadFile, fixed(map[string]any{"session_id": src, "path": "in.txt"}))},
		{"MCP list_files", mcpOp(toolListFiles, fixed(map[string]any{"session_id": src}))},
		{"MCP document_state", mcpOp(toolDocumentState, fixed(map[string]any{"session_id": src, "variables": map[string]any{}}))},
		{"MCP fork_session", mcpOp(toolForkSession, func() map[string]any {
			return map[string]any{"session_id": src, "new_session_id": uniq("gate-fork")}
		})},
		{"MCP hosted tool", mcpOp("gate_double", fixed(map[string]any{"x": 21}))},
		{"REST PUT file", rest("PUT", "/api/v1/sessions/"+src+"/files/b.txt", []byte("b"))},
		{"REST GET file", rest("GET", "/api/v1/sessions/"+src+"/files/in.txt", nil)},
		{"REST GET files", rest("GET", "/api/v1/sessions/"+src+"/files", nil)},
		{"REST POST state", rest("POST", "/api/v1/sessions/"+src+"/state", []byte(`{"variables": {}}`))},
		{"REST POST sandboxes", rest("POST", "/api/v1/sandboxes", []byte(`{}`))},
	}
}

// TestTenantGateRate: with executions_per_minute 1 (burst 1), every
// sandbox-consuming operation takes dave's one execution: the first call
// runs, the same call again is refused naming executions_per_minute.
// Before the gate only execute_python took from the bucket.
func TestTenantGateRate(t *testing.T) {
	eng := realEngine(t)
	clearSessions(t, eng, dave)
	src := uniq("gate-src")
	// The fixture is made on the engine itself, outside any bucket.
	if err := eng.WriteFile(t.Context(), dave, src, "in.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	h := gateHost(t, eng)
	for _, op := range gateOps(src) {
		t.Run(op.name, func(t *testing.T) {
			sv, _ := gateService(t, eng, h, profiles.TenantLimits{ExecutionsPerMinute: 1, ExecutionBurst: 1})
			c := mcpClient(t, sv, "dave")
			if got := op.do(t, sv, c); !got.ok {
				t.Fatalf("first call: refused: %s", got.text)
			}
			got := op.do(t, sv, c)
			if got.ok || !strings.Contains(got.text, "executions_per_minute") {
				t.Errorf("second call within the minute: ok=%v %s, want a refusal naming executions_per_minute", got.ok, got.text)
			}
			if strings.HasPrefix(op.name, "REST") && !strings.HasPrefix(got.text, "429 ") {
				t.Errorf("second call: %s, want 429", got.text)
			}
		})
	}
}

// TestTenantGateConcurrent: while one execution of dave runs (max_concurrent
// 1), each other sandbox-consuming operation of dave is refused naming
// max_concurrent; another tenant is not; once it ended, they run.
func TestTenantGateConcurrent(t *testing.T) {
	eng := realEngine(t)
	clearSessions(t, eng, dave)
	src := uniq("gate-src")
	if err := eng.WriteFile(t.Context(), dave, src, "in.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	sv, _ := gateService(t, eng, gateHost(t, eng), profiles.TenantLimits{MaxConcurrent: 1})
	c := mcpClient(t, sv, "dave")

	// The running execution: a session call that sleeps past its timeout
	// (it is interrupted then), in a session of its own, so that its status
	// says when it runs.
	blocker := uniq("gate-blocker")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan reply, 1)
	go func() {
		body := fmt.Sprintf(`{"code": "import time\ntime.sleep(120)", "session_id": %q, "timeout": 10}`, blocker)
		req, _ := http.NewRequestWithContext(ctx, "POST", sv.url+"/api/v1/execute", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+sv.tokens["dave"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- reply{status: -1, body: []byte(err.Error())}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- reply{status: resp.StatusCode, body: b}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for running := false; !running; {
		infos, _ := eng.ListSessions(t.Context(), dave)
		for _, i := range infos {
			running = running || (i.ID == blocker && i.Status == "active")
		}
		select {
		case r := <-done:
			t.Fatalf("the blocking execution ended before the test: %d %s", r.status, r.body)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the blocking execution to run")
		}
		time.Sleep(20 * time.Millisecond) // polling, with the deadline above
	}

	for _, op := range gateOps(src) {
		got := op.do(t, sv, c)
		if got.ok || !strings.Contains(got.text, "max_concurrent") {
			t.Errorf("%s while dave's execution runs: ok=%v %s, want a refusal naming max_concurrent", op.name, got.ok, got.text)
		}
	}
	// Another tenant has its own count.
	if r := sv.do(t, "PUT", "/api/v1/sessions/"+uniq("gate-erin")+"/files/x.txt", "erin", []byte("x")); r.status != 204 {
		t.Errorf("erin's write while dave's execution runs: %d %s", r.status, r.body)
	}
	clearSessions(t, eng, engine.Principal{Tenant: "tenant:erin"})

	// Its reply comes after its slot is released.
	if r := <-done; r.status != 200 || !strings.Contains(string(r.body), `"timed_out":true`) {
		t.Fatalf("the blocking execution: %d %s, want 200 with timed_out", r.status, r.body)
	}
	for _, op := range gateOps(src) {
		if got := op.do(t, sv, c); !got.ok {
			t.Errorf("%s after dave's execution ended: %s", op.name, got.text)
		}
	}
}

// TestTenantGateSessions: dave (max_sessions 2) fills his sessions with
// write_file over MCP and REST; then no face makes him a third (write_file,
// PUT, fork_session, POST /sandboxes, execute_python), calls on his own
// sessions still run, and another tenant still makes sessions. A fork fits
// once one of his sessions is gone.
func TestTenantGateSessions(t *testing.T) {
	eng := realEngine(t)
	erin := engine.Principal{Tenant: "tenant:erin"}
	clearSessions(t, eng, dave)
	clearSessions(t, eng, erin)
	sv, _ := gateService(t, eng, nil, profiles.TenantLimits{MaxSessions: 2})
	c := mcpClient(t, sv, "dave")
	a, b := uniq("gate-a"), uniq("gate-b")
	if got := mcpOutcome(t, c, toolWriteFile, map[string]any{"session_id": a, "path": "in.txt", "content": "a"}); !got.ok {
		t.Fatalf("write_file making dave's first session: %s", got.text)
	}
	if r := sv.do(t, "PUT", "/api/v1/sessions/"+b+"/files/in.txt", "dave", []byte("b")); r.status != 204 {
		t.Fatalf("PUT making dave's second session: %d %s", r.status, r.body)
	}

	third := uniq("gate-c")
	for _, tc := range []struct {
		name string
		do   func() outcome
		rest bool
	}{
		{"MCP write_file", func() outcome {
			return mcpOutcome(t, c, toolWriteFile, map[string]any{"session_id": third, "path": "x.txt", "content": "x"})
		}, false},
		{"MCP fork_session", func() outcome {
			return mcpOutcome(t, c, toolForkSession, map[string]any{"session_id": a, "new_session_id": third})
		}, false},
		{"MCP execute_python", func() outcome {
			return mcpOutcome(t, c, toolExecute, map[string]any{"code": "1", "session_id": third})
		}, false},
		{"REST PUT file", func() outcome {
			return restOutcome(sv.do(t, "PUT", "/api/v1/sessions/"+third+"/files/x.txt", "dave", []byte("x")))
		}, true},
		{"REST POST sandboxes", func() outcome { return restOutcome(sv.do(t, "POST", "/api/v1/sandboxes", "dave", []byte(`{}`))) }, true},
	} {
		got := tc.do()
		if got.ok || !strings.Contains(got.text, "max_sessions") {
			t.Errorf("%s making a third session: ok=%v %s, want a refusal naming max_sessions", tc.name, got.ok, got.text)
		}
		if tc.rest && !strings.HasPrefix(got.text, "429 ") {
			t.Errorf("%s: %s, want 429", tc.name, got.text)
		}
	}
	if n := sessionCount(t, eng, dave); n != 2 {
		t.Errorf("dave has %d sessions, want 2 (max_sessions)", n)
	}
	// His own sessions still take calls.
	if got := mcpOutcome(t, c, toolWriteFile, map[string]any{"session_id": a, "path": "more.txt", "content": "m"}); !got.ok {
		t.Errorf("write_file into dave's own session at his quota: %s", got.text)
	}
	if r := sv.do(t, "GET", "/api/v1/sessions/"+b+"/files/in.txt", "dave", nil); r.status != 200 || string(r.body) != "b" {
		t.Errorf("GET of dave's own file at his quota: %d %s", r.status, r.body)
	}
	// Another tenant is not locked out.
	if r := sv.do(t, "PUT", "/api/v1/sessions/"+uniq("gate-erin")+"/files/x.txt", "erin", []byte("x")); r.status != 204 {
		t.Errorf("erin making a session while dave is at his quota: %d %s", r.status, r.body)
	}
	// A fork fits once a session is gone, and counts.
	if r := sv.do(t, "DELETE", "/api/v1/sandboxes/"+b, "dave", nil); r.status != 204 {
		t.Fatalf("deleting dave's session: %d %s", r.status, r.body)
	}
	if got := mcpOutcome(t, c, toolForkSession, map[string]any{"session_id": a, "new_session_id": third}); !got.ok {
		t.Errorf("fork_session with room for one: %s", got.text)
	}
	if got := mcpOutcome(t, c, toolForkSession, map[string]any{"session_id": a}); got.ok || !strings.Contains(got.text, "max_sessions") {
		t.Errorf("a second fork: ok=%v %s, want a refusal naming max_sessions", got.ok, got.text)
	}
	if n := sessionCount(t, eng, dave); n != 2 {
		t.Errorf("dave has %d sessions, want 2 (max_sessions)", n)
	}
}

// TestTenantGateConcurrentCreates: ten calls of dave (max_sessions 3) each
// making a session at once, over every face, never leave him more than 3.
// The count used to be taken before the engine made anything, so
// concurrent calls all saw room.
func TestTenantGateConcurrentCreates(t *testing.T) {
	eng := realEngine(t)
	for _, tc := range []struct {
		name string
		make func(t *testing.T, sv *service, c *client.Client, i int) outcome
	}{
		{"execute_python", func(t *testing.T, sv *service, c *client.Client, i int) outcome {
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = toolExecute, map[string]any{"code": "1", "session_id": uniq("gate-x")}
			res, err := c.CallTool(context.Background(), req)
			if err != nil {
				return outcome{false, err.Error()}
			}
			return outcome{!res.IsError, text(res)}
		}},
		{"every face", func(t *testing.T, sv *service, c *client.Client, i int) outcome {
			id := uniq("gate-x")
			switch i % 4 {
			case 0:
				return restOutcome(sv.do(t, "PUT", "/api/v1/sessions/"+id+"/files/x.txt", "dave", []byte("x")))
			case 1:
				return restOutcome(sv.do(t, "POST", "/api/v1/sandboxes", "dave", []byte(`{}`)))
			case 2:
				return restOutcome(sv.do(t, "POST", "/api/v1/execute", "dave", []byte(`{"code": "1", "backend": "jupyter"}`)))
			}
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = toolWriteFile, map[string]any{"session_id": id, "path": "x.txt", "content": "x"}
			res, err := c.CallTool(context.Background(), req)
			if err != nil {
				return outcome{false, err.Error()}
			}
			return outcome{!res.IsError, text(res)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearSessions(t, eng, dave)
			sv, _ := gateService(t, eng, nil, profiles.TenantLimits{MaxSessions: 3})
			const n = 10
			clients := make([]*client.Client, n)
			for i := range clients {
				clients[i] = mcpClient(t, sv, "dave")
			}
			out := make([]outcome, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					out[i] = tc.make(t, sv, clients[i], i)
				}()
			}
			close(start)
			wg.Wait()
			made := 0
			for i, o := range out {
				switch {
				case o.ok:
					made++
				case !strings.Contains(o.text, "max_sessions"):
					t.Errorf("call %d: refused for another reason than max_sessions: %s", i, o.text)
				}
			}
			if have := sessionCount(t, eng, dave); made != 3 || have != 3 {
				t.Errorf("%d of %d concurrent creates succeeded and dave has %d sessions; want 3 and 3 (max_sessions)", made, n, have)
			}
		})
	}
}
