package bridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/internal/ownedsock"
)

// SocketName is the grant's socket inside the bridge directory.
const SocketName = "bridge.sock"

// Limits of one grant's socket.
const (
	maxConns      = 8                // concurrent connections; more are refused
	maxViolations = 20               // audited one by one; after that, one summary event
	idleTimeout   = 5 * time.Minute  // a connection waiting for its next request
	writeTimeout  = 10 * time.Second // a sandbox that does not read its reply
)

// Sandbox is what a grant needs of the sandbox it serves (*sandbox.Sandbox
// is one).
type Sandbox interface {
	ID() string
	// BridgeDir is the host directory mounted at /run/forge in this
	// sandbox and no other; the grant's socket is made there.
	BridgeDir() string
	// HostUID and HostGID are the sandbox user's host ids: the socket's
	// owner, and the only peer credentials accepted.
	HostUID() int
	HostGID() int
	// OwnsProcess reports whether a host pid is a process of the sandbox.
	OwnsProcess(pid int) (bool, error)
}

// Grant is the set of tools one sandbox may call, served on its own socket.
// Its call counters cover one execution: Reset them between the executions
// of a session.
type Grant struct {
	b         *Bridge
	sb        Sandbox
	sandboxID string
	path      string // host path of the socket
	tools     map[string]Tool
	list      []Tool
	prelude   string
	ln        *net.UnixListener
	ctx       context.Context // cancelled by Close: ends in-flight calls
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu         sync.Mutex
	calls      map[string]int // per server, since the last Reset
	violations int            // ungranted calls, for rate-limiting their audit
	refusals   int            // connections from outside the sandbox, likewise
	conns      map[net.Conn]struct{}
	closed     bool
}

// Grant makes the named tools callable by the sandbox sb. It listens on
// bridge.sock in the sandbox's bridge directory, owned by the sandbox
// user's host uid/gid with mode 0600, and serves only connections whose
// peer (SO_PEERCRED) is a process of sb running as that user; any other is
// closed and audited as a security violation. Unknown names are an error
// (ErrUnknownTool) listing the available tools. A directory has at most one
// live grant: Close the old one before granting anew (a session whose
// tools change).
func (b *Bridge) Grant(ctx context.Context, sb Sandbox, names []string) (*Grant, error) {
	sandboxID, dir := sb.ID(), sb.BridgeDir()
	if dir == "" {
		return nil, fmt.Errorf("sandbox %s has no bridge directory", sandboxID)
	}
	tools, err := b.lookup(names)
	if err != nil {
		return nil, err
	}
	prelude, err := Prelude(tools, SandboxSocketPath)
	if err != nil {
		return nil, err
	}
	g := &Grant{b: b, sb: sb, sandboxID: sandboxID, path: filepath.Join(dir, SocketName), list: tools, prelude: prelude,
		tools: map[string]Tool{}, calls: map[string]int{}, conns: map[net.Conn]struct{}{}}
	for _, t := range tools {
		g.tools[t.Name] = t
	}
	if g.ln, err = ownedsock.Listen(dir, g.path, sb.HostUID(), sb.HostGID()); err != nil {
		return nil, fmt.Errorf("bridge socket of sandbox %s: %w", sandboxID, err)
	}
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		g.shutdown()
		return nil, ErrClosed
	}
	b.grants[g] = struct{}{}
	b.mu.Unlock()

	g.wg.Go(g.serve)
	b.log.Debug("bridge: granted", "sandbox", sandboxID, "tools", len(tools), "socket", g.path)
	return g, nil
}

// Prelude is the Python code that defines the granted tools; run it in the
// sandbox (as an ordinary exec, output discarded) before the user's code.
func (g *Grant) Prelude() string { return g.prelude }

// PreludeAt is Prelude for a socket at another path, for code that runs
// outside a sandbox (tests, benchmarks): SocketPath gives the host path.
func (g *Grant) PreludeAt(socketPath string) (string, error) { return Prelude(g.list, socketPath) }

