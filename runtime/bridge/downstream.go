package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// Restart backoff of a crashed server: the first restart is immediate, then
// the wait doubles up to maxBackoff; a call that succeeds resets it.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// downstream is one stdio MCP server. It is started by New and restarted
// lazily, by the next call, after it died.
type downstream struct {
	name string
	cfg  ServerConfig
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	c         *client.Client // nil when not running
	cmd       *exec.Cmd
	sp        *Spawned // instead of cmd, for a spawned server
	closed    bool
	backoff   time.Duration // wait before the next restart; 0 = none
	notBefore time.Time     // no restart before this
}

func newDownstream(name string, cfg ServerConfig, opts Options) *downstream {
	return &downstream{name: name, cfg: cfg, opts: opts, log: opts.Logger.With("mcp_server", name)}
}

// listTools starts the server and returns its tools as catalog entries.
func (d *downstream) listTools(ctx context.Context) ([]Tool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.clientLocked(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.StartTimeout)
	defer cancel()
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing the tools of MCP server %q: %w", d.name, err)
	}
	tools := make([]Tool, 0, len(res.Tools))
	for _, t := range res.Tools {
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("MCP server %q, tool %q: input schema: %w", d.name, t.Name, err)
		}
		name := t.Name
		if d.cfg.Prefix != "" {
			name = d.cfg.Prefix + "_" + t.Name
		}
		tools = append(tools, Tool{Name: name, Server: d.name, Description: t.Description, InputSchema: schema, remote: t.Name})
	}
	return tools, nil
}

// clientLocked returns the running client, (re)starting the server when it
// is not running and its backoff has passed.
func (d *downstream) clientLocked(ctx context.Context) (*client.Client, error) {
	if d.closed {
		return nil, ErrClosed
	}
	if d.c != nil && d.aliveLocked()() {
		return d.c, nil
	}
	if d.c != nil {
		d.log.Warn("bridge: MCP server exited; restarting")
		d.failedLocked()
	}
	if wait := time.Until(d.notBefore); wait > 0 {
		return nil, fmt.Errorf("MCP server %q is restarting after a failure; retry in %s", d.name, wait.Round(time.Millisecond))
	}
	err := d.startLocked(ctx)
	if err != nil {
		d.failedLocked()
		return nil, err
	}
	return d.c, nil
}

// failedLocked stops the server and lengthens the restart backoff.
func (d *downstream) failedLocked() {
	d.stopLocked()
	d.notBefore = time.Now().Add(d.backoff)
	d.backoff = min(max(2*d.backoff, minBackoff), maxBackoff)
}

func (d *downstream) startLocked(ctx context.Context) (retErr error) {
	start := time.Now()
	var t transport.Interface
	if d.cfg.Spawn != nil {
		sp, err := d.cfg.Spawn(ctx)
		if err != nil {
			return fmt.Errorf("starting MCP server %q: %w", d.name, err)
		}
		d.sp = sp
		t = transport.NewIO(sp.Stdout, sp.Stdin, sp.Stderr)
	} else {
		t = transport.NewStdioWithOptions(d.cfg.Command, nil, d.cfg.Args,
			transport.WithCommandFunc(d.command), transport.WithCommandLogger(d.log))
	}
	c := client.NewClient(t)
	d.c = c // stopLocked closes it on failure
	// The transport keeps this context for the server's lifetime: not ctx,
	// which may be a request's.
	if err := c.Start(context.Background()); err != nil {
		return fmt.Errorf("starting MCP server %q: %w", d.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.StartTimeout)
	defer cancel()
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "forge", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return fmt.Errorf("initializing MCP server %q: %w", d.name, err)
	}
	d.log.Debug("bridge: MCP server started", "spawned", d.sp != nil, "took", time.Since(start))
	return nil
}

