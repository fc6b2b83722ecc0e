package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
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
