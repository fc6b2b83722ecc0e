package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/test/testutil"
)

// rpcCase is one raw JSON-RPC message and how forge must answer it on
// every transport: code 0 means a result, noReply means nothing at all.
type rpcCase struct {
	name    string
	line    string
	code    int
	id      any // nil: id null (float64 for numbers, as JSON decodes them)
	noReply bool
}

var rpcCases = []rpcCase{
	{name: "garbage", line: `this is not json`, code: mcp.PARSE_ERROR},
	{name: "truncated", line: `{"jsonrpc":"2.0","id":1,"method":`, code: mcp.PARSE_ERROR},
	{name: "deep unclosed", line: strings.Repeat("[", 100000), code: mcp.PARSE_ERROR},
	{name: "deep closed", line: strings.Repeat("[", 100000) + strings.Repeat("]", 100000), code: mcp.PARSE_ERROR},
	{name: "deep in params", line: `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}`, code: mcp.PARSE_ERROR},
	{name: "number", line: `42`, code: mcp.INVALID_REQUEST},
	{name: "string", line: `"ping"`, code: mcp.INVALID_REQUEST},
	{name: "null", line: `null`, code: mcp.INVALID_REQUEST},
	{name: "empty object", line: `{}`, code: mcp.INVALID_REQUEST},
	{name: "batch", line: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, code: mcp.INVALID_REQUEST},
	{name: "empty batch", line: `[]`, code: mcp.INVALID_REQUEST},
	{name: "id object", line: `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, code: mcp.INVALID_REQUEST},
	{name: "id array", line: `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, code: mcp.INVALID_REQUEST},
	{name: "id bool", line: `{"jsonrpc":"2.0","id":true,"method":"ping"}`, code: mcp.INVALID_REQUEST},
	{name: "id null", line: `{"jsonrpc":"2.0","id":null,"method":"ping"}`, code: mcp.INVALID_REQUEST},
	{name: "empty method", line: `{"jsonrpc":"2.0","id":7,"method":""}`, code: mcp.INVALID_REQUEST, id: float64(7)},
	{name: "no method", line: `{"jsonrpc":"2.0","id":"n"}`, code: mcp.INVALID_REQUEST, id: "n"},
	{name: "method number", line: `{"jsonrpc":"2.0","id":"x","method":5}`, code: mcp.INVALID_REQUEST, id: "x"},
	{name: "version 1.0", line: `{"jsonrpc":"1.0","id":8,"method":"ping"}`, code: mcp.INVALID_REQUEST, id: float64(8)},
	{name: "no version", line: `{"id":9,"method":"ping"}`, code: mcp.INVALID_REQUEST, id: float64(9)},
	{name: "params number", line: `{"jsonrpc":"2.0","id":10,"method":"ping","params":3}`, code: mcp.INVALID_REQUEST, id: float64(10)},
	{name: "bad arguments", line: `{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"execute_python","arguments":{"code":7}}}`, code: mcp.INVALID_PARAMS, id: "c"},
	{name: "response", line: `{"jsonrpc":"2.0","id":11,"result":{}}`, noReply: true},
	{name: "error response", line: `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"x"}}`, noReply: true},
	{name: "ping", line: `{"jsonrpc":"2.0","id":12,"method":"ping"}`, id: float64(12)},
}

type rpcReply struct {
	ID     any              `json:"id"`
	Result *json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (tc rpcCase) check(t *testing.T, replies []rpcReply) {
	t.Helper()
	if tc.noReply {
		if len(replies) != 0 {
			t.Errorf("got %+v, want no reply", replies)
		}
		return
	}
	if len(replies) != 1 {
		t.Fatalf("got %d replies %+v, want exactly one", len(replies), replies)
	}
	r := replies[0]
	switch {
	case tc.code == 0 && (r.Error != nil || r.Result == nil):
		t.Errorf("got error %+v, want a result", r.Error)
	case tc.code != 0 && (r.Error == nil || r.Error.Code != tc.code):
		t.Errorf("got %+v, want error code %d", r, tc.code)
	}
	if r.ID != tc.id {
		t.Errorf("got id %#v, want %#v", r.ID, tc.id)
	}
}

// TestJSONRPCStdio sends each raw line alone to ServeStdio and reads every
// reply until the server has drained.
func TestJSONRPCStdio(t *testing.T) {
	for _, tc := range rpcCases {
		t.Run(tc.name, func(t *testing.T) {
			out := &testutil.LogBuffer{}
			if err := New(newStub(), Options{}).ServeStdio(t.Context(), strings.NewReader(tc.line+"\n"), out); err != nil {
				t.Fatalf("ServeStdio: %v", err)
			}
			var replies []rpcReply
			sc := bufio.NewScanner(strings.NewReader(out.String()))
			for sc.Scan() {
				var r rpcReply
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					t.Fatalf("reply %q is not JSON: %v", sc.Text(), err)
				}
				replies = append(replies, r)
			}
			tc.check(t, replies)
		})
	}
}

