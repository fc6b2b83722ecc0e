package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
)

const toolBuild = "build_custom_environment"

// BuildArgs are the decoded arguments of build_custom_environment.
type BuildArgs struct {
	Name        string   `json:"name"`
	Packages    []string `json:"packages"`
	Preset      string   `json:"preset"`
	BaseImage   string   `json:"base_image"`
	Description string   `json:"description"`
	// ViaTemplate: the preset came as template, its old name, which is
	// still accepted for now but not in the tool's schema.
	ViaTemplate bool `json:"-"`
}

// wireBuildArgs is the JSON form of BuildArgs, with template (preset's
// old name: "template" means a zygote template only).
type wireBuildArgs struct {
	BuildArgs
	Template string `json:"template"`
}

// maxBuildPackages bounds the packages list before the policy (whose
// environment_builder.max_packages is the real limit) sees it.
const maxBuildPackages = 1000

// DecodeBuildArgs decodes and checks the form of build_custom_environment's
// arguments; the name's and the specs' rules are the builder's (tool errors).
func DecodeBuildArgs(raw []byte) (BuildArgs, error) {
	var w wireBuildArgs
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		msg := describeJSONError(err)
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			msg = "unknown field " + f + "; known fields: name, packages, preset, base_image, description"
		}
		return w.BuildArgs, argError("", msg)
	}
	if _, err := dec.Token(); err != io.EOF {
		return w.BuildArgs, argError("", "trailing data after the arguments object")
	}
	a := w.BuildArgs
	if w.Template != "" {
		if a.Preset != "" {
			return a, argError("template", "is the old name of preset, and both are given; give preset only")
		}
		a.Preset, a.ViaTemplate = w.Template, true
	}
	a.Name = strings.TrimSpace(a.Name)
	if a.Name == "" {
		return a, argError("name", "is required (letters, digits and hyphens, at most 63 characters)")
	}
	if len(a.Packages) > maxBuildPackages {
		return a, argError("packages", fmt.Sprintf("has %d entries; at most %d", len(a.Packages), maxBuildPackages))
	}
	if len(a.Packages) == 0 && strings.TrimSpace(a.Preset) == "" {
		return a, argError("packages", "is required unless preset names a preset (environment_builder.presets)")
	}
	return a, nil
}

func buildTool(s *Server) mcp.Tool {
	b := s.cfg.EnvironmentBuilder
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name": map[string]any{"type": "string", "pattern": "^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$",
				"description": "Name of the environment: letters, digits and hyphens, at most 63. Use it as execute_python's custom_image afterwards."},
			"packages": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "maxItems": b.MaxPackages,
				"description": fmt.Sprintf("PEP 508 requirements such as \"requests>=2.31\" or \"pandas[excel]==2.2.*\"; at most %d with the preset's.", b.MaxPackages)},
			"preset": map[string]any{"type": "string", "description": environmentDescription(s.cfg) + " Its packages come first; packages adds to them."},
			"base_image": map[string]any{"type": "string",
				"description": fmt.Sprintf("Image to build on (default %q); see forge://environments/list.", orDefault(b.BaseImage, s.cfg.Images.Default))},
			"description": map[string]any{"type": "string", "maxLength": 1000, "description": "What the environment is for (shown in forge://environments/list)."},
		},
		"required":             []string{"name"},
		"additionalProperties": false,
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		panic(err) // static data
	}
	desc := "Install Python packages into a new custom environment (an image, forge/custom:NAME) and return what got installed. " +
		"Packages are checked against forge's package policy before anything runs, installed with uv from the configured index in a sandbox, and cached: the same packages on the same base are reused at once. " +
		fmt.Sprintf("A build may take minutes (at most %s); progress is reported. Then run code in it with execute_python's custom_image set to the name.", b.BuildTimeout)
	if b.Approval == "elicit" && len(b.ApprovalPackages) > 0 {
		desc += " Some packages need the user's approval: the user is asked (elicitation) before the build starts."
	}
	t := mcp.NewToolWithRawSchema(toolBuild, desc, raw)
	t.Title = "Build a custom Python environment"
	f, tr := false, true
	t.Annotations = mcp.ToolAnnotation{Title: t.Title, ReadOnlyHint: &f, DestructiveHint: &f, IdempotentHint: &tr, OpenWorldHint: &tr}
	return t
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func (s *Server) addBuildTool() {
	if !s.cfg.EnvironmentBuilder.Enabled {
		return
	}
	s.mcp.AddTool(buildTool(s), s.handleBuild)
}