// SocketPath is the host path of the grant's socket.
func (g *Grant) SocketPath() string { return g.path }

// Tools are the granted tools.
func (g *Grant) Tools() []Tool { return append([]Tool(nil), g.list...) }

// Reset starts a new execution: the per-execution call counts restart.
func (g *Grant) Reset() {
	g.mu.Lock()
	clear(g.calls)
	g.mu.Unlock()
}

// Close stops the listener, ends in-flight calls and connections, and
// removes the socket. It is idempotent.
func (g *Grant) Close() error {
	g.b.mu.Lock()
	delete(g.b.grants, g)
	g.b.mu.Unlock()
	return g.shutdown()
}

func (g *Grant) shutdown() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	if g.cancel != nil {
		g.cancel()
	}
	err := g.ln.Close()
	g.wg.Wait()
	if rerr := ownedsock.Remove(g.path); rerr != nil {
		err = errors.Join(err, rerr)
	}
	g.b.log.Debug("bridge: grant closed", "sandbox", g.sandboxID)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (g *Grant) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				g.b.log.Warn("bridge: accept", "sandbox", g.sandboxID, "err", err)
			}
			return
		}
		if !g.admit(c) || !g.track(c) {
			continue
		}
		g.wg.Go(func() { g.handle(c) })
	}
}

