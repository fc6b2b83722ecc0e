package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/test/testutil"
)

// preflightCase is one request and the answer both transports must give
// it: code 0 is a result, else the JSON-RPC error code.
type preflightCase struct {
	name   string
	method string
	params string
	code   int
}

// forgeCases are requests whose answers involve only forge's own tools.
var forgeCases = []preflightCase{
	{"forge tool call", "tools/call", `{"name":"execute_python","arguments":{"code":"print(1)"}}`, 0},
	{"code not a string", "tools/call", `{"name":"execute_python","arguments":{"code":7}}`, mcp.INVALID_PARAMS},
	{"negative timeout", "tools/call", `{"name":"execute_python","arguments":{"code":"x","timeout":-1}}`, mcp.INVALID_PARAMS},
	{"unknown argument", "tools/call", `{"name":"execute_python","arguments":{"code":"x","bogus":1}}`, mcp.INVALID_PARAMS},
	{"arguments an array", "tools/call", `{"name":"execute_python","arguments":[1]}`, mcp.INVALID_PARAMS},
	{"session tool without session_id", "tools/call", `{"name":"destroy_session","arguments":{}}`, mcp.INVALID_PARAMS},
	{"unknown tool", "tools/call", `{"name":"no_such_tool","arguments":{}}`, mcp.INVALID_PARAMS},
	{"tools/list", "tools/list", `{}`, 0},
}

// hostedCases call gateTool (see gateHost).
var hostedCases = []preflightCase{
	{"hosted call", "tools/call", `{"name":"gate_double","arguments":{"x":2}}`, 0},
	{"hosted argument of the wrong type", "tools/call", `{"name":"gate_double","arguments":{"x":"two"}}`, mcp.INVALID_PARAMS},
	{"hosted argument missing", "tools/call", `{"name":"gate_double","arguments":{}}`, mcp.INVALID_PARAMS},
	{"hosted unknown argument", "tools/call", `{"name":"gate_double","arguments":{"x":1,"y":2}}`, mcp.INVALID_PARAMS},
}

// TestPreflightSameOnBothTransports sends the same requests over stdio and
// HTTP, to servers alike but for the transport, and wants the same answers
// (code, message, data; results alike), as the one preflight makes them.
func TestPreflightSameOnBothTransports(t *testing.T) {
	t.Run("forge tools", func(t *testing.T) {
		compareTransports(t, nil, forgeCases)
	})
	t.Run("hosted tools", func(t *testing.T) {
		h := gateHost(t, realEngine(t))
		compareTransports(t, h, append(append([]preflightCase{}, forgeCases...), hostedCases...))
	})
}

// compareTransports asks cases of a stdio and an HTTP server on a stub
// engine, serving h's tools when h is not nil.
func compareTransports(t *testing.T, h *hosted.Host, cases []preflightCase) {
	t.Helper()
	newServer := func(opts Options) *Server {
		s := New(newStub(), opts)
		if h != nil {
			if err := s.AttachHosted(h); err != nil {
				t.Fatalf("AttachHosted: %v", err)
			}
		}
		return s
	}
	lines := make([]string, len(cases))
	for i, tc := range cases {
		lines[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":"c%d","method":%q,"params":%s}`, i, tc.method, tc.params)
	}
	overStdio := stdioAnswers(t, newServer(Options{}), lines)
	post := httpSession(t, newServer(Options{InsecureNoAuth: true}))
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("c%d", i)
			fromStdio, ok := overStdio[id]
			if !ok {
				t.Fatalf("no answer over stdio to %s", lines[i])
			}
			fromHTTP := post(lines[i], id)
			if diff := cmp.Diff(fromStdio, fromHTTP); diff != "" {
				t.Errorf("%s: answers differ (-stdio +http)\n%s", lines[i], diff)
			}
			checkAnswer(t, fromStdio, tc.code)
		})
	}
}

// checkAnswer wants a result (code 0) or an error with code.
func checkAnswer(t *testing.T, answer map[string]any, code int) {
	t.Helper()
	e, isErr := answer["error"].(map[string]any)
	switch {
	case code == 0 && isErr:
		t.Errorf("got error %v, want a result", e)
	case code == 0 && answer["result"] == nil:
		t.Errorf("got %v, want a result", answer)
	case code != 0 && (!isErr || e["code"] != float64(code)):
		t.Errorf("got %v, want error code %d", answer, code)
	}
}

const initializeLine = `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// stdioAnswers serves an initialized session of s over stdio with lines
// until EOF and returns the answers by id.
func stdioAnswers(t *testing.T, s *Server, lines []string) map[string]map[string]any {
	t.Helper()
	in := initializeLine + "\n" + `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" + strings.Join(lines, "\n") + "\n"
	out := &testutil.LogBuffer{}
	// stdin ends right after the lines: every call read before its end is
	// answered (TestStdioCallReadBeforeEOFAnswered).
	if err := s.ServeStdio(t.Context(), strings.NewReader(in), out); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	answers := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("stdio line %q is not JSON: %v", sc.Text(), err)
		}
		if id, ok := m["id"].(string); ok {
			answers[id] = m
		}
	}
	return answers
}

