package kernel

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

const (
	// DefaultOutputLimit is the default cap of stdout and of stderr per exec.
	DefaultOutputLimit = 1 << 20
	// MaxOutputLimit is the largest cap the agent accepts.
	MaxOutputLimit = 16 << 20
	// replyOverhead bounds everything in a reply but the two output streams: display items
	// (8 MiB in the agent), the result (64 KiB of repr), the error, the JSON around them.
	replyOverhead = 16 << 20
	// jsonExpansion is the worst-case growth of captured output when the agent encodes it:
	// a control byte becomes \u00XX.
	jsonExpansion = 6
	// DefaultInterruptGrace is how long Exec waits for an interrupted cell's reply when
	// ExecRequest.InterruptGrace is zero.
	DefaultInterruptGrace = time.Second
	// DefaultStreamInterval is how often a streaming exec sends its new output.
	DefaultStreamInterval = 250 * time.Millisecond
	// maxAbandoned bounds requests whose replies are still to be skipped after timeouts.
	maxAbandoned = 16
)

// Options configure a Client.
type Options struct {
	// MaxReplyBytes is the longest reply line accepted; a longer one breaks the client.
	// Default: 16 MiB plus the worst-case encoding of two DefaultOutputLimit streams (28 MiB).
	MaxReplyBytes int
	// Logger receives debug lines; nil discards them.
	Logger *slog.Logger
	// OnBreak, if set, is called once when the client breaks (ErrProtocol, ErrAgentExited, a
	// write cut short), before the failing call returns; the sandbox launcher kills the
	// sandbox there, so a forged reply never leaves a live sandbox behind.
	OnBreak func(error)
}

// Client speaks the agent protocol over a reply stream (the agent's fd 4) and a request stream
// (its fd 3). Calls are serialized: one request at a time.
//
// Every failure of the agent to keep the protocol (ErrProtocol, ErrAgentExited) breaks the
// client for good: each later call returns the same error, and the host should kill the
// sandbox. A call whose context expires returns ErrTimeout and leaves the client usable: the
// late reply, if the agent ever sends it, is skipped.
type Client struct {
	w      io.Writer
	r      io.Reader
	max    int
	log    *slog.Logger
	lines  chan []byte
	quit   chan struct{}
	readWG sync.WaitGroup
	// readErr is set by the reader goroutine before it closes lines.
	readErr   error
	closeOnce sync.Once

	// mu serializes requests and guards the fields below.
	mu        sync.Mutex
	nextID    uint64
	hello     *Hello
	abandoned []abandoned // timed-out requests, in order; their replies are skipped
	err       error       // sticky: the client is broken
	onBreak   func(error)
}

// abandoned is a timed-out request whose late reply is still to come.
type abandoned struct {
	id    uint64
	op    string
	limit int // lineLimit of the request
}

// NewClient starts reading replies from the agent. If replies and requests are io.Closers
// (pipe ends, or one socket as both), Close closes them and waits for the reader goroutine; otherwise that goroutine
// ends when replies returns an error or EOF.
func NewClient(replies io.Reader, requests io.Writer, opts Options) *Client {
	if opts.MaxReplyBytes <= 0 {
		opts.MaxReplyBytes = replyOverhead + 2*jsonExpansion*DefaultOutputLimit
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		w:       requests,
		r:       replies,
		max:     opts.MaxReplyBytes,
		log:     opts.Logger,
		lines:   make(chan []byte),
		quit:    make(chan struct{}),
		onBreak: opts.OnBreak,
	}
	c.readWG.Add(1)
	go c.readLoop()
	return c
}

func (c *Client) readLoop() {
	defer c.readWG.Done()
	defer close(c.lines)
	br := bufio.NewReaderSize(c.r, 64<<10)
	for {
		line, err := readLine(br, c.max)
		if err != nil {
			c.readErr = err
			return
		}
		select {
		case c.lines <- line:
		case <-c.quit:
			c.readErr = ErrClosed
			return
		}
	}
}

// readLine returns the next line without its newline, never buffering more than max bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		n := len(frag)
		if err == nil {
			n-- // the newline
		}
		if len(line)+n > limit {
			return nil, protocolErrorf(nil, "reply line longer than %d bytes", limit)
		}
		switch {
		case err == nil:
			return append(line, frag[:n]...), nil
		case errors.Is(err, bufio.ErrBufferFull):
			line = append(line, frag...)
		case errors.Is(err, io.EOF) && len(line)+len(frag) > 0:
			return nil, fmt.Errorf("%w: reply stream ended inside a line", ErrAgentExited)
		case errors.Is(err, io.EOF):
			return nil, ErrAgentExited
		default:
			return nil, fmt.Errorf("%w: reading replies: %w", ErrAgentExited, err)
		}
	}
}

