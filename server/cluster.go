package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/mcp-forge/forge/internal/lazyre"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/rest"
)

// Cluster mode (cluster.enabled): every replica serves every session. A
// request for a session that another live replica holds is forwarded to it
// with the client's own Authorization (tokens are the same everywhere) and
// HeaderForwarded, so that it is never forwarded twice; a session whose
// holder is gone is served here (session.Manager takes it over from its
// checkpoint). An MCP client's own session (Mcp-Session-Id) needs nothing
// here: mcp-go's default id manager checks ids for form only, so one that a
// replica made is good at every other, and forge keeps no state in it.

// HeaderForwarded marks a request one replica forwarded to another; its
// value names the forwarding replica.
const HeaderForwarded = "X-Forge-Forwarded-By"

// forwardPatience is how long a request waits for a session whose holder
// is unreachable but still holds it (stopping: saving its sessions) before
// the client is told to retry.
const forwardPatience = 30 * time.Second

// maxRoutedBody caps the body read to find a session id (MCP JSON-RPC, the
// REST execute call); the body limits in front cap it already.
const maxRoutedBody = 64 << 20

var sessionPathRE = lazyre.New(`^/api/v1/(?:sessions|sandboxes)/([A-Za-z0-9_-]{1,64})(?:/|$)`)

var sessionURIRE = lazyre.New(`^forge://sessions/([A-Za-z0-9_-]{1,64})/`)

// holder is the engine's view of which replica holds a session.
type holder interface {
	SessionHolder(p engine.Principal, id string) *session.HeldError
	SessionReleased(p engine.Principal, id, member string) (released, handedOver bool)
}

// clusterRoute forwards requests for sessions held by another replica.
func (s *Server) clusterRoute(next http.Handler) http.Handler {
	cl := s.cfg.Cluster
	if !cl.Enabled {
		return next
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(HeaderForwarded) != "" || s.e2b.Owns(r) {
			next.ServeHTTP(w, r) // served here: never forwarded twice
			return
		}
		id, body, err := routedSession(r)
		if err != nil {
			rest.NewProblem(r.Context(), http.StatusBadRequest, "reading the request: "+err.Error()).Write(w)
			return
		}
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		if id == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := s.clusterHolder(r.Context())
		p := s.principal(r.Context())
		deadline := time.Now().Add(forwardPatience)
		for {
			held := (*session.HeldError)(nil)
			if h != nil {
				held = h.SessionHolder(p, id)
			}
			if held == nil {
				next.ServeHTTP(w, r)
				return
			}
			if body == nil && r.Body != nil && r.Body != http.NoBody {
				if body, err = io.ReadAll(io.LimitReader(r.Body, maxRoutedBody)); err != nil {
					rest.NewProblem(r.Context(), http.StatusBadRequest, "reading the request: "+err.Error()).Write(w)
					return
				}
			}
			sent, err := s.forward(client, w, r, held, body)
			if err == nil {
				return
			}
			if sent && s.handedOver(r.Context(), h, p, id, held.Member, deadline) {
				// It closed the connection while stopping, before it read
				// the call (a stopping replica answers every call it read):
				// the call never ran, so it goes to the session's next home.
				continue
			}
			if sent || time.Now().After(deadline) || r.Context().Err() != nil {
				// The holder died with the call running (it may have run in
				// part; the session is as of its last answered call), or it
				// stayed unreachable while holding it.
				s.log.Warn("forwarding a session call", "session", id, "to", held.Member, "addr", held.Advertise, "err", err)
				msg := fmt.Sprintf("session %s: replica %s that holds it did not answer (%v); retry: the session is then served from the state of its last answered call", id, held.Member, err)
				if sent {
					msg = fmt.Sprintf("session %s: replica %s that held it stopped during this call (%v); the call may not have run to its end; retry: the session is then restored from the state of its last answered call", id, held.Member, err)
				}
				w.Header().Set("Retry-After", "1")
				rest.NewProblem(r.Context(), http.StatusServiceUnavailable, msg).Write(w)
				return
			}
			// Unreachable but holding the lock: it is stopping (saving
			// its sessions) or dying; look again shortly.
			select {
			case <-r.Context().Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// handedOver waits until member lets go of the session and reports whether
// it handed it over (hibernated it) rather than died holding it.
func (s *Server) handedOver(ctx context.Context, h holder, p engine.Principal, id, member string, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		if released, handed := h.SessionReleased(p, id, member); released {
			return handed
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// clusterHolder is the engine once it is open (nil when it cannot open).
func (s *Server) clusterHolder(ctx context.Context) holder {
	eng := s.eng
	if d, ok := eng.(*Deferred); ok {
		if d.Wait(ctx) != nil {
			return nil
		}
		eng = d.Engine
	}
	h, _ := eng.(holder)
	return h
}

// forward sends r to the replica that holds the session and copies its
// answer back. sent reports whether the request reached it (then a failure
// is a call that may have run).
func (s *Server) forward(client *http.Client, w http.ResponseWriter, r *http.Request, held *session.HeldError, body []byte) (sent bool, err error) {
	if held.Advertise == "" {
		return false, errors.New("it advertises no address")
	}
	u := *r.URL
	u.Scheme, u.Host = "http", held.Advertise
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), rd)
	if err != nil {
		return false, err
	}
	out.Header = r.Header.Clone()
	out.Header.Set(HeaderForwarded, s.cfg.Cluster.Member)
	out.Host = r.Host // the client's: the peer's DNS-rebinding guard checks it as this one did
	resp, err := client.Do(out)
	if err != nil {
		var op *net.OpError
		dial := errors.As(err, &op) && op.Op == "dial"
		return !dial, err
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		if k == rest.HeaderRequestID || k == "Connection" {
			continue // this replica's id stays: it is the one the client saw first; Connection is the peer's hop
		}
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return true, nil // the client went away
			}
			_ = rc.Flush() // SSE: progress as it comes
		}
		if rerr == io.EOF {
			return true, nil
		}
		if rerr != nil {
			// Headers are out: the client sees a cut answer, not a wrong one.
			s.log.Warn("forwarded answer cut", "session", held.ID, "from", held.Member, "err", rerr)
			return true, nil
		}
	}
}

// routedSession finds the session a request is for: the REST paths of a
// session, the REST execute call's session_id, an MCP tools/call's
// session_id argument or resources/read of forge://sessions/ID/…. body is
// the request body when it had to be read.
func routedSession(r *http.Request) (id string, body []byte, err error) {
	if m := sessionPathRE.FindStringSubmatch(r.URL.Path); m != nil {
		return m[1], nil, nil
	}
	if r.Method != http.MethodPost || (r.URL.Path != EndpointPath && r.URL.Path != rest.Prefix+"/execute") {
		return "", nil, nil
	}
	body, err = io.ReadAll(io.LimitReader(r.Body, maxRoutedBody))
	if err != nil {
		return "", nil, err
	}
	if r.URL.Path != EndpointPath {
		var args struct {
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal(body, &args) // a bad body is the handler's to refuse
		return args.SessionID, body, nil
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Arguments struct {
				SessionID string `json:"session_id"`
			} `json:"arguments"`
			URI string `json:"uri"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return "", body, nil
	}
	switch msg.Method {
	case "tools/call":
		return msg.Params.Arguments.SessionID, body, nil
	case "resources/read":
		if m := sessionURIRE.FindStringSubmatch(msg.Params.URI); m != nil {
			return m[1], body, nil
		}
	}
	return "", body, nil
}