// command builds the server's process: forge's environment plus the
// configured Env (which is why error messages never include the command's
// environment), stderr logged at debug level, in its own process group so
// that a terminal's ^C reaches forge, which then closes it in order. If
// forge dies, the server reads EOF on stdin and exits. (No Pdeathsig: it
// fires when the forking OS thread exits, which the Go runtime does when a
// goroutine that locked its thread ends, as libcontainer's do.)
func (d *downstream) command(_ context.Context, command string, _ []string, args []string) (*exec.Cmd, error) {
	cmd := exec.Command(command, args...)
	cmd.Env = os.Environ()
	for _, k := range slices.Sorted(maps.Keys(d.cfg.Env)) {
		cmd.Env = append(cmd.Env, k+"="+d.cfg.Env[k])
	}
	cmd.Stderr = &stderrLog{log: d.log}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d.cmd = cmd
	return cmd, nil
}

func (d *downstream) stopLocked() {
	if d.sp != nil {
		defer d.sp.Stop()
	}
	if d.c == nil {
		d.sp = nil
		return
	}
	if err := d.c.Close(); err != nil {
		d.log.Debug("bridge: stopping MCP server", "err", err)
	}
	d.c, d.cmd, d.sp = nil, nil, nil
}

// aliveLocked is how to tell whether the running server is still there.
func (d *downstream) aliveLocked() func() bool {
	if sp := d.sp; sp != nil {
		return sp.Alive
	}
	cmd := d.cmd
	return func() bool { return processAlive(cmd) }
}

func (d *downstream) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.stopLocked()
	return nil
}

// call runs one tool call. Errors are *callError, safe to show in the
// sandbox; the underlying error is logged here.
func (d *downstream) call(ctx context.Context, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
	d.mu.Lock()
	c, err := d.clientLocked(ctx)
	alive := d.aliveLocked()
	d.mu.Unlock()
	if err != nil {
		d.log.Warn("bridge: MCP server unavailable", "err", err)
		return nil, &callError{kindUnavail, fmt.Sprintf("MCP server %q is unavailable", d.name)}
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	switch {
	case err == nil:
		d.mu.Lock()
		d.backoff = 0
		d.mu.Unlock()
		return res, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return nil, &callError{kindTimeout, fmt.Sprintf("tool %q timed out after %s (mcp_tools.%s.timeout)", tool, d.cfg.Timeout, d.name)}
	case errors.Is(err, context.Canceled):
		return nil, &callError{kindUnavail, "the call was cancelled: the execution is ending"}
	}
	if !alive() || errors.Is(err, transport.ErrTransportClosed) {
		d.log.Warn("bridge: MCP server died during a call", "tool", tool, "err", err)
		d.mu.Lock()
		if d.c == c {
			d.failedLocked()
		}
		d.mu.Unlock()
		return nil, &callError{kindUnavail, fmt.Sprintf("MCP server %q stopped during the call of %q; it is restarted on the next call", d.name, tool)}
	}
	d.log.Debug("bridge: tool call failed", "tool", tool, "err", err)
	if te := (*transport.Error)(nil); errors.As(err, &te) {
		return nil, &callError{kindUnavail, fmt.Sprintf("MCP server %q did not answer the call of %q", d.name, tool)}
	}
	// A JSON-RPC error from the server (unknown tool, invalid arguments):
	// its message is the server's own answer, like an isError result.
	return nil, &callError{kindToolError, fmt.Sprintf("tool %q failed: %v", tool, err)}
}

// stderrLog logs a server's stderr at debug level; it stays on the host.
type stderrLog struct {
	log *slog.Logger
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.log.Debug("bridge: MCP server stderr", "text", string(p))
	return len(p), nil
}

// SpawnFunc starts a server elsewhere (in a sandbox) and hands back its
// stdio.
type SpawnFunc func(ctx context.Context) (*Spawned, error)

// Spawned is a server a SpawnFunc started.
type Spawned struct {
	Stdin  io.WriteCloser
	Stdout io.Reader
	Stderr io.ReadCloser
	Alive  func() bool
	Stop   func() // ends it and everything it used
}
