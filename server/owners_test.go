package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// TestSessionsBelongToTheirPrincipal: two clients of one engine, one over
// stdio (the local principal) and one over an HTTP listener (that
// listener's principal). The second does not see the first's session in
// list_sessions, and every call on its id answers exactly like a call on an
// id that does not exist; the first's variables and files stay its own.
func TestSessionsBelongToTheirPrincipal(t *testing.T) {
	eng := realEngine(t)
	alice := connect(t, New(eng, Options{Version: "test"}))
	bob := httpClient(t, New(eng, Options{Version: "test", InsecureNoAuth: true}))

	var b [6]byte
	rand.Read(b[:])
	id, unknown := "owned-"+hex.EncodeToString(b[:]), "never-"+hex.EncodeToString(b[:])
	res := callTool(t, alice, toolExecute, map[string]any{"code": "secret = 'alice only'", "session_id": id})
	if res.IsError {
		t.Fatalf("alice's first call: %s", text(res))
	}
	t.Cleanup(func() { // t.Context() is cancelled by now
		for _, c := range []*client.Client{alice, bob} {
			c.CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: toolDestroySession, Arguments: map[string]any{"session_id": id}}})
		}
	})
	if res = callTool(t, alice, toolWriteFile, map[string]any{"session_id": id, "path": "notes.txt", "content": "alice's notes"}); res.IsError {
		t.Fatalf("alice's write_file: %s", text(res))
	}
	if res = callTool(t, alice, toolListSessions, map[string]any{}); !strings.Contains(text(res), id) {
		t.Fatalf("alice does not see her own session: %s", text(res))
	}

	if res = callTool(t, bob, toolListSessions, map[string]any{}); strings.Contains(text(res), id) {
		t.Errorf("bob's list_sessions shows alice's session %s:\n%s", id, text(res))
	}
	same := func(what, theirs, missing string) {
		t.Helper()
		if got, want := strings.ReplaceAll(theirs, id, "ID"), strings.ReplaceAll(missing, unknown, "ID"); got != want {
			t.Errorf("%s of alice's session as bob: got %q, want what an unknown id gets: %q", what, got, want)
		}
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{toolDocumentState, map[string]any{"variables": map[string]any{"secret": "?"}}},
		{toolReadFile, map[string]any{"path": "notes.txt"}},
		{toolListFiles, map[string]any{}},
		{toolDestroySession, map[string]any{}},
		{toolForkSession, map[string]any{"new_session_id": "bobs-fork"}},
	} {
		call := func(sid string) string {
			args := map[string]any{"session_id": sid}
			for k, v := range tc.args {
				args[k] = v
			}
			r := callTool(t, bob, tc.tool, args)
			if !r.IsError {
				t.Errorf("%s on %s as bob succeeded: %s", tc.tool, sid, text(r))
			}
			return text(r)
		}
		same(tc.tool, call(id), call(unknown))
	}
	for _, suffix := range []string{"/state", "/variables"} {
		read := func(sid string) string {
			_, err := bob.ReadResource(t.Context(), mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: "forge://sessions/" + sid + suffix}})
			if err == nil {
				t.Errorf("bob read forge://sessions/%s%s", sid, suffix)
				return ""
			}
			return err.Error()
		}
		same("forge://sessions/{id}"+suffix, read(id), read(unknown))
	}
	// execute_python with her id gives bob a fresh session of his own, as
	// any unknown id would.
	res = callTool(t, bob, toolExecute, map[string]any{"code": "import os\n[('secret' in globals()), os.path.exists('notes.txt')]", "session_id": id})
	if m := structured(t, res); res.IsError || m["result"] == nil || strings.Contains(text(res), "true") {
		t.Errorf("bob's execute in alice's session id sees her state: %s", text(res))
	}
	res = callTool(t, alice, toolExecute, map[string]any{"code": "secret + ' / ' + open('notes.txt').read()", "session_id": id})
	if m := structured(t, res); m["result"] != "alice only / alice's notes" {
		t.Errorf("alice's session after bob's calls: %s", text(res))
	}
}

// httpClient serves s on a loopback listener and returns an initialized
// streamable HTTP client of it.
func httpClient(t *testing.T, s *Server) *client.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeHTTP(ctx, ln) }()
	c, err := client.NewStreamableHttpClient("http://" + ln.Addr().String() + EndpointPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	})
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "forge-test-http", Version: "1"}
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	return c
}
