package stress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// forgeBin is the forge binary make builds, or FORGE_TEST_BIN (an older
// build, to show that a regression test fails on it).
func forgeBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	if bin := os.Getenv("FORGE_TEST_BIN"); bin != "" {
		p = bin
	}
	_, err := os.Stat(p)
	testutil.Require(t, err == nil, p+" missing: run make build")
	return p
}

// serveProc is `forge serve` over stdio with a minimal JSON-RPC client:
// requests by id, replies routed back by id, notifications ignored.
type serveProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *testutil.LogBuffer
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed

	mu      sync.Mutex
	next    int
	waiting map[int]chan rpcReply
}

type rpcReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startServe starts forge serve on state with the config file and
// initializes an MCP session with it.
func startServe(t *testing.T, state, config string) *serveProc {
	t.Helper()
	cmd := exec.Command(forgeBin(t), "--state-dir", state, "--config", config, "--log-level", "debug", "serve")
	p := &serveProc{t: t, cmd: cmd, stderr: &testutil.LogBuffer{}, exited: make(chan struct{}), waiting: map[int]chan rpcReply{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(stdout)
	t.Cleanup(func() {
		if p.running() {
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("forge serve (pid %d) stderr:\n%s", cmd.Process.Pid, p.stderr)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := p.call(ctx, "initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "forge-stress", "version": "1"},
	}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	p.notify("notifications/initialized")
	return p
}

func (p *serveProc) pid() int { return p.cmd.Process.Pid }

func (p *serveProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *serveProc) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var msg struct {
			ID *int `json:"id"`
			rpcReply
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil || msg.ID == nil {
			continue // a notification (or a request to us: none expected)
		}
		p.mu.Lock()
		ch := p.waiting[*msg.ID]
		delete(p.waiting, *msg.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- msg.rpcReply
		}
	}
	p.err = p.cmd.Wait()
	close(p.exited)
}

func (p *serveProc) write(msg map[string]any) {
	msg["jsonrpc"] = "2.0"
	b, _ := json.Marshal(msg)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Errorf("writing to forge serve: %v", err)
	}
}

func (p *serveProc) notify(method string) { p.write(map[string]any{"method": method}) }

// send writes a request and returns where its reply will arrive.
func (p *serveProc) send(method string, params any) <-chan rpcReply {
	ch := make(chan rpcReply, 1)
	p.mu.Lock()
	p.next++
	id := p.next
	p.waiting[id] = ch
	p.mu.Unlock()
	p.write(map[string]any{"id": id, "method": method, "params": params})
	return ch
}

func (p *serveProc) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	select {
	case r := <-p.send(method, params):
		if r.Error != nil {
			return nil, fmt.Errorf("%s: JSON-RPC error %d: %s", method, r.Error.Code, r.Error.Message)
		}
		return r.Result, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s: forge serve exited: %v", method, p.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// toolResult is the part of a tools/call result the tests read.
type toolResult struct {
	IsError    bool `json:"isError"`
	Structured struct {
		Success bool     `json:"success"`
		Stdout  string   `json:"stdout"`
		Result  any      `json:"result"`
		Notes   []string `json:"notes"`
		Error   *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"structuredContent"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
}

func (p *serveProc) tool(name string, args map[string]any) toolResult {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	raw, err := p.call(ctx, "tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		p.t.Fatalf("%s: %v", name, err)
	}
	var r toolResult
	if err := json.Unmarshal(raw, &r); err != nil {
		p.t.Fatalf("%s: result %s: %v", name, raw, err)
	}
	return r
}

// execute runs code (in session id, if not empty) and fails the test
// unless it succeeded.
func (p *serveProc) execute(id, code string) toolResult {
	p.t.Helper()
	args := map[string]any{"code": code}
	if id != "" {
		args["session_id"] = id
	}
	r := p.tool("execute_python", args)
	if r.IsError || !r.Structured.Success {
		p.t.Fatalf("execute_python %q in %q: %+v", code, id, r)
	}
	return r
}

// stop closes stdin (a graceful shutdown: sessions hibernate) and waits.
func (p *serveProc) stop() {
	p.t.Helper()
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		p.t.Fatal("forge serve did not exit after stdin closed")
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		p.t.Fatalf("forge serve: %v", p.err)
	}
	if p.err != nil {
		p.t.Errorf("forge serve exited with %v; stderr:\n%s", p.err, p.stderr)
	}
}

// jsonText is the tool result's text content, joined.
func (r toolResult) text() string {
	var b bytes.Buffer
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}
