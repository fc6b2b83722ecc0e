package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// initialize is answered before the engine is open; a tool call that comes
// too early waits for it, and a resource read too.
func TestDeferredEngine(t *testing.T) {
	stub := newStub()
	d := NewDeferred(stub.cfg)
	c := connect(t, New(d, Options{})) // initialize answered with no engine
	got := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := call(t, c, map[string]any{"code": "print(1)"})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	select {
	case res := <-got:
		t.Fatalf("the call was answered before the engine was open: %+v", res)
	case <-time.After(100 * time.Millisecond): // it must still be waiting: no event to poll for
	}
	d.Resolve(stub, nil)
	select {
	case res := <-got:
		if res == nil || res.IsError || !strings.Contains(text(res), "stub") {
			t.Errorf("got %+v, want the stub's result", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits after Resolve")
	}
	if _, err := c.ReadResource(t.Context(), mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: uriEnvironmentInfo}}); err != nil {
		t.Errorf("reading a resource after Resolve: %v", err)
	}
}

// An engine that fails to open fails every call with its reason.
func TestDeferredEngineFailed(t *testing.T) {
	d := NewDeferred(newStub().cfg)
	d.Resolve(nil, errors.New("the image store is locked"))
	c := connect(t, New(d, Options{}))
	res, err := call(t, c, map[string]any{"code": "print(1)"})
	if err != nil || !res.IsError || !strings.Contains(text(res), "the image store is locked") {
		t.Errorf("got %+v, %v; want a tool error with the reason", res, err)
	}
}

// A call that waits for the engine with a progressToken hears the engine's
// progress lines (an images.preload import) as notifications/progress; once
// the engine is open, the call runs as usual.
func TestDeferredProgress(t *testing.T) {
	stub := newStub()
	d := NewDeferred(stub.cfg)
	c := connect(t, New(d, Options{}))
	notes := make(chan string, 100)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			msg, _ := n.Params.AdditionalFields["message"].(string)
			notes <- msg
		}
	})
	got := make(chan *mcp.CallToolResult, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = toolExecute
		req.Params.Arguments = map[string]any{"code": "print(1)"}
		req.Params.Meta = &mcp.Meta{ProgressToken: "start"}
		res, err := c.CallTool(t.Context(), req)
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	const line = "importing oci:/x: blob sha256:0123456789ab: 12.0/51.3 MiB (23 %)"
	deadline := time.After(10 * time.Second)
	for seen := false; !seen; {
		// The call subscribes when it starts waiting: write until it hears.
		if _, err := d.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case msg := <-notes:
			if strings.Contains(msg, line) {
				seen = true
				if !strings.HasPrefix(msg, "forge is starting: ") {
					t.Errorf("progress message %q does not say forge is starting", msg)
				}
			}
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no progress notification carried the engine's line")
		}
	}
	d.Resolve(stub, nil)
	select {
	case res := <-got:
		if res == nil || res.IsError || !strings.Contains(text(res), "stub") {
			t.Errorf("got %+v, want the stub's result", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits after Resolve")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.watchers) != 0 {
		t.Errorf("%d progress watchers left after the call", len(d.watchers))
	}
}