// TestJSONRPCHTTP posts each raw message to the streamable HTTP transport,
// within an initialized MCP session, and expects the answers of stdio.
func TestJSONRPCHTTP(t *testing.T) {
	h, _ := New(newStub(), Options{InsecureNoAuth: true}).HTTPHandler()
	post := mcpPoster(h)
	w := post(initializeLine, "")
	sid := w.Header().Get(mcpserver.HeaderKeySessionID)
	if w.Code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s, session %q", w.Code, w.Body, sid)
	}
	for _, tc := range rpcCases {
		t.Run(tc.name, func(t *testing.T) {
			w := post(tc.line, sid)
			body := strings.TrimSpace(w.Body.String())
			if tc.noReply {
				if w.Code != http.StatusAccepted || body != "" {
					t.Errorf("got %d %q, want 202 and no body", w.Code, body)
				}
				return
			}
			if strings.HasPrefix(body, "event:") || strings.HasPrefix(body, "data:") {
				_, body, _ = strings.Cut(body, "data:")
			}
			var r rpcReply
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatalf("got %d %q, want a JSON-RPC reply: %v", w.Code, body, err)
			}
			tc.check(t, []rpcReply{r})
			wantStatus := http.StatusOK
			if tc.code == mcp.PARSE_ERROR || tc.code == mcp.INVALID_REQUEST {
				wantStatus = http.StatusBadRequest
			}
			if w.Code != wantStatus {
				t.Errorf("got HTTP %d, want %d", w.Code, wantStatus)
			}
		})
	}
}

// TestArgumentsDecodedOnce: the handler gets the arguments preflight
// decoded (through the context), not a second decode of mcp-go's copy.
func TestArgumentsDecodedOnce(t *testing.T) {
	msg, reply := checkMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"print(1)","timeout":2}}}`))
	if reply != nil {
		t.Fatalf("checkMessage: %v", reply)
	}
	ctx, reply, _ := New(newStub(), Options{}).preflight(context.Background(), msg)
	if reply != nil {
		t.Fatalf("preflight: %v", reply)
	}
	d := ctx.Value(decodedArgsKey{}).(*decodedArgs)
	d.execute.Code = "decoded once" // what the handler sees if it does not decode again
	req := mcp.CallToolRequest{}
	req.Params.Name = toolExecute
	req.Params.RawArguments = json.RawMessage(`{"code":"print(1)"}`)
	got, err := argsOf(ctx, req)
	if err != nil || got.execute.Code != "decoded once" {
		t.Errorf("argsOf: got %+v, %v; want the arguments preflight decoded", got, err)
	}
	got, err = argsOf(context.Background(), req) // an in-process caller
	if err != nil || got.execute.Code != "print(1)" {
		t.Errorf("argsOf without preflight: got %+v, %v; want the raw arguments decoded", got, err)
	}
}

// FuzzCheckMessage: any bytes get either a parse or invalid-request error,
// or pass as a request, notification or response whose fields make sense.
func FuzzCheckMessage(f *testing.F) {
	for _, tc := range rpcCases {
		if len(tc.line) < 1000 {
			f.Add([]byte(tc.line))
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		msg, reply := checkMessage(raw)
		if reply != nil {
			e, ok := reply.(mcp.JSONRPCError)
			if !ok || (e.Error.Code != mcp.PARSE_ERROR && e.Error.Code != mcp.INVALID_REQUEST) {
				t.Fatalf("checkMessage(%q) = %#v, want a parse or invalid-request error", raw, reply)
			}
			if _, err := json.Marshal(reply); err != nil {
				t.Fatalf("reply to %q does not marshal: %v", raw, err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("checkMessage passed invalid JSON %q", raw)
		}
		switch msg.kind {
		case kindRequest:
			if msg.method == "" || msg.id == nil {
				t.Fatalf("request %q with method %q id %v", raw, msg.method, msg.id)
			}
		case kindNotification:
			if msg.method == "" || msg.id != nil {
				t.Fatalf("notification %q with method %q id %v", raw, msg.method, msg.id)
			}
		}
	})
}
