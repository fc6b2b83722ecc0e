package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testutil"
)

// TestHoldHosted: while hosted tools load, initialize is answered and
// tools/list waits; it is answered once they are attached, or with the
// load error when they failed.
func TestHoldHosted(t *testing.T) {
	ask := func(s *Server, id int, method string) <-chan string {
		out := make(chan string, 1)
		go func() {
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": map[string]any{}})
			r, _ := json.Marshal(s.HandleMessage(context.Background(), b))
			out <- string(r)
		}()
		return out
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

	s := New(newStub(), Options{})
	release := s.HoldHosted()
	if r, _ := json.Marshal(s.HandleMessage(context.Background(), []byte(initialize))); !strings.Contains(string(r), `"serverInfo"`) {
		t.Fatalf("initialize while held = %s", r)
	}
	list := ask(s, 2, "tools/list")
	// Held: no answer while the tools load (watched for a while; an
	// answer would come within microseconds).
	select {
	case r := <-list:
		t.Fatalf("tools/list answered while held: %s", r)
	case <-time.After(200 * time.Millisecond):
	}
	release(nil)
	select {
	case r := <-list:
		if !strings.Contains(r, "execute_python") {
			t.Fatalf("tools/list after release = %s", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tools/list not answered after release")
	}

	s = New(newStub(), Options{})
	release = s.HoldHosted()
	list = ask(s, 3, "tools/list")
	release(errors.New("tools.py: ModuleNotFoundError"))
	select {
	case r := <-list:
		if !strings.Contains(r, `"error"`) || !strings.Contains(r, "ModuleNotFoundError") || strings.Contains(r, "execute_python") {
			t.Fatalf("tools/list after a failed load = %s, want the load error", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tools/list not answered after a failed load")
	}
}

// TestHoldHostedAtStdinEnd: a tools/call read while the hosted tools still
// load, just before stdin ends, is answered once they have loaded (here:
// with the load's error). The end cancelled the held request, which was
// then dropped without an answer: `printf ... | forge serve` got none.
func TestHoldHostedAtStdinEnd(t *testing.T) {
	s := New(newStub(), Options{})
	release := s.HoldHosted()
	in := initializeLine + "\n" + `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":"list","method":"tools/list","params":{}}` + "\n"
	go func() {
		// Once the input has ended (the shutdown began, the held request
		// is cancelled), the load finishes.
		for deadline := time.Now().Add(10 * time.Second); !s.draining() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		release(errors.New("tools.py: ModuleNotFoundError"))
	}()
	out := &testutil.LogBuffer{}
	if err := s.ServeStdio(t.Context(), strings.NewReader(in), out); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	if got := out.String(); !strings.Contains(got, `"id":"list"`) || !strings.Contains(got, "ModuleNotFoundError") {
		t.Fatalf("stdout %s: want tools/list answered with the load's error", got)
	}
}
