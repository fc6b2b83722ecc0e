package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"golang.org/x/net/netutil"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/engine"
)

// EndpointPath is where the streamable HTTP transport listens.
const EndpointPath = "/mcp"

// ListenAddr checks and completes the --http address: a bare port or
// ":port" means 127.0.0.1:port; a host that is not loopback (including the
// wildcard addresses) is refused unless allowRemote and authenticated
// (bearer tokens exist).
func ListenAddr(addr string, allowRemote, authenticated bool) (string, error) {
	addr = strings.TrimSpace(addr)
	if _, err := strconv.ParseUint(addr, 10, 16); err == nil {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("HTTP address %q: want HOST:PORT, :PORT or PORT", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("HTTP address %q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if !isLoopbackName(host) && !authenticated {
		return "", fmt.Errorf("%w %q: forge runs code for whoever can reach it, and no bearer token is configured, so the HTTP transport would be unauthenticated. "+
			"Bind to 127.0.0.1 (the default), or create a token (forge token create --tenant T --scopes execute) or list one in server.auth.tokens, "+
			"then pass --allow-remote and set server.allowed_hosts", ErrRemoteBind, addr)
	}
	if !isLoopbackName(host) && !allowRemote {
		return "", fmt.Errorf("%w %q: pass --allow-remote to serve a non-loopback address (and set server.allowed_hosts to the names clients use)", ErrRemoteBind, addr)
	}
	return net.JoinHostPort(host, port), nil
}

// isLoopbackName reports whether host (without port; IPv6 with or without
// brackets) names the loopback interface.
func isLoopbackName(host string) bool {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// HTTPHandler is the streamable HTTP transport at EndpointPath behind the
// DNS-rebinding guard, for Options.Principal (by default the principal of a
// listener called "http"). The returned shutdown func closes open SSE
// streams.
func (s *Server) HTTPHandler() (http.Handler, func(context.Context) error) {
	return s.httpHandler(s.listenerPrincipal("http"))
}

// listenerPrincipal is who the clients of the listener at addr are, until
// bearer tokens tell them apart: Options.Principal, else one principal per
// listener address.
func (s *Server) listenerPrincipal(addr string) engine.Principal {
	if s.opts.Principal.Tenant != "" {
		return s.opts.Principal
	}
	return engine.ListenerPrincipal(addr)
}

func (s *Server) httpHandler(p engine.Principal) (http.Handler, func(context.Context) error) {
	opts := []mcpserver.StreamableHTTPOption{
		mcpserver.WithEndpointPath(EndpointPath),
		mcpserver.WithStreamableHTTPLogger(s.log),
		mcpserver.WithSessionIdleTTL(time.Hour),
		// forge's own guard below checks Host and Origin against the
		// configuration; mcp-go's checks only Host, only on loopback.
		mcpserver.WithDisableLocalhostProtection(true),
	}
	if len(s.cfg.Server.AllowedOrigins) > 0 {
		opts = append(opts, mcpserver.WithStreamableHTTPCORS(mcpserver.WithCORSAllowedOrigins(s.cfg.Server.AllowedOrigins...)))
	}
	mcpHTTP := mcpserver.NewStreamableHTTPServer(s.mcp, opts...)
	mux := http.NewServeMux()
	mux.Handle(EndpointPath, s.precheckHTTP(p, mcpHTTP))
	s.mountService(mux)
	s.mountAgentSandbox(mux)
	var next http.Handler = mux
	if h := s.e2bFace(); h != nil {
		// The E2B face's requests (by path and header) authenticate
		// themselves (X-API-KEY, X-Access-Token); see authenticate.
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h.Owns(r) {
				h.ServeHTTP(w, r)
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	return s.closeWhenLeaving(s.guard(s.authenticate(p, s.newBodyLimits().wrap(s.clusterRoute(next))))), mcpHTTP.Shutdown
}

// leave serves on for server.drain_delay after a stop was asked for, with
// /readyz failing and every answer closing its connection: a load balancer
// stops sending new connections here (Kubernetes removes the pod from the
// Service's endpoints meanwhile), and a client with a kept-alive connection
// gets its answer and reconnects elsewhere. Without it, the shutdown would
// close idle kept-alive connections at the moment a client may be writing
// its next request on one, and that request would fail. It returns early
// if the listener fails.
func (s *Server) leave(served <-chan error) error {
	d := s.cfg.Server.DrainDelay.Std()
	if d <= 0 {
		return nil
	}
	s.leaving.Store(true)
	s.log.Info("leaving: serving on with Connection: close before the listener closes", "drain_delay", d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case err := <-served:
		return err
	}
}

// closeWhenLeaving marks every answer Connection: close while the server is
// leaving (see leave).
func (s *Server) closeWhenLeaving(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.leaving.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP serves the HTTP transport on ln until ctx is cancelled, then
// shuts down gracefully: open streams are closed, running executions get
// server.shutdown_grace, and ServeHTTP returns when every request is done.
// Every client of ln acts for one principal (see listenerPrincipal).
func (s *Server) ServeHTTP(ctx context.Context, ln net.Listener) error {
	h, closeStreams := s.httpHandler(s.listenerPrincipal(ln.Addr().String()))
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       readTimeout, // headers and body; net/http lifts it once the body is read
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(netutil.LimitListener(ln, s.cfg.Server.MaxConnections)) }()
	stopSummaries := s.refusals.run()
	defer stopSummaries()
	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
		err = s.leave(served)
	}
	grace := s.shutdownGrace()
	s.beginDrain(grace)
	if s.e2b != nil {
		defer s.e2b.Close()
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace+5*time.Second)
	defer cancel()
	_ = closeStreams(sctx) // only ends SSE streams: nothing to report
	if serr := srv.Shutdown(sctx); serr != nil {
		srv.Close()
		err = errors.Join(err, serr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// guard rejects requests whose Host or Origin is neither loopback nor
// configured (server.allowed_hosts, server.allowed_origins) with 403: a web
// page must not reach a local forge through DNS rebinding. Probes (GET or
// HEAD of /healthz and /readyz) pass without the check: a kubelet sends its
// pod's IP as Host, and what they answer (ok, or why not ready) is no secret
// a rebinding page could steal.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isProbe(r) {
			next.ServeHTTP(w, r)
			return
		}
		if ok, why := s.hostAllowed(r.Host); !ok {
			s.reject(w, r, why)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if ok, why := s.originAllowed(origin); !ok {
				s.reject(w, r, why)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// isProbe: a GET or HEAD of HealthPath or ReadyPath, with no query.
func isProbe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.URL.Path == HealthPath || r.URL.Path == ReadyPath) && r.URL.RawQuery == ""
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, why string) {
	if s.refusals.admit(r.RemoteAddr) {
		s.log.Warn("HTTP request rejected", "reason", why, "remote", r.RemoteAddr)
		s.audit.Log(audit.Event{Event: audit.EventSecurityViolation, Severity: audit.SeverityCritical,
			Reason: "HTTP request rejected: " + why, Fields: map[string]any{"remote": r.RemoteAddr}})
	}
	http.Error(w, "Forbidden: "+why, http.StatusForbidden)
}

func (s *Server) hostAllowed(hostport string) (bool, string) {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if host == "" {
		return false, "missing Host header"
	}
	if isLoopbackName(host) {
		return true, ""
	}
	for _, a := range s.cfg.Server.AllowedHosts {
		if strings.EqualFold(strings.Trim(a, "[]"), host) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("Host %q is not allowed (server.allowed_hosts)", truncate(hostport, 100))
}

func (s *Server) originAllowed(origin string) (bool, string) {
	norm := strings.ToLower(strings.TrimSuffix(origin, "/"))
	for _, a := range s.cfg.Server.AllowedOrigins {
		if a == "*" || strings.ToLower(strings.TrimSuffix(a, "/")) == norm {
			return true, ""
		}
	}
	if u, err := url.Parse(origin); err == nil && (u.Scheme == "http" || u.Scheme == "https") && isLoopbackName(u.Hostname()) {
		return true, ""
	}
	return false, fmt.Sprintf("Origin %q is not allowed (server.allowed_origins)", truncate(origin, 100))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// precheckHTTP gives every request principal p and answers POSTed messages
// the way stdio does (HandleMessage): what is not a valid JSON-RPC message
// gets its parse or invalid-request error here with status 400 (mcp-go would
// call a non-object a parse error and pass a request without a method as a
// response), a response (to an elicitation forge sent) is accepted (202),
// and a request passes preflight, whose answer (status 200) replaces
// mcp-go's. Arguments that decode ride along in the request's context to
// the handler.
func (s *Server) precheckHTTP(p engine.Principal, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Value(principalKey{}).(engine.Principal); !ok {
			r = r.WithContext(withPrincipal(r.Context(), p)) // else: the token's tenant (authenticate)
		}
		ctx, cancelled := withCancelMark(s.received(r.Context()))
		r, w = r.WithContext(ctx), &cancelWriter{ResponseWriter: w, mark: cancelled}
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body) // bounded by bodyLimits
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				tooLarge(w, r, tooBig.Limit)
			} else {
				http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
			}
			return
		}
		msg, reply := checkMessage(body)
		switch {
		case reply != nil:
			writeReply(w, r, http.StatusBadRequest, reply) // as mcp-go answers its own parse errors
			return
		case msg.kind == kindResponse:
			// A response to a request forge sent (elicitation) goes to
			// mcp-go, which hands it to the request waiting for it; one to
			// nothing is dropped there. Either way it is accepted, as the
			// transport wants.
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(discardWriter{}, r)
			w.WriteHeader(http.StatusAccepted)
			return
		}
		ctx, reply, drop := s.preflight(r.Context(), msg)
		switch {
		case drop:
			return // the client went away, or forge stops
		case reply != nil:
			writeReply(w, r, http.StatusOK, reply) // a response to a valid request
			return
		}
		r = r.WithContext(ctx)
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
		s.markAnswered()
	})
}

// writeReply writes forge's own JSON-RPC answer to a POSTed message, with
// the request's session id, as mcp-go would.
func writeReply(w http.ResponseWriter, r *http.Request, status int, reply mcp.JSONRPCMessage) {
	w.Header().Set("Content-Type", "application/json")
	if sid := r.Header.Get(mcpserver.HeaderKeySessionID); sid != "" {
		w.Header().Set(mcpserver.HeaderKeySessionID, sid)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(reply)
}

// discardWriter takes an answer nobody reads: mcp-go's to a client's
// response, which the client gets as 202 whatever mcp-go made of it.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (discardWriter) WriteHeader(int)             {}
