package server

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/mcp-forge/forge/internal/audit"
)

// errCancelled is what a tool handler returns for a request the client
// cancelled; the transport sends nothing for it (MCP: no response to a
// cancelled request).
var errCancelled = errors.New("request cancelled by the client")

type cancelMarkKey struct{}

// withCancelMark gives a request a mark that its handler sets when the
// client cancelled it (see cancelledByClient), so that handle drops the
// reply.
func withCancelMark(ctx context.Context) (context.Context, *atomic.Bool) {
	m := new(atomic.Bool)
	return context.WithValue(ctx, cancelMarkKey{}, m), m
}

// cancelledByClient reports whether the request behind ctx was cancelled by
// its client (notifications/cancelled, or its HTTP stream closed) rather
// than by a shutdown; if so it audits the cancel and marks the request so
// that no reply goes out.
func (s *Server) cancelledByClient(ctx context.Context, sessionID string) bool {
	if ctx.Err() == nil || s.draining() {
		return false
	}
	if m, ok := ctx.Value(cancelMarkKey{}).(*atomic.Bool); ok {
		m.Store(true)
	}
	s.audit.Log(audit.Event{Event: audit.EventExecutionCancel, Severity: audit.SeverityInfo,
		Client: clientName(ctx), Principal: s.principal(ctx).Tenant, SessionID: sessionID,
		Reason: "cancelled by the client; the run was interrupted and no result was sent"})
	s.log.Info("execution cancelled by the client", "session", sessionID)
	return true
}

// cancelWriter drops what an HTTP handler writes once its request was
// marked cancelled (see withCancelMark): a client that cancelled with
// notifications/cancelled gets no result.
type cancelWriter struct {
	http.ResponseWriter
	mark *atomic.Bool
}

func (w *cancelWriter) Write(b []byte) (int, error) {
	if w.mark.Load() {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *cancelWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *cancelWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
