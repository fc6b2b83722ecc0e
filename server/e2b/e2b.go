// Package e2b is forge's E2B face: the wire protocol of the E2B SDKs
// (e2b, e2b-code-interpreter) on forge's HTTP listener, so that programs
// written for them run unchanged against a self-hosted forge
// (E2B_API_URL = E2B_SANDBOX_URL = the listener's root URL, E2B_API_KEY =
// a forge token).
//
// An E2B sandbox is a forge session of the token's principal. Requests
// without an E2b-Sandbox-Id header are the control plane (create, list,
// kill, timeouts, pause) and authenticate with X-API-KEY; requests with it
// are the sandbox plane (envd on port 49983, the code interpreter on
// 49999), authenticated by the sandbox's access token (X-Access-Token),
// which create and connect hand out.
package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/auth"
)

// Headers of the E2B protocol.
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	HeaderAccessToken = "X-Access-Token"
	HeaderAPIKey      = "X-API-KEY"
)

// Ports the SDKs name in E2b-Sandbox-Port.
const (
	EnvdPort        = "49983"
	InterpreterPort = "49999"
)

// EnvdVersion is the envd version create and connect report; the SDKs
// pick protocol variants by it (e2b/envd/versions.py): 0.5.7 turns on
// stdin for commands, CloseStdin, server-side default user and
// application/octet-stream uploads, and keeps file metadata headers
// (0.6.2) and watch extras (0.6.3+) off.
const EnvdVersion = "0.5.7"

// HomeDir is where E2B code expects its files: the session's workspace.
const HomeDir = "/home/user"

// Engine is what the face needs of forge's engine (*engine.Engine). The
// calls that run in a sandbox go through Options.Admit or Options.Execute
// (the tenant gate); listing and destroying run nothing.
type Engine interface {
	Config() *profiles.Config
	Images(ctx context.Context) ([]rootfs.Image, error)
	ListSessions(ctx context.Context, p engine.Principal) ([]session.Info, error)
	DestroySession(ctx context.Context, p engine.Principal, id string) error
	HibernateSession(ctx context.Context, p engine.Principal, id string) error
	WithSession(ctx context.Context, p engine.Principal, id string, f func(*sandbox.Sandbox) error) error
	WriteFile(ctx context.Context, p engine.Principal, id, path string, data []byte) error
	ReadFile(ctx context.Context, p engine.Principal, id, path string) ([]byte, error)
	ListFiles(ctx context.Context, p engine.Principal, id string) ([]kernel.FileInfo, error)
}

// Options configure a Handler.
type Options struct {
	Engine Engine
	// Auth checks X-API-KEY (a forge bearer token). Without an Enabled
	// one, control-plane requests are refused unless NoAuth gives them a
	// principal.
	Auth *auth.Authenticator
	// NoAuth, when set, is the principal of a request on a listener that
	// serves without tokens (forge serve --insecure-no-auth); ok false
	// refuses the request.
	NoAuth func(ctx context.Context) (p engine.Principal, ok bool)
	// Admit is the server's tenant gate: every operation that runs in,
	// starts or makes a sandbox passes it once (server.admit).
	Admit func(ctx context.Context, p engine.Principal) (context.Context, func(error) error, error)
	// Execute runs an engine request through the tenant gate and the
	// tenant's egress policy (the server's execute path).
	Execute func(ctx context.Context, req engine.Request) (*kernel.Result, error)
	// OnRefused is told of a request refused for its credentials (the
	// server logs and audits them within its budget); nil: nobody.
	OnRefused func(r *http.Request, err error)
	Config    *profiles.Config
	StateDir  string
	Logger    *slog.Logger
	Audit     *audit.Logger
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Handler serves the E2B protocol. Make it with New, mount it where Owns
// says, and Close it when the server stops.
type Handler struct {
	opts    Options
	cfg     profiles.E2BConfig
	log     *slog.Logger
	reg     *registry
	key     []byte // signs access tokens (tokenFor)
	control *http.ServeMux
	plane   *http.ServeMux

	stop     chan struct{}
	reaped   sync.WaitGroup
	stopOnce sync.Once

	cmds commandTable // running commands (process.go)
	ctxs contextTable // Python contexts (contexts.go)
}

// New loads the sandboxes of <state_dir>/e2b and starts the reaper that
// kills them at their end time.
func New(opts Options) (*Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	dir := filepath.Join(opts.StateDir, "e2b")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("e2b: %w", err)
	}
	key, err := loadKey(filepath.Join(dir, "key"))
	if err != nil {
		return nil, fmt.Errorf("e2b: %w", err)
	}
	reg, err := openRegistry(dir)
	if err != nil {
		return nil, fmt.Errorf("e2b: %w", err)
	}
	h := &Handler{opts: opts, cfg: opts.Config.E2B, log: opts.Logger, reg: reg, key: key, stop: make(chan struct{})}
	h.routes()
	h.reaped.Add(1)
	go h.reaper()
	return h, nil
}