// Close stops the client; calls in progress return ErrClosed. It does not stop the agent.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.quit)
		if cl, ok := c.w.(io.Closer); ok {
			err = cl.Close()
		}
		if cl, ok := c.r.(io.Closer); ok {
			if any(c.r) != any(c.w) { // one socket both ways (a zygote child's) is closed once
				if cerr := cl.Close(); err == nil {
					err = cerr
				}
			}
			c.readWG.Wait()
		}
	})
	return err
}

// Hello waits for the agent's greeting, which every other call also waits for first.
func (c *Client) Hello(ctx context.Context) (*Hello, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked(); err != nil {
		return nil, err
	}
	return c.helloLocked(ctx)
}

func (c *Client) helloLocked(ctx context.Context) (*Hello, error) {
	if c.hello != nil {
		return c.hello, nil
	}
	line, err := c.nextLineLocked(ctx)
	if err != nil {
		return nil, err
	}
	if len(line) > maxHelloLine {
		return nil, c.brokenfLocked("hello line of %d bytes, over the limit of %d", len(line), maxHelloLine)
	}
	rep, err := decodeReply(line)
	if err == nil && rep.Op != "hello" {
		err = protocolErrorf(nil, "first line is not hello")
	}
	if err != nil {
		return nil, c.breakLocked(err)
	}
	c.hello = &Hello{Python: rep.Python, PID: rep.PID, Modules: rep.modules, StrayFDs: rep.StrayFDs}
	c.log.Debug("agent hello", "python", rep.Python, "pid", rep.PID)
	return c.hello, nil
}

// Exec runs one cell. When ctx expires first it returns ErrTimeout; with req.Interrupt set it
// first interrupts the code and, if the agent answers within req.InterruptGrace, returns that
// Result (Success false, a KeyboardInterrupt error, the output so far) together with
// ErrTimeout.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (*Result, error) {
	limit := req.OutputLimit
	if limit == 0 {
		limit = DefaultOutputLimit
	}
	if limit < 0 || limit > MaxOutputLimit {
		return nil, fmt.Errorf("kernel: output limit %d not in 1..%d", limit, MaxOutputLimit)
	}
	if need := replyOverhead + 2*jsonExpansion*limit; need > c.max {
		return nil, fmt.Errorf("kernel: output limit %d needs MaxReplyBytes >= %d", limit, need)
	}
	code := req.Code
	r := &request{Op: "exec", Code: &code, OutputLimit: limit, WarmImports: req.WarmImports}
	if req.OnOutput != nil {
		r.onOutput = req.OnOutput
		r.StreamMS = int(max(req.StreamInterval, 50*time.Millisecond).Milliseconds())
		if req.StreamInterval == 0 {
			r.StreamMS = int(DefaultStreamInterval.Milliseconds())
		}
	}
	rep, err := c.roundTrip(ctx, r, req.Interrupt, req.InterruptGrace)
	if rep == nil {
		return nil, err
	}
	res := &Result{
		Success:   rep.Error == nil,
		Stdout:    rep.Stdout,
		Stderr:    rep.Stderr,
		Result:    rep.value,
		Display:   rep.display,
		Groups:    rep.groups,
		Error:     rep.Error,
		Truncated: rep.Truncated,
		TimedOut:  err != nil,
		Variables: rep.Count,
	}
	if res.Display == nil {
		res.Display = []Display{}
	}
	return res, err
}

// Inspect lists the user variables of the agent's namespace.
func (c *Client) Inspect(ctx context.Context) ([]Variable, error) {
	rep, err := c.roundTrip(ctx, &request{Op: "inspect"}, nil, 0)
	if err != nil {
		return nil, err
	}
	return rep.variables, nil
}

// Ping checks that the agent answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.roundTrip(ctx, &request{Op: "ping"}, nil, 0)
	return err
}

// Warm imports modules that exist in the image (the warm pool does this before pausing a
// sandbox) and returns the ones imported.
func (c *Client) Warm(ctx context.Context, modules []string) ([]string, error) {
	rep, err := c.roundTrip(ctx, &request{Op: "warm", Modules: modules}, nil, 0)
	if err != nil {
		return nil, err
	}
	return rep.imported, nil
}

