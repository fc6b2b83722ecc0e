package rest

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
)

// Health is the body of /healthz and /readyz.
type Health struct {
	Status string `json:"status" enum:"ok,unavailable" doc:"ok, or unavailable with the reason in detail."`
	Detail string `json:"detail,omitempty"`
}

type healthOutput struct{ Body Health }

// VersionInfo is GET /api/v1/version.
type VersionInfo struct {
	Version string `json:"version" doc:"forge's version."`
	API     string `json:"api" doc:"API version (v1)."`
}

type versionOutput struct{ Body VersionInfo }

type executeInput struct {
	// Body is execute_python's arguments object; decoded by the same
	// function as over MCP (huma's own validation is skipped for it).
	Body json.RawMessage
}

type executeOutput struct{ Body *kernel.Result }

// Sandbox is one session sandbox of the caller.
type Sandbox struct {
	ID            string    `json:"id" doc:"Session id: pass it as session_id to /execute."`
	Image         string    `json:"image"`
	Status        string    `json:"status" enum:"active,hibernating,hibernated,lost"`
	Created       time.Time `json:"created"`
	LastActive    time.Time `json:"last_active"`
	MemoryBytes   uint64    `json:"memory_bytes"`
	VariableCount int       `json:"variable_count"`
}

// NewSandbox is POST /api/v1/sandboxes.
type NewSandbox struct {
	Image string `json:"image,omitempty" maxLength:"512" doc:"Image or custom environment; empty = images.default."`
}

type newSandboxInput struct{ Body NewSandbox }

// SandboxRef is the created sandbox.
type SandboxRef struct {
	ID string `json:"id"`
}

type sandboxRefOutput struct{ Body SandboxRef }

type sandboxesOutput struct{ Body []Sandbox }

type idInput struct {
	ID string `path:"id" pattern:"^[A-Za-z0-9_-]{1,64}$" doc:"Session (sandbox) id."`
}

// SessionState is a session's documented state and known variables.
type SessionState struct {
	ID         string              `json:"session_id"`
	Image      string              `json:"image"`
	Status     string              `json:"status" enum:"active,hibernating,hibernated,lost"`
	Created    time.Time           `json:"created"`
	LastActive time.Time           `json:"last_active"`
	LostReason string              `json:"lost_reason,omitempty"`
	Documented *session.Documented `json:"documented,omitempty"`
	Variables  []kernel.Variable   `json:"variables"`
}

type stateOutput struct{ Body SessionState }

// DocumentRequest is POST /sessions/{id}/state (document_state).
type DocumentRequest struct {
	Variables map[string]string `json:"variables" doc:"name: description of the variables worth keeping."`
	Note      string            `json:"note,omitempty" maxLength:"4096"`
	Clear     bool              `json:"clear,omitempty" doc:"Replace instead of merging."`
}

type documentInput struct {
	ID   string `path:"id" pattern:"^[A-Za-z0-9_-]{1,64}$" doc:"Session (sandbox) id."`
	Body DocumentRequest
}

type documentedOutput struct{ Body *session.Documented }

type fileInput struct {
	ID   string `path:"id" pattern:"^[A-Za-z0-9_-]{1,64}$" doc:"Session (sandbox) id."`
	Path string `path:"path" maxLength:"4096" doc:"Path relative to /workspace."`
}

type putFileInput struct {
	ID      string `path:"id" pattern:"^[A-Za-z0-9_-]{1,64}$" doc:"Session (sandbox) id."`
	Path    string `path:"path" maxLength:"4096" doc:"Path relative to /workspace."`
	RawBody []byte `contentType:"application/octet-stream"`
}

type fileOutput struct {
	ContentType string `header:"Content-Type"`
	Body        []byte
}

type filesOutput struct{ Body []kernel.FileInfo }