// Close stops the reaper. Sandboxes stay: they are sessions, which the
// engine hibernates, and their records, which the next start loads.
func (h *Handler) Close() {
	h.stopOnce.Do(func() { close(h.stop) })
	h.reaped.Wait()
}

// Owns reports whether r is the E2B face's: every request carrying
// E2b-Sandbox-Id, and the control plane's paths (/sandboxes…,
// /v2/sandboxes…), which forge's own API does not use.
func (h *Handler) Owns(r *http.Request) bool {
	if h == nil || !h.cfg.Enabled {
		return false
	}
	if r.Header.Get(HeaderSandboxID) != "" {
		return true
	}
	p := r.URL.Path
	for _, prefix := range controlPrefixes {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true
		}
	}
	return false
}

// controlPrefixes are the control plane's paths: the sandboxes', and
// those of the E2B features forge refuses by name (unmapped).
var controlPrefixes = func() []string {
	out := []string{"/sandboxes", "/v2/sandboxes"}
	for _, u := range unmapped {
		for _, p := range u.patterns {
			if !strings.Contains(p, "{") {
				out = append(out, strings.TrimSuffix(p, "/"))
			}
		}
	}
	return out
}()

// unmapped are the E2B features of the control plane that forge has no
// counterpart for, with what to use instead: each is refused, never
// answered as if it worked. A pattern ending in / covers its subtree.
var unmapped = []struct {
	patterns []string
	msg      string
}{
	{[]string{"/templates/", "/v2/templates/", "/v3/templates/"},
		"forge builds no E2B templates: build a custom environment (forge env build NAME PACKAGES..., or the build_custom_environment tool) and pass its name as the template"},
	{[]string{"/snapshots/", "/v2/snapshots/", "/sandboxes/{id}/snapshots/"},
		"forge has no sandbox snapshots: pause() hibernates a sandbox (variables and /home/user kept) and connect() resumes it; fork_session (MCP) copies a session"},
	{[]string{"/volumes/", "/v2/volumes/"},
		"forge has no volumes: a sandbox's files live in /home/user, its session workspace, for the sandbox's lifetime and across pause()"},
	{[]string{"/sandboxes/{id}/fork"},
		"forge forks sessions through MCP (fork_session), not through the E2B API"},
	{[]string{"/sandboxes/{id}/network", "/v2/sandboxes/{id}/network"},
		"forge sandboxes have no network; code reaches the hosts of forge's egress rules (execution.egress, server.tenants.*.egress)"},
}

// refuseUnmapped answers an unmapped feature: 400 (the SDKs raise it as
// their SandboxException) naming what forge offers, once the key is good.
func (h *Handler) refuseUnmapped(msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, ok := h.principal(w, r); ok {
			writeError(w, http.StatusBadRequest, msg)
		}
	}
}