// Egress starts the agent's loopback forwarder to the egress socket at
// path (inside the sandbox) and points HTTP(S)_PROXY at it for the code
// and its child processes; it returns the loopback port. An empty path
// stops it and unsets the variables.
func (c *Client) Egress(ctx context.Context, path string) (int, error) {
	rep, err := c.roundTrip(ctx, &request{Op: "egress", Path: path}, nil, 0)
	if err != nil {
		return 0, err
	}
	return rep.Port, nil
}

// PickleState pickles every picklable user variable, one by one, into the file at path (a
// path inside the sandbox, e.g. under /workspace), for hibernating a session.
func (c *Client) PickleState(ctx context.Context, path string) (*StateReport, error) {
	rep, err := c.roundTrip(ctx, &request{Op: "pickle_state", Path: path}, nil, 0)
	if err != nil {
		return nil, err
	}
	return &StateReport{Saved: rep.saved, Failed: rep.failed}, nil
}

// RestoreState loads the variables PickleState saved at path into the namespace.
func (c *Client) RestoreState(ctx context.Context, path string) (*StateReport, error) {
	rep, err := c.roundTrip(ctx, &request{Op: "restore_state", Path: path}, nil, 0)
	if err != nil {
		return nil, err
	}
	return &StateReport{Restored: rep.restored, Failed: rep.failed}, nil
}

// roundTrip sends r and waits for its reply. It returns a reply together with ErrTimeout only
// when an interrupted exec answered within its grace period.
func (c *Client) roundTrip(ctx context.Context, r *request, interrupt func() error, grace time.Duration) (*reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked(); err != nil {
		return nil, err
	}
	if _, err := c.helloLocked(ctx); err != nil {
		return nil, err
	}
	c.nextID++
	r.ID = c.nextID
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("kernel: encoding %s request: %w", r.Op, err)
	}
	if err := c.writeLocked(ctx, append(data, '\n')); err != nil {
		return nil, err
	}
	rep, err := c.awaitLocked(ctx, abandoned{r.ID, r.Op, lineLimit(r)}, interrupt, grace, r.onOutput)
	if rep != nil {
		if verr := rep.validate(r); verr != nil {
			return nil, c.breakLocked(fmt.Errorf("%s reply: %w", r.Op, verr))
		}
	}
	return rep, err
}

// writeLocked writes one request line. A write cut short leaves half a line in the pipe, so
// any failure breaks the client.
func (c *Client) writeLocked(ctx context.Context, data []byte) error {
	done := make(chan error, 1)
	go func() {
		_, err := c.w.Write(data)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return c.breakLocked(fmt.Errorf("%w: writing request: %w", ErrAgentExited, err))
		}
		return nil
	case <-ctx.Done():
		return c.breakLocked(fmt.Errorf("%w: writing request: %w", ErrTimeout, ctx.Err()))
	case <-c.quit:
		return ErrClosed
	}
}

func (c *Client) awaitLocked(ctx context.Context, req abandoned, interrupt func() error, grace time.Duration, onOutput func(Output)) (*reply, error) {
	id := req.id
	expired := ctx.Done()
	var graceOver <-chan time.Time // set once the code has been interrupted
	var timedOut error
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				return nil, c.breakLocked(c.readErr)
			}
			// The line is either the oldest abandoned request's reply or this one's: refuse
			// it before decoding when it is longer than either could legitimately be.
			limit, op := req.limit, req.op
			if len(c.abandoned) > 0 && c.abandoned[0].limit > limit {
				limit, op = c.abandoned[0].limit, c.abandoned[0].op
			}
			if len(line) > limit {
				return nil, c.brokenfLocked("reply line of %d bytes, over the limit of %d for a reply to %s", len(line), limit, op)
			}
			rep, err := decodeReply(line)
			if err != nil {
				return nil, c.breakLocked(err)
			}
			switch {
			case rep.Op == "output" && len(line) > maxStreamLine:
				return nil, c.brokenfLocked("output line of %d bytes, over the limit of %d", len(line), maxStreamLine)
			case rep.Op == "output" && len(c.abandoned) > 0 && *rep.ID == c.abandoned[0].id:
				continue // streamed by a request given up on
			case rep.Op == "output" && *rep.ID == id && onOutput != nil:
				onOutput(Output{Stdout: rep.Stdout, Stderr: rep.Stderr, Skipped: rep.Skipped})
				continue
			case rep.Op != "":
				return nil, c.brokenfLocked("unexpected %q line", rep.Op)
			case len(c.abandoned) > 0 && *rep.ID == c.abandoned[0].id:
				c.log.Debug("skipping late agent reply", "id", *rep.ID)
				c.abandoned = c.abandoned[1:]
				continue
			case *rep.ID != id:
				return nil, c.brokenfLocked("reply id %d, want %d", *rep.ID, id)
			case !*rep.OK:
				return nil, rep.requestError()
			}
			return rep, timedOut
		case <-expired:
			timedOut = timeoutError(ctx)
			if interrupt != nil {
				c.log.Debug("interrupting agent", "id", id)
				if err := interrupt(); err == nil {
					interrupt = nil
					if grace <= 0 {
						grace = DefaultInterruptGrace
					}
					t := time.NewTimer(grace)
					defer t.Stop()
					expired, graceOver = nil, t.C
					continue
				}
			}
			return nil, c.abandonLocked(req, timedOut)
		case <-graceOver:
			return nil, c.abandonLocked(req, timedOut)
		case <-c.quit:
			return nil, ErrClosed
		}
	}
}

