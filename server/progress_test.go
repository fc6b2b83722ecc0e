package server

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
)

// chattyEngine reports output every 10 ms for 1.2 s, far more often than
// clients may be notified.
type chattyEngine struct{ *stubEngine }

func (e chattyEngine) Execute(ctx context.Context, req engine.Request) (*kernel.Result, error) {
	var all strings.Builder
	for i := range 120 {
		s := strings.Repeat("x", 1000) + "\n"
		if i%10 == 0 {
			s = "tick\n"
		}
		all.WriteString(s)
		if req.Progress != nil {
			req.Progress(engine.Progress{Stdout: s})
		}
		time.Sleep(10 * time.Millisecond) // the "code" running: not waiting for anything
	}
	return &kernel.Result{Success: true, Stdout: all.String()}, nil
}

// Notifications come at most every 250 ms, in order, each with a bounded
// slice of the new output and the elapsed time; none trails the result.
func TestProgressRateAndBound(t *testing.T) {
	c := connect(t, New(chattyEngine{newStub()}, Options{}))
	var mu sync.Mutex
	var notes []mcp.JSONRPCNotification
	done := false
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		mu.Lock()
		defer mu.Unlock()
		if n.Method == "notifications/progress" {
			if done {
				t.Errorf("a progress notification after the result")
			}
			notes = append(notes, n)
		}
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = toolExecute
	req.Params.Arguments = map[string]any{"code": "x"}
	req.Params.Meta = &mcp.Meta{ProgressToken: "tok"}
	if _, err := c.CallTool(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	done = true
	defer mu.Unlock()
	if len(notes) < 3 {
		t.Fatalf("got %d notifications over 1.2 s, want at least 3 (every 250 ms)", len(notes))
	}
	last, prev := -1.0, 0.0
	for i, n := range notes {
		f := n.Params.AdditionalFields
		if f["progressToken"] != "tok" {
			t.Errorf("notification %d: token %v", i, f["progressToken"])
		}
		p, _ := f["progress"].(float64)
		if p <= last {
			t.Errorf("notification %d: progress %v after %v", i, p, last)
		}
		last = p
		if out, _ := f["stdout"].(string); len(out) > progressChunkCap {
			t.Errorf("notification %d carries %d bytes of stdout, over %d", i, len(out), progressChunkCap)
		}
		// The server's own clock: the client's receipt times jitter under load.
		// In whole milliseconds, as sent: 1.05 - 0.8 is 0.2499... in floats.
		if i > 0 && math.Round(p*1000)-math.Round(prev*1000) < float64(progressInterval.Milliseconds()) {
			t.Errorf("notifications %d and %d sent only %.3f s apart", i-1, i, p-prev)
		}
		prev = p
	}
	if _, ok := notes[len(notes)-1].Params.AdditionalFields["skipped_bytes"]; !ok {
		t.Errorf("120 KB of output in ~16 KiB notifications without skipped_bytes")
	}
}