// routes builds the two planes' muxes. The envd and interpreter handlers
// get the authenticated sandbox (see withSandbox).
func (h *Handler) routes() {
	c := http.NewServeMux()
	c.HandleFunc("POST /sandboxes", h.create)
	c.HandleFunc("POST /v2/sandboxes", h.create)
	c.HandleFunc("GET /sandboxes", h.listV1)
	c.HandleFunc("GET /v2/sandboxes", h.listV2)
	c.HandleFunc("GET /sandboxes/{id}", h.getInfo)
	c.HandleFunc("DELETE /sandboxes/{id}", h.kill)
	c.HandleFunc("POST /sandboxes/{id}/timeout", h.setTimeout)
	c.HandleFunc("GET /sandboxes/{id}/metrics", h.metrics)
	c.HandleFunc("POST /sandboxes/{id}/pause", h.pause)
	c.HandleFunc("POST /sandboxes/{id}/resume", h.resume)
	c.HandleFunc("POST /sandboxes/{id}/connect", h.connect)
	c.HandleFunc("POST /v2/sandboxes/{id}/connect", h.connect)
	for _, u := range unmapped {
		for _, pattern := range u.patterns {
			c.Handle(pattern, h.refuseUnmapped(u.msg))
			if base, ok := strings.CutSuffix(pattern, "/"); ok {
				c.Handle(base, h.refuseUnmapped(u.msg))
			}
		}
	}
	h.control = c

	p := http.NewServeMux()
	p.HandleFunc("GET /health", h.health)
	p.HandleFunc("GET /files", h.withSandbox(h.serveFiles))
	p.HandleFunc("POST /files", h.withSandbox(h.serveFiles))
	p.HandleFunc("POST /process.Process/{method}", h.withSandbox(func(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
		h.serveProcess(w, r, sb, r.PathValue("method"))
	}))
	p.HandleFunc("POST /filesystem.Filesystem/{method}", h.withSandbox(func(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
		h.serveFilesystem(w, r, sb, r.PathValue("method"))
	}))
	p.HandleFunc("POST /execute", h.withSandbox(h.execute))
	// The SDKs send no access token on /contexts: the sandbox id (128
	// random bits) is the capability there, and only for contexts.
	p.HandleFunc("GET /contexts", h.withSandboxID(h.listContexts))
	p.HandleFunc("POST /contexts", h.withSandboxID(h.createContext))
	p.HandleFunc("POST /contexts/{ctx}/restart", h.withSandboxID(h.restartContext))
	p.HandleFunc("DELETE /contexts/{ctx}", h.withSandboxID(h.removeContext))
	h.plane = p
}

// ServeHTTP dispatches r (one Owns says is the face's) to its plane.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mux := h.control
	if r.Header.Get(HeaderSandboxID) != "" {
		mux = h.plane
	}
	if _, pattern := mux.Handler(r); pattern == "" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("forge's E2B API has no %s %s", r.Method, truncate(r.URL.Path, 100)))
		return
	}
	mux.ServeHTTP(w, r) // it sets the path values
}

// health is envd's GET /health: 204 for a live sandbox, 502 (what the
// SDKs' is_running reads as "not running") otherwise. No token: envd's
// own needs none.
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.reg.get(r.Header.Get(HeaderSandboxID)); !ok {
		writeError(w, http.StatusBadGateway, notRunning(r.Header.Get(HeaderSandboxID)))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// principal authenticates a control-plane request by its X-API-KEY (or an
// Authorization bearer token) and writes the 401 or 403 itself. Every
// E2B operation needs the scopes execute and sessions: a sandbox is a
// session that runs code.
func (h *Handler) principal(w http.ResponseWriter, r *http.Request) (engine.Principal, bool) {
	if !h.opts.Auth.Enabled() {
		if h.opts.NoAuth != nil {
			if p, ok := h.opts.NoAuth(r.Context()); ok {
				return p, true
			}
		}
		h.refuse(w, r, http.StatusUnauthorized, auth.ErrNoTokens)
		return engine.Principal{}, false
	}
	header := r.Header.Get("Authorization")
	if key := strings.TrimSpace(r.Header.Get(HeaderAPIKey)); key != "" {
		header = "Bearer " + key
	}
	id, err := h.opts.Auth.Authenticate(header)
	if err != nil {
		if errors.Is(err, auth.ErrNoToken) {
			err = errors.New("no API key: send X-API-KEY (E2B_API_KEY) with a forge token (forge serve prints the path of its local token; forge token create makes tenants' ones)")
		} else if errors.Is(err, auth.ErrBadToken) {
			err = errors.New("invalid API key: E2B_API_KEY must be a forge token (forge token create, or the local token file forge serve names)")
		}
		h.refuse(w, r, http.StatusUnauthorized, err)
		return engine.Principal{}, false
	}
	for _, scope := range []string{profiles.ScopeExecute, profiles.ScopeSessions} {
		if !id.Has(scope) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("the token of tenant %q lacks scope %q, which E2B sandboxes need; make one with forge token create --scopes execute,sessions", id.Tenant, scope))
			return engine.Principal{}, false
		}
	}
	return id.Principal(), true
}