func (s *Server) handleBuild(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	s.active.Add(1)
	defer s.active.Done()
	d, err := argsOf(ctx, req)
	if err != nil {
		return nil, err
	}
	a := d.build
	if a.ViaTemplate {
		s.log.Warn("build_custom_environment: argument template is the old name of preset; it still works for now", "client", clientName(ctx))
	}
	ectx, cancel := s.execContext(ctx)
	defer cancel()
	res, err := s.eng.BuildEnvironment(ectx, s.principal(ctx), build.Request{
		Client: clientName(ctx), Name: a.Name, Packages: a.Packages, Preset: a.Preset,
		BaseImage: a.BaseImage, Description: a.Description, Progress: progressTo(ctx, req), Approver: elicitApprover{s},
	})
	if err != nil {
		return s.buildError(err), nil
	}
	summary := fmt.Sprintf("Built %s in %s: %d package(s) installed. Run code in it with execute_python custom_image=%q.",
		res.Image, res.Duration.Round(time.Millisecond), len(res.Installed), res.Name)
	if res.Cached {
		summary = fmt.Sprintf("%s was already built with these packages (cache hit); run code in it with execute_python custom_image=%q.", res.Image, res.Name)
	}
	summary += " " + res.Scan + "."
	return jsonResult(summary, res)
}

// buildError is the tool error of a failed build: what to change for a
// refusal, when to retry for a limit, else forge's failure.
func (s *Server) buildError(err error) *mcp.CallToolResult {
	var rl *build.RateLimitError
	var refused *engine.RefusedError
	switch {
	case errors.As(err, &rl):
		r := mcp.NewToolResultError(fmt.Sprintf("Not built (429 Too Many Requests): %v.", err))
		r.StructuredContent = map[string]any{"error": "rate_limited", "retry_after_seconds": int(rl.RetryAfter.Seconds()) + 1}
		return r
	case errors.Is(err, build.ErrBusy):
		return mcp.NewToolResultError("Not built: " + err.Error() + ".")
	case errors.As(err, &refused):
		return mcp.NewToolResultError("Build refused: " + strings.TrimPrefix(refused.Error(), engine.ErrInvalidRequest.Error()+": "))
	case errors.Is(err, build.ErrTimeout), errors.Is(err, build.ErrInstall), errors.Is(err, build.ErrNoSpace):
		return mcp.NewToolResultError("Build failed: " + err.Error())
	case errors.Is(err, context.Canceled):
		return mcp.NewToolResultError("The build was cancelled before it finished; nothing was kept.")
	}
	s.log.Error("build failed", "err", err)
	return mcp.NewToolResultError("forge could not build the environment (an error of forge, not of the request): " + err.Error())
}

// progressTo sends each step as an MCP progress notification when the
// request asked for them (a progressToken in _meta); nil otherwise.
func progressTo(ctx context.Context, req mcp.CallToolRequest) func(step, total int, message string) {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return nil
	}
	token := req.Params.Meta.ProgressToken
	srv := mcpserver.ServerFromContext(ctx)
	if srv == nil {
		return nil
	}
	return func(step, total int, message string) {
		// A client that went away misses the rest; the build goes on.
		_ = srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": token, "progress": step, "total": total, "message": message})
	}
}
