package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"
)

// maxStdioMessage bounds one JSON-RPC line; code is capped far below it.
const maxStdioMessage = 64 << 20

// ServeStdio serves MCP over newline-delimited JSON-RPC on in and out until
// in reaches EOF or ctx is cancelled. Either begins a shutdown: running
// executions get server.shutdown_grace to finish (their replies are still
// written), then they are killed. It returns once every request has been
// answered; closing the engine is the caller's job.
//
// forge has its own stdio loop rather than mcp-go's so that every line is
// answered as JSON-RPC requires and malformed tool arguments are
// invalid-params errors (see HandleMessage), and so that stdin EOF drains
// instead of cancelling running code. Every call acts for Options.Principal,
// by default the local principal.
//
// When in is a Prelude whose first request was answered already, that
// request is handled first as any other, but its reply is not written again
// (see replayAnswered).
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	sess := newStdioSession()
	if err := s.mcp.RegisterSession(ctx, sess); err != nil {
		return fmt.Errorf("registering the stdio session: %w", err)
	}
	defer s.mcp.UnregisterSession(context.WithoutCancel(ctx), sess.SessionID())
	w := &lineWriter{w: out}
	sess.serve(w)
	reqCtx, cancelRequests := context.WithCancel(withPrincipal(s.mcp.WithContext(context.WithoutCancel(ctx), sess), s.principal(ctx)))
	reqCtx = withNotifier(reqCtx, func(n mcp.JSONRPCNotification) { w.write(n) })
	defer cancelRequests()

	notesDone := make(chan struct{})
	go func() {
		defer close(notesDone)
		for {
			select {
			case n := <-sess.notes:
				w.write(n)
			case <-reqCtx.Done():
				return
			}
		}
	}()

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	stopReading := make(chan struct{})
	defer close(stopReading)
	answered := make(chan [2][]byte, 1)
	go func() {
		if p, ok := in.(Prelude); ok {
			// Blocks, as a read does, until the prelude knows.
			if req, reply := p.Answered(); req != nil {
				answered <- [2][]byte{req, reply}
			}
		}
		close(answered)
		readLines(in, lines, readErr, stopReading)
	}()

	var wg sync.WaitGroup
	var err error
	// Nothing read after the answered request is taken before it.
	var linesIn <-chan []byte
	var readErrIn <-chan error
loop:
	for {
		select {
		case a, ok := <-answered:
			if ok {
				s.replayAnswered(reqCtx, a[0], a[1])
				continue
			}
			answered, linesIn, readErrIn = nil, lines, readErr
		case line := <-linesIn:
			s.dispatch(reqCtx, line, w, &wg)
		case err = <-readErrIn:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	// Order matters: drain first, so that cancelling the requests below
	// does not cancel the executions that still have their grace.
	s.beginDrain(s.shutdownGrace())
	cancelRequests()
	wg.Wait()
	<-notesDone
	return err
}

// A Prelude is stdin of a server whose first request may have been answered
// before ServeStdio began: `forge serve` answers initialize from its first
// package initializers (cmd/forge/internal/early, with server/hello's
// bytes). Reading it yields what followed that request.
type Prelude interface {
	io.Reader
	// Answered waits until it is known whether a first request was
	// answered, and returns the request's line and the reply written (with
	// its newline); nil, nil when none was.
	Answered() (request, reply []byte)
}

// replayAnswered handles the request that a Prelude answered, so that the
// session knows its client as after any initialize, and checks that the
// reply sent was the server's: a difference is a bug in server/hello,
// logged, since the client has it already.
func (s *Server) replayAnswered(ctx context.Context, line, sent []byte) {
	msg, reply := checkMessage(line)
	var resp mcp.JSONRPCMessage = reply
	if reply == nil {
		resp = s.handle(ctx, msg, line)
	}
	b, _ := json.Marshal(resp)
	if b = append(b, '\n'); !bytes.Equal(b, sent) {
		s.log.Error("the reply forge sent to the first request while it started differs from the server's: a bug in server/hello",
			"request", string(line), "sent", string(sent), "server", string(b))
	} else {
		s.log.Debug("the first request was answered while forge started", "method", msg.method)
	}
	s.markAnswered()
}

// dispatch answers one line: what is not a valid request at once (see
// checkMessage), requests on their own goroutine (a long execution must not
// block ping or cancellation), notifications inline.
func (s *Server) dispatch(ctx context.Context, line []byte, w *lineWriter, wg *sync.WaitGroup) {
	msg, reply := checkMessage(line)
	switch {
	case reply != nil:
		w.write(reply)
		return
	case msg.kind == kindResponse:
		deliverReply(ctx, msg, line) // to a request forge sent (elicitation)
		return
	case msg.kind == kindNotification:
		s.handle(ctx, msg, line)
		return
	}
	wg.Add(1)
	ctx = s.received(ctx)
	go func() {
		defer wg.Done()
		if resp := s.handle(ctx, msg, line); resp != nil {
			w.write(resp)
			s.markAnswered()
		}
	}()
}

// readLines sends each non-empty line of in to lines, then the error that
// ended the input (io.EOF at the end). It gives up when stop is closed (a
// read in progress still blocks until in delivers or closes).
func readLines(in io.Reader, lines chan<- []byte, errc chan<- error, stop <-chan struct{}) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readLine(r)
		if len(line) > 0 {
			select {
			case lines <- line:
			case <-stop:
				return
			}
		}
		if err != nil {
			errc <- err
			return
		}
	}
}

