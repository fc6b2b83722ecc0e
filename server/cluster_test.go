package server

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRoutedSession: the session a request is for, wherever each face puts
// its id; the body stays readable for the handler.
func TestRoutedSession(t *testing.T) {
	for _, tc := range []struct {
		method, path, body, want string
	}{
		{"GET", "/api/v1/sessions/abc/files/x.txt", "", "abc"},
		{"POST", "/api/v1/sessions/abc/state", "{}", "abc"},
		{"DELETE", "/api/v1/sandboxes/s-1", "", "s-1"},
		{"GET", "/api/v1/sandboxes", "", ""},
		{"POST", "/api/v1/execute", `{"code":"1","session_id":"s2"}`, "s2"},
		{"POST", "/api/v1/execute", `{"code":"1"}`, ""},
		{"POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"1","session_id":"m1"}}}`, "m1"},
		{"POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"forge://sessions/m2/state"}}`, "m2"},
		{"POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, ""},
		{"POST", "/mcp", `not json`, ""},
		{"GET", "/api/v1/sessions/../etc/state", "", ""},
	} {
		r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		id, body, err := routedSession(r)
		if err != nil || id != tc.want {
			t.Errorf("%s %s %s: got %q, %v, want %q", tc.method, tc.path, tc.body, id, err, tc.want)
		}
		if body != nil && string(body) != tc.body {
			t.Errorf("%s %s: body read as %q, want %q", tc.method, tc.path, body, tc.body)
		}
	}
}