func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, err error) {
	if h.opts.OnRefused != nil {
		h.opts.OnRefused(r, err)
	}
	writeError(w, status, err.Error())
}

// sandbox authenticates a sandbox-plane request: the sandbox named by
// E2b-Sandbox-Id must exist (else 502, as E2B's proxy answers for a
// sandbox that is gone) and X-Access-Token must be its access token (else
// 401). It writes the error itself; the *Sandbox is a copy of the record.
func (h *Handler) sandbox(w http.ResponseWriter, r *http.Request) (*Sandbox, bool) {
	sb, ok := h.live(w, r)
	if !ok {
		return nil, false
	}
	tok := r.Header.Get(HeaderAccessToken)
	if tok == "" {
		h.refuse(w, r, http.StatusUnauthorized, fmt.Errorf("sandbox %s: no access token: send %s with the envdAccessToken of create or connect", sb.ID, HeaderAccessToken))
		return nil, false
	}
	sum := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(sb.TokenHash)) != 1 {
		h.refuse(w, r, http.StatusUnauthorized, fmt.Errorf("sandbox %s: invalid access token (%s)", sb.ID, HeaderAccessToken))
		return nil, false
	}
	return sb, true
}

// live is the running sandbox named by E2b-Sandbox-Id, or a 502 written.
// A paused sandbox is resumed by its next use (the session comes back
// from hibernation on its next call).
func (h *Handler) live(w http.ResponseWriter, r *http.Request) (*Sandbox, bool) {
	id := r.Header.Get(HeaderSandboxID)
	sb, ok := h.reg.get(id)
	if !ok || !sb.EndAt.After(h.opts.Now()) {
		writeError(w, http.StatusBadGateway, notRunning(id))
		return nil, false
	}
	if sb.Paused {
		if s, err := h.reg.update(sb.ID, func(s *Sandbox) { s.Paused = false }); err == nil {
			sb = s
		}
	}
	return sb, true
}

func notRunning(id string) string {
	return fmt.Sprintf("sandbox %q is not running: unknown, killed or past its timeout", truncate(id, 80))
}

// withSandbox adapts a handler of an authenticated sandbox (sandbox).
func (h *Handler) withSandbox(f func(http.ResponseWriter, *http.Request, *Sandbox)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if sb, ok := h.sandbox(w, r); ok {
			f(w, r, sb)
		}
	}
}

// withSandboxID adapts a handler of a sandbox named by id alone (live).
func (h *Handler) withSandboxID(f func(http.ResponseWriter, *http.Request, *Sandbox)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if sb, ok := h.live(w, r); ok {
			f(w, r, sb)
		}
	}
}

// admitted runs f for p through the tenant gate.
func (h *Handler) admitted(ctx context.Context, p engine.Principal, f func(context.Context) error) error {
	if h.opts.Admit == nil {
		return f(ctx)
	}
	ctx, done, err := h.opts.Admit(ctx, p)
	if err != nil {
		return err
	}
	return done(f(ctx))
}

// WithSession runs f with the running sandbox of sb's session, through the
// tenant gate (for the envd handlers).
func (h *Handler) WithSession(ctx context.Context, sb *Sandbox, f func(*sandbox.Sandbox) error) error {
	p := sb.Principal()
	defer h.cmds.use(sb.ID)() // commands' polls step aside
	return h.admitted(ctx, p, func(ctx context.Context) error { return h.opts.Engine.WithSession(ctx, p, sb.ID, f) })
}

// Error is the E2B API's error body.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers status with the E2B error body, which the SDKs turn
// into their exceptions by status (401 AuthenticationException, 404
// NotFoundException, 429 RateLimitException, others SandboxException).
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, Error{Code: status, Message: msg})
}

// WriteError is writeError for the server, which refuses some E2B
// requests before this face sees them (a body over its cap).
func WriteError(w http.ResponseWriter, status int, msg string) { writeError(w, status, msg) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// loadKey reads the key that signs access tokens, making it on first use.
func loadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return b, nil
}

// tokenFor is the access token of sandbox id of owner: an HMAC under the
// handler's key, so that connect can hand it out again while only its
// hash is kept.
func (h *Handler) tokenFor(owner, id string) string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(owner + "\x00" + id))
	return hex.EncodeToString(m.Sum(nil))
}

func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}
