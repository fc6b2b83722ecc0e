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
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/tenant"
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
		op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden)
	}
	return op
}

// problem maps an error to a Problem for the request in ctx.
func problem(ctx context.Context, err error) error {
	var p *Problem
	var lim *tenant.LimitError
	var refused *engine.RefusedError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &lim):
		p = NewProblem(ctx, http.StatusTooManyRequests, lim.Error())
		if lim.RetryAfter > 0 {
			p.WithRetryAfter(lim.RetrySeconds())
		}
		return p
	case errors.As(err, &refused):
		switch refused.Kind {
		case engine.RefusedNotFound:
			return NewProblem(ctx, http.StatusNotFound, refused.Error())
		case engine.RefusedLimit:
			return NewProblem(ctx, http.StatusTooManyRequests, refused.Error())
		case engine.RefusedBusy:
			return NewProblem(ctx, http.StatusServiceUnavailable, refused.Error()).WithRetryAfter(1)
		}
		return NewProblem(ctx, http.StatusBadRequest, refused.Error())
	case errors.Is(err, engine.ErrClosed):
		return NewProblem(ctx, http.StatusServiceUnavailable, err.Error())
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
)
