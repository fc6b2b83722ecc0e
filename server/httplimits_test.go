package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
)

// slowEngine answers Execute after d, or with its context's error when that
// ends first.
type slowEngine struct {
	*stubEngine
	d time.Duration
}

func (e slowEngine) Execute(ctx context.Context, req engine.Request) (*kernel.Result, error) {
	select {
	case <-time.After(e.d):
		return e.stubEngine.Execute(ctx, req)
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// TestReadTimeout: a request whose body is read runs past readTimeout
// (net/http lifts the deadline; a cancelled run would be an error here), and
// one whose body never comes loses its connection at readTimeout (on /mcp; the REST
// API reads bodies with a timeout of its own, huma's BodyReadTimeout).
func TestReadTimeout(t *testing.T) {
	old := readTimeout
	readTimeout = 300 * time.Millisecond
	t.Cleanup(func() { readTimeout = old })
	s := New(slowEngine{newStub(), time.Second}, Options{InsecureNoAuth: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeHTTP(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + ln.Addr().String()

	// A stateless (2026-07-28) tools/call on /mcp: the REST API's huma
	// sets and lifts a deadline of its own around the body.
	req, _ := http.NewRequest(http.MethodPost, base+EndpointPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call",`+
		`"params":{"name":"execute_python","arguments":{"code":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "execute_python")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "stub") {
		t.Errorf("an execution of 1 s with a read timeout of 300 ms: %d %s", resp.StatusCode, b)
	}

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"co")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err = io.ReadAll(c) // forge closes the connection
	if err != nil || time.Since(start) > 5*time.Second {
		t.Errorf("a body that never comes: connection closed after %v (%v), want about the read timeout", time.Since(start), err)
	}
}