// track registers c, or refuses it when the grant is closed or has
// maxConns connections already.
func (g *Grant) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || len(g.conns) >= maxConns {
		if !g.closed {
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(errorLine(&callError{kindLimit, fmt.Sprintf("too many concurrent tool calls (at most %d)", maxConns)}))
		}
		c.Close()
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

// request is one line from the sandbox.
type request struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// handle serves one connection: one request line, one reply line, as many
// times as the sandbox likes. Anything malformed ends the connection after
// an error reply.
func (g *Grant) handle(c net.Conn) {
	defer func() {
		if r := recover(); r != nil {
			g.b.log.Error("bridge: panic serving a sandbox", "sandbox", g.sandboxID, "panic", r, "stack", string(debug.Stack()))
		}
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		_ = c.SetReadDeadline(time.Now().Add(idleTimeout))
		line, err := readLine(r, g.b.opts.MaxRequestSize)
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				g.reply(c, nil, &callError{kindLimit, fmt.Sprintf("request larger than %d bytes", g.b.opts.MaxRequestSize)})
			}
			return
		}
		result, cerr, keep := g.dispatch(line)
		if !g.reply(c, result, cerr) || !keep {
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one '\n'-terminated line of at most limit bytes.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit+1 {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// dispatch parses and runs one request. keep is false when the connection
// must be closed (abuse: malformed request, ungranted tool).
func (g *Grant) dispatch(line []byte) (result json.RawMessage, _ *callError, keep bool) {
	req, err := parseRequest(line)
	if err != nil {
		return nil, &callError{kindBadRequest, "malformed tool request: " + err.Error()}, false
	}
	t, ok := g.tools[req.Tool]
	if !ok {
		g.violation(req.Tool)
		return nil, &callError{kindNotGranted, fmt.Sprintf("tool %q is not granted to this execution; pass it in mcp_tools to use it", req.Tool)}, false
	}
	result, cerr := g.call(t, req.Arguments)
	return result, cerr, true
}

// violation audits a call of an ungranted tool. A sandbox that keeps trying
// gets its first maxViolations audited, then one event saying the rest are
// not, so it cannot flood the audit log.
func (g *Grant) violation(tool string) {
	ev := audit.Event{Event: audit.EventSecurityViolation, Severity: audit.SeverityCritical,
		SandboxID: g.sandboxID, Tool: tool, Reason: "call of an MCP tool not granted to this sandbox"}
	if g.auditCapped(&g.violations, ev, "%d calls of MCP tools not granted to this sandbox; further ones are refused without audit") {
		g.b.log.Warn("bridge: refused a tool that was not granted", "sandbox", g.sandboxID, "tool", tool)
	}
}

// auditCapped counts one more violation in *n and audits ev, at most
// maxViolations times per grant: the last one audited is a summary
// (summaryf with the count, no tool), later ones are only counted, so a
// flood cannot fill the audit log. It reports whether it audited.
func (g *Grant) auditCapped(n *int, ev audit.Event, summaryf string) bool {
	g.mu.Lock()
	*n++
	c := *n
	g.mu.Unlock()
	switch {
	case c < maxViolations:
	case c == maxViolations:
		ev.Tool, ev.Reason = "", fmt.Sprintf(summaryf, c)
	default:
		return false
	}
	g.b.audit.Log(ev)
	return true
}

// parseRequest decodes a request line strictly: one object, a string tool
// name, arguments an object (or absent/null).
func parseRequest(line []byte) (request, error) {
	var req request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, errors.New("not a JSON object with \"tool\" and \"arguments\"")
	}
	if dec.More() {
		return req, errors.New("more than one JSON value on the line")
	}
	if req.Tool == "" {
		return req, errors.New("no tool name")
	}
	args := bytes.TrimSpace(req.Arguments)
	switch {
	case len(args) == 0 || bytes.Equal(args, []byte("null")):
		req.Arguments = json.RawMessage("{}")
	case args[0] != '{':
		return req, errors.New("arguments must be a JSON object")
	}
	return req, nil
}

// call forwards one granted call, enforcing the server's limits, and
// audits it (server and tool name, never the arguments).
func (g *Grant) call(t Tool, args json.RawMessage) (json.RawMessage, *callError) {
	d := g.b.servers[t.Server]
	ev := audit.Event{Event: audit.EventToolCall, SandboxID: g.sandboxID, Tool: t.remoteOrName(), Server: t.Server}
	g.mu.Lock()
	n := g.calls[t.Server]
	over := d.cfg.MaxCalls > 0 && n >= d.cfg.MaxCalls
	if !over {
		g.calls[t.Server] = n + 1
	}
	g.mu.Unlock()
	if over {
		ev.Severity, ev.Reason = audit.SeverityWarning, "max_calls reached"
		g.b.audit.Log(ev)
		return nil, &callError{kindLimit, fmt.Sprintf("tool call limit reached: at most %d calls to MCP server %q per execution (mcp_tools.%s.max_calls)", d.cfg.MaxCalls, t.Server, t.Server)}
	}
	start := time.Now()
	res, err := d.call(g.ctx, t.remoteOrName(), args)
	var result json.RawMessage
	if err == nil {
		result, err = convertResult(t, res, d.cfg.MaxResponseSize)
	}
	ev.Fields = map[string]any{"duration_ms": time.Since(start).Milliseconds()}
	var cerr *callError
	if errors.As(err, &cerr) {
		ev.Reason = cerr.kind
		if cerr.kind != kindToolError {
			ev.Severity = audit.SeverityWarning
		}
	} else if err != nil {
		cerr = &callError{kindUnavail, "tool call failed"}
		g.b.log.Error("bridge: tool call", "sandbox", g.sandboxID, "tool", t.Name, "err", err)
	}
	g.b.audit.Log(ev)
	g.b.log.Debug("bridge: tool call", "sandbox", g.sandboxID, "tool", t.Name, "took", time.Since(start), "ok", cerr == nil)
	return result, cerr
}

// reply writes one reply line; false means the connection is unusable.
func (g *Grant) reply(c net.Conn, result json.RawMessage, cerr *callError) bool {
	var line []byte
	if cerr != nil {
		line = errorLine(cerr)
	} else {
		line = append(append([]byte(`{"ok":true,"result":`), result...), "}\n"...)
	}
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.Write(line)
	if err != nil {
		g.b.log.Debug("bridge: writing a reply", "sandbox", g.sandboxID, "err", err)
	}
	return err == nil
}

func errorLine(e *callError) []byte {
	line, _ := json.Marshal(map[string]any{"ok": false, "error": map[string]string{"kind": e.kind, "message": e.msg}})
	return append(line, '\n')
}