// readLine reads one line without its newline, failing on over-long ones.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxStdioMessage {
			return nil, fmt.Errorf("stdio: message longer than %d bytes", maxStdioMessage)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		for len(buf) > 0 && (buf[len(buf)-1] == '\n' || buf[len(buf)-1] == '\r') {
			buf = buf[:len(buf)-1]
		}
		return buf, err
	}
}

// lineWriter writes one JSON message per line; writes are serialized.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	failed bool
}

func (l *lineWriter) write(msg any) {
	b, err := json.Marshal(msg)
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed {
		return
	}
	if _, err := l.w.Write(b); err != nil {
		l.failed = true // the client is gone; nobody reads further replies
	}
}

// stdioSession is the one client of a stdio server.
type stdioSession struct {
	notes       chan mcp.JSONRPCNotification
	initialized atomic.Bool
	level       atomic.Value // mcp.LoggingLevel

	mu         sync.Mutex
	clientInfo mcp.Implementation
	clientCaps mcp.ClientCapabilities
	// out, lastID and pending carry forge's own requests to the client
	// (stdio_requests.go).
	out     *lineWriter
	lastID  int64
	pending map[string]chan stdioReply
}

func (s *stdioSession) serve(w *lineWriter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out = w
}

func newStdioSession() *stdioSession {
	s := &stdioSession{notes: make(chan mcp.JSONRPCNotification, 100)}
	s.level.Store(mcp.LoggingLevelError)
	return s
}

func (s *stdioSession) SessionID() string                                   { return "stdio" }
func (s *stdioSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return s.notes }
func (s *stdioSession) Initialize()                                         { s.initialized.Store(true) }
func (s *stdioSession) Initialized() bool                                   { return s.initialized.Load() }
func (s *stdioSession) SetLogLevel(l mcp.LoggingLevel)                      { s.level.Store(l) }
func (s *stdioSession) GetLogLevel() mcp.LoggingLevel                       { return s.level.Load().(mcp.LoggingLevel) }

func (s *stdioSession) GetClientInfo() mcp.Implementation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientInfo
}

func (s *stdioSession) SetClientInfo(i mcp.Implementation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clientInfo = i
}

func (s *stdioSession) GetClientCapabilities() mcp.ClientCapabilities {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientCaps
}

func (s *stdioSession) SetClientCapabilities(c mcp.ClientCapabilities) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clientCaps = c
}
