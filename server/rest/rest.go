// Package rest is forge's REST API under /api/v1 (and /healthz, /readyz),
// on huma: handlers are declared with Go input and output types from which
// the OpenAPI 3.1 document at /api/v1/openapi.json is generated. The
// execute request and result use the very schemas execute_python
// advertises over MCP, and the body is decoded by the same function.
//
// Authentication happens before these handlers (the server's auth layer
// puts the caller's principal into the context); each handler checks its
// scope through Options.Authorize. Errors are RFC 9457 problem+json with
// the request id.
package rest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
)

// Prefix is where the API lives.
const Prefix = "/api/v1"

// Engine is what the API needs of the engine (*engine.Engine has it).
type Engine interface {
	ListSessions(ctx context.Context, p engine.Principal) ([]session.Info, error)
	SessionState(ctx context.Context, p engine.Principal, id string) (*session.Meta, error)
	DocumentState(ctx context.Context, p engine.Principal, id string, vars map[string]string, note string, clear bool) (*session.Documented, error)
	DestroySession(ctx context.Context, p engine.Principal, id string) error
	WriteFile(ctx context.Context, p engine.Principal, id, path string, data []byte) error
	ReadFile(ctx context.Context, p engine.Principal, id, path string) ([]byte, error)
	ListFiles(ctx context.Context, p engine.Principal, id string) ([]kernel.FileInfo, error)
}

// Options wire the API to the server.
type Options struct {
	Version string
	Engine  Engine
	// Execute runs a POST /execute body: the same decoding, checks, limits
	// and engine call as execute_python.
	Execute func(ctx context.Context, body []byte) (*kernel.Result, error)
	// CreateSandbox starts a session in image ("" = default), returns its id.
	CreateSandbox func(ctx context.Context, image string) (string, error)
	// DeleteFile removes a file of a session's /workspace.
	DeleteFile func(ctx context.Context, id, path string) error
	// Ready says whether forge can serve executions now.
	Ready func(ctx context.Context) error
	// Principal is who the request in ctx acts for.
	Principal func(ctx context.Context) engine.Principal
	// Authorize refuses a request in ctx whose token lacks scope (a *Problem).
	Authorize func(ctx context.Context, scope string) error
	// ExecuteSchema and ResultSchema are execute_python's input and output
	// JSON Schemas, shown in the OpenAPI document for /execute.
	ExecuteSchema, ResultSchema json.RawMessage
	// Build runs a POST /environments body: build_custom_environment's
	// decoding and checks; BuildSchema is that tool's input schema.
	Build       func(ctx context.Context, body []byte) (*build.Result, error)
	BuildSchema json.RawMessage
	// Environments lists the caller's environments.
	Environments func(ctx context.Context) ([]build.Environment, error)
	// MaxBody bounds JSON bodies; MaxFile bounds uploaded files.
	MaxBody, MaxFile int64
}

// API is the REST API.
type API struct {
	opts Options
	api  huma.API
	mux  *http.ServeMux
	doc  []byte // the patched OpenAPI document
}

// New builds the API.
func New(o Options) (*API, error) {
	cfg := huma.DefaultConfig("forge", o.Version)
	cfg.OpenAPIPath, cfg.DocsPath, cfg.SchemasPath = "", "", ""
	cfg.CreateHooks = nil // no $schema links in bodies: the ExecutionResult stays exactly itself
	cfg.Info.Description = "Sandboxed Python execution: the REST face of forge (MCP is at /mcp)."
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "A token from forge token create (or server.auth.tokens)."},
	}
	a := &API{opts: o, mux: http.NewServeMux()}
	a.api = humago.New(a.mux, cfg)
	a.register()
	doc, err := a.document()
	if err != nil {
		return nil, err
	}
	a.doc = doc
	a.mux.HandleFunc("GET "+Prefix+"/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.oai.openapi+json")
		_, _ = w.Write(a.doc)
	})
	return a, nil
}

// ServeHTTP serves the API (its paths only; the caller routes).
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Document is the OpenAPI 3.1 document.
func (a *API) Document() []byte { return a.doc }

var bearer = []map[string][]string{{"bearer": {}}}

func (a *API) op(id, method, path, summary string, scope string, errs ...int) huma.Operation {
	op := huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Errors: errs,
		MaxBodyBytes: a.opts.MaxBody, BodyReadTimeout: 30 * time.Second}
	if scope != "" {
		op.Security = bearer
		op.Description = "Needs a token with scope " + scope + " (or admin)."
		// Any session call may restore a hibernated session, which needs a
		// free slot; any call may meet a tenant limit.
		op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusServiceUnavailable)
	}
	return op
}

// problem maps an error to a Problem for the request in ctx.
func problem(ctx context.Context, err error) error {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	if status, retry := StatusOf(err); status != 0 {
		p = NewProblem(ctx, status, err.Error())
		if retry > 0 {
			p.WithRetryAfter(retry)
		}
		return p
	}
	var brl *build.RateLimitError
	switch {
	case errors.As(err, &brl):
		return NewProblem(ctx, http.StatusTooManyRequests, err.Error()).WithRetryAfter(int(brl.RetryAfter.Seconds()) + 1)
	case errors.Is(err, build.ErrBusy):
		return NewProblem(ctx, http.StatusServiceUnavailable, err.Error()).WithRetryAfter(5)
	case errors.Is(err, build.ErrInvalid), errors.Is(err, build.ErrRefused), errors.Is(err, build.ErrDisabled):
		return NewProblem(ctx, http.StatusBadRequest, err.Error())
	case errors.Is(err, build.ErrNotFound):
		return NewProblem(ctx, http.StatusNotFound, err.Error())
	case errors.Is(err, build.ErrInstall), errors.Is(err, build.ErrUnresolvable), errors.Is(err, build.ErrTimeout),
		errors.Is(err, build.ErrTooLarge), errors.Is(err, build.ErrScan):
		// The packages asked for could not make an environment.
		return NewProblem(ctx, http.StatusUnprocessableEntity, err.Error())
	}
	return NewProblem(ctx, http.StatusInternalServerError, "forge failed (not the request's fault): "+err.Error())
}

func (a *API) authorize(ctx context.Context, scope string) error {
	if a.opts.Authorize == nil {
		return nil
	}
	return a.opts.Authorize(ctx, scope)
}

// Scopes of the endpoints.
const (
	scopeExecute  = profiles.ScopeExecute
	scopeSessions = profiles.ScopeSessions
	scopeEnvs     = profiles.ScopeEnvironments
)