func (a *API) register() {
	o := &a.opts
	huma.Register(a.api, a.op("healthz", http.MethodGet, "/healthz", "Alive", ""),
		func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
			return &healthOutput{Body: Health{Status: "ok"}}, nil
		})
	huma.Register(a.api, a.op("readyz", http.MethodGet, "/readyz", "Ready: image store open, default pool warm", "", http.StatusServiceUnavailable),
		func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
			if o.Ready != nil {
				if err := o.Ready(ctx); err != nil {
					return nil, NewProblem(ctx, http.StatusServiceUnavailable, err.Error())
				}
			}
			return &healthOutput{Body: Health{Status: "ok"}}, nil
		})
	huma.Register(a.api, a.op("version", http.MethodGet, Prefix+"/version", "forge's version", ""),
		func(ctx context.Context, _ *struct{}) (*versionOutput, error) {
			return &versionOutput{Body: VersionInfo{Version: o.Version, API: "v1"}}, nil
		})

	exec := a.op("execute", http.MethodPost, Prefix+"/execute", "Run Python (execute_python)", scopeExecute,
		http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusServiceUnavailable)
	exec.SkipValidateBody = true
	exec.Description += " The body is execute_python's arguments; the reply its ExecutionResult (success false when the code failed: still 200)."
	huma.Register(a.api, exec, func(ctx context.Context, in *executeInput) (*executeOutput, error) {
		if err := a.authorize(ctx, scopeExecute); err != nil {
			return nil, err
		}
		res, err := o.Execute(ctx, in.Body)
		if err != nil {
			return nil, problem(ctx, err)
		}
		return &executeOutput{Body: res}, nil
	})

	huma.Register(a.api, a.op("createSandbox", http.MethodPost, Prefix+"/sandboxes", "Start a session sandbox", scopeSessions,
		http.StatusBadRequest, http.StatusNotFound, http.StatusTooManyRequests, http.StatusServiceUnavailable),
		func(ctx context.Context, in *newSandboxInput) (*sandboxRefOutput, error) {
			if err := a.authorize(ctx, scopeSessions); err != nil {
				return nil, err
			}
			id, err := o.CreateSandbox(ctx, in.Body.Image)
			if err != nil {
				return nil, problem(ctx, err)
			}
			return &sandboxRefOutput{Body: SandboxRef{ID: id}}, nil
		})
	huma.Register(a.api, a.op("listSandboxes", http.MethodGet, Prefix+"/sandboxes", "The caller's session sandboxes", scopeSessions),
		func(ctx context.Context, _ *struct{}) (*sandboxesOutput, error) {
			if err := a.authorize(ctx, scopeSessions); err != nil {
				return nil, err
			}
			infos, err := o.Engine.ListSessions(ctx, o.Principal(ctx))
			if err != nil {
				return nil, problem(ctx, err)
			}
			out := make([]Sandbox, 0, len(infos))
			for _, i := range infos {
				out = append(out, Sandbox{ID: i.ID, Image: i.Image, Status: string(i.Status), Created: i.Created,
					LastActive: i.LastActive, MemoryBytes: i.MemoryBytes, VariableCount: i.VariableCount})
			}
			return &sandboxesOutput{Body: out}, nil
		})
	del := a.op("deleteSandbox", http.MethodDelete, Prefix+"/sandboxes/{id}", "Destroy a session sandbox", scopeSessions, http.StatusNotFound)
	del.DefaultStatus = http.StatusNoContent
	huma.Register(a.api, del, func(ctx context.Context, in *idInput) (*struct{}, error) {
		if err := a.authorize(ctx, scopeSessions); err != nil {
			return nil, err
		}
		if err := o.Engine.DestroySession(ctx, o.Principal(ctx), in.ID); err != nil {
			return nil, problem(ctx, err)
		}
		return nil, nil
	})

	huma.Register(a.api, a.op("getState", http.MethodGet, Prefix+"/sessions/{id}/state", "A session's documented state and variables", scopeSessions, http.StatusNotFound),
		func(ctx context.Context, in *idInput) (*stateOutput, error) {
			if err := a.authorize(ctx, scopeSessions); err != nil {
				return nil, err
			}
			m, err := o.Engine.SessionState(ctx, o.Principal(ctx), in.ID)
			if err != nil {
				return nil, problem(ctx, err)
			}
			st := SessionState{ID: m.ID, Image: m.Image, Status: string(m.Status), Created: m.Created, LastActive: m.LastActive,
				LostReason: m.LostReason, Documented: m.Documented, Variables: m.Variables}
			if st.Variables == nil {
				st.Variables = []kernel.Variable{}
			}
			return &stateOutput{Body: st}, nil
		})
	huma.Register(a.api, a.op("documentState", http.MethodPost, Prefix+"/sessions/{id}/state", "Document a session's state (document_state)", scopeSessions,
		http.StatusBadRequest, http.StatusNotFound),
		func(ctx context.Context, in *documentInput) (*documentedOutput, error) {
			if err := a.authorize(ctx, scopeSessions); err != nil {
				return nil, err
			}
			d, err := o.Engine.DocumentState(ctx, o.Principal(ctx), in.ID, in.Body.Variables, in.Body.Note, in.Body.Clear)
			if err != nil {
				return nil, problem(ctx, err)
			}
			return &documentedOutput{Body: d}, nil
		})

	huma.Register(a.api, a.op("listFiles", http.MethodGet, Prefix+"/sessions/{id}/files", "Files of a session's /workspace", scopeSessions, http.StatusNotFound),
		func(ctx context.Context, in *idInput) (*filesOutput, error) {
			if err := a.authorize(ctx, scopeSessions); err != nil {
				return nil, err
			}
			fs, err := o.Engine.ListFiles(ctx, o.Principal(ctx), in.ID)
			if err != nil {
				return nil, problem(ctx, err)
			}
			if fs == nil {
				fs = []kernel.FileInfo{}
			}
			return &filesOutput{Body: fs}, nil
		})
	put := a.op("putFile", http.MethodPut, Prefix+"/sessions/{id}/files/{path...}", "Write a file into a session's /workspace", scopeSessions,
		http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge)
	put.MaxBodyBytes = o.MaxFile
	put.DefaultStatus = http.StatusNoContent
	huma.Register(a.api, put, func(ctx context.Context, in *putFileInput) (*struct{}, error) {
		if err := a.authorize(ctx, scopeSessions); err != nil {
			return nil, err
		}
		if err := o.Engine.WriteFile(ctx, o.Principal(ctx), in.ID, in.Path, in.RawBody); err != nil {
			return nil, problem(ctx, err)
		}
		return nil, nil
	})
	huma.Register(a.api, a.op("getFile", http.MethodGet, Prefix+"/sessions/{id}/files/{path...}", "Read a file of a session's /workspace", scopeSessions,
		http.StatusBadRequest, http.StatusNotFound),
		func(ctx context.Context, in *fileInput) (*fileOutput, error) {
			if err := a.authorize(ctx, scopeSessions); err != nil {
				return nil, err
			}
			b, err := o.Engine.ReadFile(ctx, o.Principal(ctx), in.ID, in.Path)
			if err != nil {
				return nil, problem(ctx, err)
			}
			return &fileOutput{ContentType: "application/octet-stream", Body: b}, nil
		})
	delFile := a.op("deleteFile", http.MethodDelete, Prefix+"/sessions/{id}/files/{path...}", "Remove a file of a session's /workspace", scopeSessions,
		http.StatusBadRequest, http.StatusNotFound)
	delFile.DefaultStatus = http.StatusNoContent
	huma.Register(a.api, delFile, func(ctx context.Context, in *fileInput) (*struct{}, error) {
		if err := a.authorize(ctx, scopeSessions); err != nil {
			return nil, err
		}
		if err := o.DeleteFile(ctx, in.ID, in.Path); err != nil {
			return nil, problem(ctx, err)
		}
		return nil, nil
	})
}
