package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/mcp-forge/forge/server/agentsandbox"
	"github.com/mcp-forge/forge/server/e2b"
	"github.com/mcp-forge/forge/server/rest"
)

// readTimeout bounds reading one request, headers and body: a client that
// dribbles its body loses its connection. It does not cut a long execution
// or an SSE stream: net/http lifts the deadline once the body is read (its
// background read, which watches for the client going away, has none). A
// variable for tests.
var readTimeout = 60 * time.Second

// HTTP limits of the listener (http.Server and the body budget).
const (
	// maxHeaderBytes bounds a request's header block; past it Go answers 431.
	maxHeaderBytes = 64 << 10
	// idleTimeout closes keep-alive connections nobody uses.
	idleTimeout = 2 * time.Minute
	// bodyWait is how long a request waits for room in the body budget.
	bodyWait = 10 * time.Second
)

// bodyLimits bound request bodies: each by what its path can legitimately
// carry (413 past it, naming the limit), and all of them together by a
// budget of bytes in flight, taken before the body is read and given back
// when the request is answered.
type bodyLimits struct {
	mcp, rest int64 // the largest body of POST /mcp and of /api/v1
	budget    *semaphore.Weighted
	size      int64 // the budget's size
	// e2b: the E2B face owns the request (its bodies are bounded by
	// rest plus a multipart envelope's room).
	e2b func(*http.Request) bool
	// agentSandbox: the path is the agent-sandbox face's (bounded like
	// the E2B face's).
	agentSandbox func(path string) bool
}

func (s *Server) newBodyLimits() *bodyLimits {
	x := s.cfg.Execution
	b := &bodyLimits{
		mcp:  s.cfg.MaxMCPBody(),
		rest: max(restMaxBody(int64(x.MaxCodeSize)), int64(s.cfg.Volumes.MaxFileSize)),
	}
	b.size = max(int64(s.cfg.Server.MaxBodyInFlight), b.mcp, b.rest+e2bEnvelope)
	b.e2b = s.e2b.Owns
	if a := s.cfg.AgentSandbox; a.Enabled {
		b.agentSandbox = func(path string) bool { return agentsandbox.OwnsPath(a.PathPrefix, path) }
	}
	b.budget = semaphore.NewWeighted(b.size)
	return b
}

// e2bEnvelope is the room of an E2B upload's multipart envelope around a
// file of volumes.max_file_size.
const e2bEnvelope = 64 << 10

// restMaxBody bounds a REST JSON body: the code (JSON-escaped, up to 6
// bytes a byte) and a few fields.
func restMaxBody(maxCode int64) int64 { return 6*maxCode + 64<<10 }

// limit is the largest body of a request to path; 0 for paths that take none.
func (b *bodyLimits) limit(path string) int64 {
	switch {
	case path == EndpointPath:
		return b.mcp
	case strings.HasPrefix(path, rest.Prefix+"/"):
		return b.rest
	}
	return 0
}

// wrap applies the limits to next.
func (b *bodyLimits) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		limit := b.limit(r.URL.Path)
		isE2B := limit == 0 && b.e2b != nil && b.e2b(r)
		if limit == 0 && (isE2B || b.agentSandbox != nil && b.agentSandbox(r.URL.Path)) {
			limit = b.rest + e2bEnvelope
		}
		if r.ContentLength > limit {
			if isE2B { // E2B's error shape, which the SDKs turn into their exceptions
				w.Header().Set("Connection", "close")
				e2b.WriteError(w, http.StatusRequestEntityTooLarge, tooLargeMessage(r, limit))
				return
			}
			tooLarge(w, r, limit)
			return
		}
		need := limit // unknown length (chunked): room for the largest
		if r.ContentLength > 0 {
			need = r.ContentLength
		}
		ctx, cancel := context.WithTimeout(r.Context(), bodyWait)
		err := b.budget.Acquire(ctx, need)
		cancel()
		if err != nil {
			w.Header().Set("Retry-After", "1")
			rest.NewProblem(r.Context(), http.StatusServiceUnavailable,
				fmt.Sprintf("forge is reading %d bytes of other requests' bodies (server.max_body_in_flight); retry", b.size)).Write(w)
			return
		}
		defer b.budget.Release(need)
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

func tooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	w.Header().Set("Connection", "close")
	rest.NewProblem(r.Context(), http.StatusRequestEntityTooLarge, tooLargeMessage(r, limit)).Write(w)
}

func tooLargeMessage(r *http.Request, limit int64) string {
	return fmt.Sprintf("the request body is over %d bytes, the most %s %s takes (see docs/service.md, \"Request bodies\")", limit, r.Method, r.URL.Path)
}
