package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestStdioElicitation: a request forge sends over stdio gets the client's
// answer by id; answers to nothing forge asked, oversized results and a
// client that never answers do not confuse or hang it.
func TestStdioElicitation(t *testing.T) {
	pr, pw := io.Pipe()
	sess := newStdioSession()
	sess.serve(&lineWriter{w: pw})
	sent := make(chan map[string]any, 4)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				sent <- m
			}
		}
	}()
	t.Cleanup(func() { pw.Close() })
	ask := func(ctx context.Context) (chan *mcp.ElicitationResult, chan error) {
		res, errc := make(chan *mcp.ElicitationResult, 1), make(chan error, 1)
		go func() {
			r, err := sess.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{Message: "ok?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}}})
			res <- r
			errc <- err
		}()
		return res, errc
	}
	next := func() map[string]any {
		select {
		case m := <-sent:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("forge sent no request within 10 s")
		}
		return nil
	}

	res, errc := ask(context.Background())
	m := next()
	if m["method"] != "elicitation/create" || m["params"].(map[string]any)["message"] != "ok?" {
		t.Fatalf("sent %v, want elicitation/create with the message", m)
	}
	id := m["id"].(string)
	sess.deliver("forge-999", []byte(`{"jsonrpc":"2.0","id":"forge-999","result":{"action":"accept"}}`)) // asked by nobody
	sess.deliver(id, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"action":"decline"}}`, id)))
	if r, err := <-res, <-errc; err != nil || r.Action != mcp.ElicitationResponseActionDecline {
		t.Fatalf("got %+v, %v; want the answer to this request (decline)", r, err)
	}

	res, errc = ask(context.Background())
	id = next()["id"].(string)
	sess.deliver(id, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"action":"accept","content":{"x":%q}}}`, id, strings.Repeat("a", maxClientResult))))
	if r, err := <-res, <-errc; err == nil || !strings.Contains(err.Error(), "bytes, over") {
		t.Fatalf("an oversized result: %+v, %v; want an error", r, err)
	}

	res, errc = ask(context.Background())
	id = next()["id"].(string)
	sess.deliver(id, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"error":{"code":-32601,"message":"Method not found"}}`, id)))
	if _, err := <-res, <-errc; err == nil || !strings.Contains(err.Error(), "-32601") {
		t.Fatalf("an error answer: %v; want it named", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	_, errc = ask(ctx)
	next()
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("no error after the context ended")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request the client never answers outlived its context")
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if len(sess.pending) != 0 {
		t.Errorf("%d requests still pending", len(sess.pending))
	}
}