// mcpPoster posts a line to h's MCP endpoint, in the MCP session sid
// unless it is "" (initialize), and returns the answer.
func mcpPoster(h http.Handler) func(line, sid string) *httptest.ResponseRecorder {
	return func(line, sid string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+EndpointPath, strings.NewReader(line))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			r.Header.Set(mcpserver.HeaderKeySessionID, sid)
			r.Header.Set("MCP-Protocol-Version", "2025-06-18")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
}

// httpSession initializes an MCP session of s's HTTP transport and returns
// a func that posts one line in it and returns the answer with id: the
// body itself, or the event of an SSE stream that carries it.
func httpSession(t *testing.T, s *Server) func(line, id string) map[string]any {
	t.Helper()
	h, _ := s.HTTPHandler()
	post := mcpPoster(h)
	w := post(initializeLine, "")
	sid := w.Header().Get(mcpserver.HeaderKeySessionID)
	if w.Code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s, session %q", w.Code, w.Body, sid)
	}
	if w := post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, sid); w.Code != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", w.Code, w.Body)
	}
	return func(line, id string) map[string]any {
		t.Helper()
		w := post(line, sid)
		if w.Code != http.StatusOK {
			t.Fatalf("POST %s: HTTP %d %s, want 200", line, w.Code, w.Body)
		}
		bodies := []string{w.Body.String()}
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			bodies = nil
			for l := range strings.Lines(w.Body.String()) {
				if data, ok := strings.CutPrefix(l, "data:"); ok {
					bodies = append(bodies, data)
				}
			}
		}
		for _, b := range bodies {
			var m map[string]any
			if json.Unmarshal([]byte(b), &m) == nil && m["id"] == id {
				return m
			}
		}
		t.Fatalf("POST %s: no answer with id %s in %q", line, id, w.Body)
		return nil
	}
}

// TestPreflightDecodesParamsOnce: a tools/call's params are decoded once
// whatever else is served. Refused arguments of execute_python of n bytes
// cost the same allocations with and without a hosted tool attached;
// before the one preflight, the hosted tools' check decoded the params a
// second time (n bytes more) before forge's did.
func TestPreflightDecodesParamsOnce(t *testing.T) {
	h := gateHost(t, realEngine(t))
	plain := New(newStub(), Options{})
	withHosted := New(newStub(), Options{})
	if err := withHosted.AttachHosted(h); err != nil {
		t.Fatalf("AttachHosted: %v", err)
	}
	const n = 2 << 20
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"` +
		strings.Repeat("x", n) + `","timeout":-1}}}`)
	// The least of a few runs: other goroutines (the hosted tool's pool)
	// allocate too.
	allocated := func(s *Server) uint64 {
		least := uint64(math.MaxUint64)
		for range 5 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			reply := s.HandleMessage(context.Background(), line)
			runtime.ReadMemStats(&after)
			if e, ok := reply.(mcp.JSONRPCError); !ok || e.Error.Code != mcp.INVALID_PARAMS {
				t.Fatalf("got %v, want invalid params (timeout -1)", reply)
			}
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		return least
	}
	without, with := allocated(plain), allocated(withHosted)
	t.Logf("a refused tools/call with %d bytes of arguments allocates %d bytes (%.1f n) without hosted tools, %d (%.1f n) with one",
		n, without, float64(without)/n, with, float64(with)/n)
	if with > without+n/2 {
		t.Errorf("with a hosted tool attached, the call allocates %d bytes more than without (n = %d): its params are decoded again", with-without, n)
	}
}

// BenchmarkPreflight is the checks of one tools/call of execute_python
// before mcp-go sees it, from the raw line.
func BenchmarkPreflight(b *testing.B) {
	s := New(newStub(), Options{})
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"print(1)","timeout":2}}}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		msg, reply := checkMessage(line)
		if reply != nil {
			b.Fatal(reply)
		}
		if _, reply, _ := s.preflight(ctx, msg); reply != nil {
			b.Fatal(reply)
		}
	}
}

// TestStdioCallReadBeforeEOFAnswered: a hosted call whose line is read
// just before stdin's end is answered with the tool's result. The end
// begins the shutdown, and the handler refused every call that reached it
// after that ("forge is shutting down"), though the client had sent it
// before closing.
func TestStdioCallReadBeforeEOFAnswered(t *testing.T) {
	h := gateHost(t, realEngine(t))
	for i := range 5 {
		s := New(newStub(), Options{})
		if err := s.AttachHosted(h); err != nil {
			t.Fatal(err)
		}
		in := initializeLine + "\n" + `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
			`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"gate_double","arguments":{"x":21}}}` + "\n"
		out := &testutil.LogBuffer{}
		if err := s.ServeStdio(t.Context(), strings.NewReader(in), out); err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
		got := out.String()
		if !strings.Contains(got, `"id":"call"`) || strings.Contains(got, "shutting down") || !strings.Contains(got, "42") {
			t.Fatalf("round %d: the call read before EOF was answered %s, want the tool's result (42)", i, got)
		}
	}
}
