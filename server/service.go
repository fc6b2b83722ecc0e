package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/server/rest"
	"github.com/mcp-forge/forge/server/tenant"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Paths served beside /mcp and /api/v1.
const (
	HealthPath  = "/healthz"
	ReadyPath   = "/readyz"
	MetricsPath = "/metrics"
)

// publicPaths answer without a token: probes and the API's description.
var publicPaths = map[string]bool{HealthPath: true, ReadyPath: true, rest.Prefix + "/openapi.json": true}

// ErrService: the HTTP service could not be set up or answer.
var ErrService = errors.New("HTTP service")

// restAPI builds the REST API on the same execution path as MCP.
func (s *Server) restAPI() (*rest.API, error) {
	x := s.cfg.Execution
	return rest.New(rest.Options{
		Version: s.opts.Version, Engine: gatedEngine{s},
		Execute: s.restExecute, CreateSandbox: s.createSandbox, DeleteFile: s.deleteFile,
		Ready: s.ready, Principal: s.principal, Authorize: authorize,
		ExecuteSchema: inputSchema(s.cfg), ResultSchema: outputSchema,
		Build: s.restBuild, BuildSchema: buildTool(s).RawInputSchema, Environments: s.restEnvironments,
		MaxBody: restMaxBody(int64(x.MaxCodeSize)),
		MaxFile: int64(s.cfg.Volumes.MaxFileSize),
	})
}

// mountService adds the REST API, the probes and the metrics to mux.
func (s *Server) mountService(mux *http.ServeMux) {
	api, err := s.restAPI()
	if err != nil {
		panic(fmt.Errorf("%w: %w", ErrService, err)) // static schemas: a bug
	}
	mux.Handle(rest.Prefix+"/", s.readyHTTP(api))
	mux.Handle(HealthPath, api)
	mux.Handle(ReadyPath, api)
	if s.opts.Metrics != nil {
		mux.Handle(MetricsPath, s.requireScope(profiles.ScopeAdmin, s.opts.Metrics))
	}
}