// abandonLocked gives up waiting for request id; its reply will be skipped when it comes.
func (c *Client) abandonLocked(req abandoned, timedOut error) error {
	if len(c.abandoned) >= maxAbandoned {
		return c.breakLocked(fmt.Errorf("%w: %d requests unanswered", timedOut, len(c.abandoned)+1))
	}
	c.abandoned = append(c.abandoned, req)
	return timedOut
}

// nextLineLocked waits for one line (used for hello, before any request).
func (c *Client) nextLineLocked(ctx context.Context) ([]byte, error) {
	select {
	case line, ok := <-c.lines:
		if !ok {
			return nil, c.breakLocked(c.readErr)
		}
		return line, nil
	case <-ctx.Done():
		return nil, timeoutError(ctx)
	case <-c.quit:
		return nil, ErrClosed
	}
}

func timeoutError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
	return fmt.Errorf("kernel: waiting for the agent: %w", ctx.Err())
}

func (c *Client) usableLocked() error {
	select {
	case <-c.quit:
		return ErrClosed
	default:
	}
	return c.err
}

func (c *Client) breakLocked(err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	if c.err == nil {
		c.err = err
		c.log.Debug("agent client broken", "err", err)
		if c.onBreak != nil {
			c.onBreak(err)
		}
	}
	return c.err
}

// Err is the error that broke the client, or nil while it is usable.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) brokenfLocked(format string, args ...any) error {
	return c.breakLocked(protocolErrorf(nil, format, args...))
}

// FileInfo is one entry of a session's /workspace.
type FileInfo struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Symlink bool   `json:"symlink"`
}

// WriteFile writes data to path, relative to /workspace. The agent refuses
// absolute paths, ".." and symlinks that lead outside /workspace
// (ErrRequest with type FileError).
func (c *Client) WriteFile(ctx context.Context, path string, data []byte) error {
	enc := base64.StdEncoding.EncodeToString(data)
	_, err := c.roundTrip(ctx, &request{Op: "write_file", Path: path, Data: &enc}, nil, 0)
	return err
}

// ReadFile reads path, relative to /workspace, refusing files over maxBytes.
func (c *Client) ReadFile(ctx context.Context, path string, maxBytes int) ([]byte, error) {
	rep, err := c.roundTrip(ctx, &request{Op: "read_file", Path: path, MaxBytes: maxBytes}, nil, 0)
	if err != nil {
		return nil, err
	}
	data, err := base64.StdEncoding.DecodeString(rep.Data)
	if err != nil {
		return nil, c.brokenf("read_file reply is not base64")
	}
	if maxBytes > 0 && len(data) > maxBytes {
		return nil, c.brokenf("read_file reply over the limit")
	}
	return data, nil
}

// ListFiles lists /workspace.
func (c *Client) ListFiles(ctx context.Context) ([]FileInfo, error) {
	rep, err := c.roundTrip(ctx, &request{Op: "list_files"}, nil, 0)
	if err != nil {
		return nil, err
	}
	return rep.files, nil
}

func (c *Client) brokenf(format string, args ...any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.brokenfLocked(format, args...)
}