// authenticate gives every request an id (X-Request-Id, in logs, audit
// entries and problems) and requires a bearer token on every path but the
// probes': the token's tenant becomes the request's principal. Only with
// Options.InsecureNoAuth is every client of the listener principal p.
func (s *Server) authenticate(p engine.Principal, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := p // per request: p is shared by every request of the listener
		id := rest.NewRequestID()
		w.Header().Set(rest.HeaderRequestID, id)
		ctx := rest.WithRequestID(r.Context(), id)
		if s.opts.Tracer != nil {
			var span trace.Span
			ctx, span = s.opts.Tracer.Start(ctx, r.Method+" "+route(r.URL.Path), trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("forge.request_id", id)))
			defer span.End()
		}
		switch {
		case publicPaths[r.URL.Path] || s.opts.InsecureNoAuth && !s.opts.Auth.Enabled():
		case s.e2b.Owns(r):
			// The E2B face authenticates its own requests: X-API-KEY on
			// the control plane, the sandbox's access token on the other.
		case !s.opts.Auth.Enabled():
			// No token can be right: fail closed (forge serve always
			// configures one, or says --insecure-no-auth).
			s.refuseToken(w, r.WithContext(ctx), auth.ErrNoTokens)
			return
		default:
			ident, err := s.opts.Auth.Authenticate(r.Header.Get("Authorization"))
			if err != nil {
				s.refuseToken(w, r.WithContext(ctx), err)
				return
			}
			ctx = auth.WithIdentity(ctx, ident)
			who = ident.Principal()
			trace.SpanFromContext(ctx).SetAttributes(attribute.String("forge.tenant", ident.Tenant))
		}
		ctx = withPrincipal(ctx, who)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (s *Server) refuseToken(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	if !errors.Is(err, auth.ErrNoToken) && !errors.Is(err, auth.ErrBadToken) && !errors.Is(err, auth.ErrNoTokens) {
		s.log.Error("checking a bearer token", "err", err, "request_id", rest.RequestID(ctx))
		rest.NewProblem(ctx, http.StatusInternalServerError, "forge could not check the token: "+err.Error()).Write(w)
		return
	}
	if s.refusals.admit(r.RemoteAddr) {
		s.log.Warn("HTTP request without a valid token", "path", truncate(r.URL.Path, 100), "remote", r.RemoteAddr, "request_id", rest.RequestID(ctx), "err", err)
		if errors.Is(err, auth.ErrBadToken) {
			s.audit.Log(audit.Event{Event: audit.EventSecurityViolation, Severity: audit.SeverityCritical, RequestID: rest.RequestID(ctx),
				Reason: "HTTP request with an invalid bearer token", Fields: map[string]any{"remote": r.RemoteAddr, "path": truncate(r.URL.Path, 100)}})
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="forge"`)
	hint := "send \"Authorization: Bearer TOKEN\" with the token in <state_dir>/" + auth.LocalFileName + " (forge serve prints its path) or one from forge token create"
	if errors.Is(err, auth.ErrNoTokens) {
		hint = "start forge serve without --insecure-no-auth, or give it a token (forge token create)"
	}
	rest.NewProblem(ctx, http.StatusUnauthorized, err.Error()+": "+hint).Write(w)
}

// authorize refuses the request in ctx when its token lacks scope; a
// request without a token passed authentication only with auth off.
func authorize(ctx context.Context, scope string) error {
	id, ok := auth.FromContext(ctx)
	if !ok || id.Has(scope) {
		return nil
	}
	return rest.NewProblem(ctx, http.StatusForbidden,
		fmt.Sprintf("the token of tenant %q lacks scope %q (it has %s); make one with forge token create --scopes %s", id.Tenant, scope, strings.Join(id.Scopes, ","), scope))
}

func (s *Server) requireScope(scope string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := authorize(r.Context(), scope); err != nil {
			err.(*rest.Problem).Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// toolScope is the scope a tool needs.
func toolScope(name string) string {
	switch name {
	case toolExecute:
		return profiles.ScopeExecute
	case toolDocumentState, toolListSessions, toolDestroySession, toolForkSession, toolWriteFile, toolReadFile, toolListFiles:
		return profiles.ScopeSessions
	case "build_custom_environment":
		return profiles.ScopeEnvironments
	}
	return profiles.ScopeTools // hosted and other tools
}

// listingKey marks the context of a tools/list request (see preflight).
type listingKey struct{}

// scopeFilter (an mcp-go tool filter) hides from tools/list the tools whose
// scope the caller's token lacks. Calls are not filtered: a call of such a
// tool gets toolGate's error, which names the scope missing, rather than
// "not found".
func scopeFilter(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	id, ok := auth.FromContext(ctx)
	if listing, _ := ctx.Value(listingKey{}).(bool); !ok || !listing {
		return tools
	}
	out := make([]mcp.Tool, 0, len(tools))
	for _, t := range tools {
		if id.Has(toolScope(t.Name)) {
			out = append(out, t)
		}
	}
	return out
}

// toolGate refuses MCP tool calls whose token lacks the tool's scope, and
// builds over the tenant's build bucket.
func (s *Server) toolGate(next mcpserver.ToolHandlerFunc) mcpserver.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		scope := toolScope(req.Params.Name)
		if err := authorize(ctx, scope); err != nil {
			return mcp.NewToolResultError("Forbidden: " + err.Error()), nil
		}
		if t, ok := strings.CutPrefix(s.principal(ctx).Tenant, auth.TenantPrefix); ok && scope == profiles.ScopeEnvironments && s.tenants != nil {
			if err := s.tenants.Build(t); err != nil {
				s.limited(t, err)
				return mcp.NewToolResultError("Not built: " + err.Error() + "."), nil
			}
		}
		return next(ctx, req)
	}
}

// resourceGate refuses reads of session resources without scope sessions.
func (s *Server) resourceGate(next mcpserver.ResourceHandlerFunc) mcpserver.ResourceHandlerFunc {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		if strings.HasPrefix(req.Params.URI, "forge://sessions/") {
			if err := authorize(ctx, profiles.ScopeSessions); err != nil {
				return nil, fmt.Errorf("forbidden: %w", err)
			}
		}
		return next(ctx, req)
	}
}

// executeRequest is the engine request of execute_python's arguments for
// the caller in ctx: one builder for MCP and REST.
func (s *Server) executeRequest(ctx context.Context, a ExecuteArgs, progress func(engine.Progress)) engine.Request {
	return engine.Request{
		Principal: s.principal(ctx), Client: clientName(ctx), RequestID: rest.RequestID(ctx),
		Code: a.Code, Image: a.CustomImage, Timeout: a.Timeout, Memory: a.Memory,
		SessionID: a.SessionID, NewSession: a.Backend == BackendJupyter, MCPTools: a.MCPTools,
		Environment: a.Environment, Progress: progress, Egress: a.Egress, Env: a.Env, Approver: elicitApprover{s},
	}
}

// execute runs req within its tenant's limits (the tenant gate, admit).
func (s *Server) execute(ctx context.Context, req engine.Request) (*kernel.Result, error) {
	return admitted(ctx, s, req.Principal, func(ctx context.Context) (*kernel.Result, error) { return s.run(ctx, req) })
}

// run runs req, which passed admit, under its tenant's egress policy.
func (s *Server) run(ctx context.Context, req engine.Request) (*kernel.Result, error) {
	if t, ok := strings.CutPrefix(req.Principal.Tenant, auth.TenantPrefix); ok && s.tenants != nil {
		if err := s.tenantEgress(t, &req); err != nil {
			return nil, err
		}
	}
	if s.opts.Tracer != nil {
		var span trace.Span
		ctx, span = s.opts.Tracer.Start(ctx, "execute", trace.WithAttributes(attribute.Bool("forge.session", req.SessionID != "" || req.NewSession)))
		defer span.End()
		res, err := s.eng.Execute(ctx, req)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.Bool("forge.success", res.Success), attribute.Bool("forge.timed_out", res.TimedOut), attribute.Bool("forge.oom_killed", res.OOMKilled))
		}
		return res, err
	}
	return s.eng.Execute(ctx, req)
}

// route is a path with its ids replaced, for span names of bounded
// cardinality: /api/v1/sessions/{id}/files/{path}.
func route(path string) string {
	seg := strings.Split(path, "/")
	if len(seg) > 4 && seg[1] == "api" && (seg[3] == "sessions" || seg[3] == "sandboxes") {
		seg[4] = "{id}"
		if len(seg) > 6 && seg[5] == "files" {
			seg = append(seg[:6], "{path}")
		}
	}
	if len(seg) > 8 {
		seg = seg[:8]
	}
	return strings.Join(seg, "/")
}

func (s *Server) limited(t string, err error) {
	var lim *tenant.LimitError
	if errors.As(err, &lim) && s.opts.OnLimited != nil {
		s.opts.OnLimited(t, lim.What)
	}
}

// tenantEgress narrows req's egress to its tenant's policy (on top of the
// profile's): a request without one runs under the tenant's, one asking for
// more is refused like a request widening the profile's.
func (s *Server) tenantEgress(t string, req *engine.Request) error {
	pol, setting, ok, err := s.cfg.TenantEgress(t)
	if err != nil || !ok {
		return err // validated when the config loaded: not the caller's
	}
	if req.Egress != nil {
		if pol, err = pol.Within(*req.Egress, setting+" (with the profile's execution.egress)"); err != nil {
			return &engine.RefusedError{Kind: engine.RefusedInvalid, Err: fmt.Errorf("%w: %w", engine.ErrInvalidRequest, err)}
		}
	}
	req.Egress = &pol
	return nil
}

// restExecute is POST /api/v1/execute: execute_python's decoding and checks.
func (s *Server) restExecute(ctx context.Context, body []byte) (*kernel.Result, error) {
	s.active.Add(1)
	defer s.active.Done()
	args, err := DecodeExecuteArgs(body)
	if err != nil {
		return nil, rest.NewProblem(ctx, http.StatusBadRequest, err.Error())
	}
	ectx, cancel := s.execContext(ctx)
	defer cancel()
	res, err := s.execute(ectx, s.executeRequest(ctx, args, nil))
	if err != nil {
		return nil, err
	}
	if res.Display == nil {
		res.Display = []kernel.Display{}
	}
	return res, nil
}

// createSandbox is POST /api/v1/sandboxes: a new session, started by a
// first call that runs nothing.
func (s *Server) createSandbox(ctx context.Context, image string) (string, error) {
	s.active.Add(1)
	defer s.active.Done()
	ectx, cancel := s.execContext(ctx)
	defer cancel()
	res, err := s.execute(ectx, s.executeRequest(ctx, ExecuteArgs{Code: "None", Backend: BackendJupyter, CustomImage: strings.TrimSpace(image)}, nil))
	if err != nil {
		return "", err
	}
	if res.SessionID == nil {
		return "", fmt.Errorf("%w: the session started without an id", ErrService)
	}
	return *res.SessionID, nil
}

// deleteFile removes a /workspace file by running os.remove in the session
// (the agent has no delete operation; the sandbox is the file's own).
func (s *Server) deleteFile(ctx context.Context, id, path string) error {
	p := s.principal(ctx)
	ectx, cancel := s.execContext(ctx)
	defer cancel()
	// One admission for both steps: the check that the session exists (a
	// session call would create it) and the removal.
	res, err := admitted(ectx, s, p, func(ectx context.Context) (*kernel.Result, error) {
		if _, err := s.eng.SessionState(ectx, p, id); err != nil {
			return nil, err
		}
		if path == "" || strings.HasPrefix(path, "/") || strings.Contains(path, "\x00") || len(path) > 4096 ||
			strings.Contains("/"+path+"/", "/../") {
			return nil, rest.NewProblem(ctx, http.StatusBadRequest, fmt.Sprintf("path %q: want a path relative to /workspace, without ..", truncate(path, 100)))
		}
		lit, _ := jsonString(path)
		code := "__import__('os').remove(__import__('os').path.join('/workspace', " + lit + "))"
		return s.run(ectx, engine.Request{Principal: p, RequestID: rest.RequestID(ctx), Code: code, SessionID: id})
	})
	if err != nil {
		return err
	}
	if !res.Success {
		msg := "removing " + path + " failed"
		status := http.StatusBadRequest
		if res.Error != nil {
			msg += ": " + res.Error.Type + ": " + res.Error.Message
			if res.Error.Type == "FileNotFoundError" {
				status = http.StatusNotFound
			}
		}
		return rest.NewProblem(ctx, status, msg)
	}
	return nil
}

// ready is /readyz: the image store answers and, with the pool on, the
// default image's pool has been warm (it has a sandbox ready, or has served
// one): a busy moment that empties the pool does not flip readiness.
func (s *Server) ready(ctx context.Context) error {
	if s.draining() || s.leaving.Load() {
		return errors.New("shutting down")
	}
	if w, ok := s.eng.(waiter); ok && !w.Opened() {
		return errors.New("starting: the image store and the pools are opening")
	}
	if _, err := s.eng.Images(ctx); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	if !s.cfg.Pool.Enabled || s.cfg.Pool.Size == 0 || s.eng.TenantPools() {
		return nil // no pool to wait for: a tenant's fills at its first request
	}
	for _, st := range s.eng.PoolStats() {
		if st.Name == s.cfg.Images.Default && (st.Ready > 0 || st.Hits > 0) {
			return nil
		}
	}
	return fmt.Errorf("the warm pool of %s has no sandbox ready yet", s.cfg.Images.Default)
}

// jsonString is s as a JSON string literal, which is also a Python one.
func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// restBuild is POST /api/v1/environments: build_custom_environment's
// decoding, the tenant's build bucket, the engine's build.
func (s *Server) restBuild(ctx context.Context, body []byte) (*build.Result, error) {
	s.active.Add(1)
	defer s.active.Done()
	a, err := DecodeBuildArgs(body)
	if err != nil {
		return nil, rest.NewProblem(ctx, http.StatusBadRequest, err.Error())
	}
	if a.ViaTemplate {
		s.log.Warn("POST /api/v1/environments: field template is the old name of preset; it still works for now")
	}
	p := s.principal(ctx)
	if t, ok := strings.CutPrefix(p.Tenant, auth.TenantPrefix); ok && s.tenants != nil {
		if err := s.tenants.Build(t); err != nil {
			s.limited(t, err)
			return nil, err
		}
	}
	ectx, cancel := s.execContext(ctx)
	defer cancel()
	return s.eng.BuildEnvironment(ectx, p, build.Request{
		Client: "rest", Name: a.Name, Packages: a.Packages, Preset: a.Preset,
		BaseImage: a.BaseImage, Description: a.Description,
	})
}

// restEnvironments is GET /api/v1/environments.
func (s *Server) restEnvironments(ctx context.Context) ([]build.Environment, error) {
	return s.eng.ListEnvironments(ctx, s.principal(ctx))
}
