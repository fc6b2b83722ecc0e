package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/server/tenant"
)

const toolExecute = "execute_python"

// executeTool declares execute_python with the limits of cfg in its
// description and input schema.
func executeTool(cfg *profiles.Config) mcp.Tool {
	t := mcp.NewToolWithRawSchema(toolExecute, toolDescription(cfg), inputSchema(cfg))
	t.Title = "Run Python in a sandbox"
	t.RawOutputSchema = outputSchema
	t.Meta = appToolMeta() // the MCP App that renders the result (app.go)
	f := false
	// Sandboxes have no network, unless egress is configured: then code
	// reaches the hosts the allowlist names.
	pol, err := cfg.EgressPolicy("")
	open := err == nil && !pol.IsNone()
	t.Annotations = mcp.ToolAnnotation{
		Title: "Run Python in a sandbox",
		// The code may write files in its sandbox and, with sessions, change
		// state that later calls see: not read-only.
		ReadOnlyHint: &f,
		// Nothing outside the sandbox is touched.
		DestructiveHint: &f,
		// Code may be random, time-dependent or stateful.
		IdempotentHint: &f,
		OpenWorldHint:  &open,
	}
	return t
}

func toolDescription(cfg *profiles.Config) string {
	x := cfg.Execution
	var b strings.Builder
	b.WriteString("Run Python 3 code in a fresh, isolated sandbox and get back its stdout, stderr, the value of the last expression, rich displays (matplotlib figures and display() output come back as images) and any error with its traceback.\n\n")
	b.WriteString("Each call without session_id is stateless: a new interpreter, nothing kept afterwards. With session_id (or backend \"jupyter\") variables, imports and /workspace files persist between calls. ")
	b.WriteString("The sandbox has no network access and a read-only filesystem except /tmp and /workspace. ")
	fmt.Fprintf(&b, "Limits in force: timeout %s by default, at most %s; memory %s by default, at most %s; CPUs %g by default, at most %g; at most %d processes; code up to %s; stdout and stderr are each cut at %s.\n",
		x.DefaultTimeout, x.MaxTimeout, x.DefaultMemory, x.MaxMemory, x.DefaultCPUs, x.MaxCPUs, x.MaxPids, x.MaxCodeSize, x.OutputLimit)
	fmt.Fprintf(&b, "Images: %q by default", cfg.Images.Default)
	if cfg.Images.Data != "" {
		fmt.Fprintf(&b, "; %q has numpy, pandas and matplotlib (pass it as custom_image)", cfg.Images.Data)
	}
	fmt.Fprintf(&b, "; allowed: %s.", strings.Join(cfg.Images.AllowedPatterns, ", "))
	return b.String()
}

func environmentDescription(cfg *profiles.Config) string {
	b := cfg.EnvironmentBuilder
	names := slices.Sorted(maps.Keys(b.Presets))
	if len(names) == 0 {
		return "Name of a preset (a named package list); none is configured."
	}
	d := fmt.Sprintf("Name of a preset (a named package list) to run in (%s): its packages are installed into a custom environment", strings.Join(names, ", "))
	if b.Enabled {
		return d + ", built on first use (that call takes longer and reports progress), reused afterwards. Give custom_image or environment, not both."
	}
	return d + " built beforehand with `forge env build`. Give custom_image or environment, not both."
}

func inputSchema(cfg *profiles.Config) json.RawMessage {
	x := cfg.Execution
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"code": map[string]any{"type": "string", "minLength": 1,
				"description": fmt.Sprintf("Python source to run (at most %s). The value of the last expression is returned as result.", x.MaxCodeSize)},
			"session_id": map[string]any{"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$",
				"description": fmt.Sprintf("Run in this stateful session: variables, imports, functions and /workspace files persist between calls. Created on first use; at most %d live at once; idle sessions are hibernated after %s and restored on their next call.", cfg.Sessions.MaxConcurrent, cfg.Sessions.IdleTimeout)},
			"backend": map[string]any{"type": "string", "enum": []string{BackendSimple, BackendJupyter},
				"description": "simple (default): stateless unless session_id is given. jupyter: stateful; without session_id a new session is created and its id returned in session_id."},
			"timeout": map[string]any{"type": "number", "exclusiveMinimum": 0,
				"description": fmt.Sprintf("Wall-clock limit in seconds (default %g, at most %g).", x.DefaultTimeout.Seconds(), x.MaxTimeout.Seconds())},
			"memory": str(fmt.Sprintf("Memory limit such as \"256m\" or \"1g\" (default %s, at most %s).", x.DefaultMemory, x.MaxMemory)),
			"custom_image": str(fmt.Sprintf("Image or custom environment (from build_custom_environment) to run in (default %q; allowed images: %s). See forge://environments/list.",
				cfg.Images.Default, strings.Join(cfg.Images.AllowedPatterns, ", "))),
			"environment": str(environmentDescription(cfg)),
			"env": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"},
				"description": "Environment variables for the code (os.environ, inherited by its child processes): at most 64, names of letters, digits and _, values up to 4096 bytes. In a session they stay set."},
			"mcp_tools": map[string]any{"type": "array", "items": map[string]any{"type": "string"},
				"description": "Names of tools (from forge://tools/available) to make callable inside the sandbox as Python functions and in the module mcp_tools (code mode). Their credentials stay on the host."},
			"egress": map[string]any{"type": "array", "items": map[string]any{"type": "string"},
				"description": fmt.Sprintf("Narrow the network egress this run may use (through HTTP_PROXY/HTTPS_PROXY; there is no DNS): rules host[:port,...], *.suffix, IPs or CIDRs, each within what forge allows: %s. [] allows nothing. For a session it becomes the session's policy.", egressDesc(cfg))},
		},
		"required":             []string{"code"},
		"additionalProperties": false,
	}
	b, err := json.Marshal(schema)
	if err != nil {
		panic(err) // static data
	}
	return b
}

// handleExecute runs execute_python. Arguments were decoded by preflight on
// the way in; a decode error here (an in-process caller that bypassed
// HandleMessage) is still reported as an error, never run.
func (s *Server) handleExecute(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	s.active.Add(1)
	defer s.active.Done()
	d, err := argsOf(ctx, req)
	if err != nil {
		return nil, err
	}
	args := d.execute
	ectx, cancel := s.execContext(ctx)
	defer cancel()
	report, stopProgress := s.progress(ctx, req)
	res, err := s.execute(ectx, s.executeRequest(ctx, args, report))
	stopProgress()
	if s.cancelledByClient(ctx, args.SessionID) {
		return nil, errCancelled
	}
	if err != nil {
		return s.executeError(err), nil
	}
	return s.render(ctx, res), nil
}

// executeError turns an engine error into a tool error for the model: a
// refusal (*engine.RefusedError: a broken limit or allowlist, an unknown
// image or session, …) says what was wrong and what is allowed; anything
// else is forge's fault and says so.
func (s *Server) executeError(err error) *mcp.CallToolResult {
	var refused *engine.RefusedError
	var limited *tenant.LimitError
	switch {
	case errors.As(err, &limited):
		return mcp.NewToolResultError("Not run: " + limited.Error() + ". Your code did not start.")
	case errors.Is(err, engine.ErrBusy):
		return mcp.NewToolResultError("Not run: " + err.Error() + ". Your code did not start; send the same call again.")
	case errors.As(err, &refused):
		msg := "Request refused: " + strings.TrimPrefix(refused.Error(), engine.ErrInvalidRequest.Error()+": ")
		if errors.Is(err, rootfs.ErrImageNotFound) || errors.Is(err, rootfs.ErrBadReference) {
			msg += "; forge://environments/list lists the images present"
		}
		return mcp.NewToolResultError(msg)
	case errors.Is(err, engine.ErrClosed):
		return mcp.NewToolResultError("forge is shutting down; no new executions are accepted")
	case errors.Is(err, context.Canceled):
		return mcp.NewToolResultError("The execution was cancelled before it finished.")
	}
	s.log.Error("execution failed", "err", err)
	return mcp.NewToolResultError("forge could not run the code (an error of the sandbox, not of your code): " + err.Error())
}

// clientName is the MCP client's name from initialize, for the audit log.
func clientName(ctx context.Context) string {
	if sess, ok := mcpserver.ClientSessionFromContext(ctx).(mcpserver.SessionWithClientInfo); ok {
		info := sess.GetClientInfo()
		if info.Version != "" {
			return info.Name + "/" + info.Version
		}
		return info.Name
	}
	return ""
}

// displayContent maps one display item to MCP content; nil when it has no
// useful MCP form (it stays in structuredContent).
func displayContent(i int, d kernel.Display) mcp.Content {
	switch mt := strings.ToLower(d.MimeType); {
	case mt == "image/png" || mt == "image/jpeg" || mt == "image/gif" || mt == "image/webp":
		return mcp.NewImageContent(d.Data, mt)
	case mt == "image/svg+xml" || mt == "text/html":
		ext := map[string]string{"image/svg+xml": "svg", "text/html": "html"}[mt]
		return mcp.NewEmbeddedResource(mcp.TextResourceContents{
			URI: fmt.Sprintf("forge://display/%d.%s", i, ext), MIMEType: mt, Text: d.Data})
	case strings.HasPrefix(mt, "text/") || mt == "application/json":
		return mcp.NewTextContent(d.Data)
	}
	return nil
}

// resultText is the text a model reads: output first, then the result, the
// error, and notes about limits that cut the run short.
func resultText(r *kernel.Result) string {
	var b strings.Builder
	section := func(title, body string) {
		if body == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s:\n%s", title, strings.TrimRight(body, "\n"))
		b.WriteString("\n")
	}
	section("stdout", r.Stdout)
	section("stderr", r.Stderr)
	if r.Result != nil {
		section("result", formatValue(r.Result))
	}
	if e := r.Error; e != nil {
		tb := e.Traceback
		if tb == "" {
			tb = e.Type + ": " + e.Message
		}
		section("error", tb)
	}
	notes := append([]string(nil), r.Notes...)
	if n := countImages(r.Display); n > 0 {
		notes = append(notes, fmt.Sprintf("%d image(s) attached below.", n))
	}
	if r.Truncated {
		notes = append(notes, "Output was truncated at the configured limit; print less (e.g. summaries, head()) or write large data to a file and print a summary.")
	}
	if r.TimedOut && r.SessionID != nil && r.ExitCode != 137 {
		notes = append(notes, "The code was interrupted at its timeout; the session's variables are kept.")
	} else if r.TimedOut {
		notes = append(notes, fmt.Sprintf("The run was killed: it exceeded its timeout (ran %.0f ms). Make the code faster or pass a larger timeout (up to the maximum).", r.ExecutionTimeMS))
	}
	if r.OOMKilled {
		notes = append(notes, "The run was killed: it ran out of memory. Use less memory or pass a larger memory limit (up to the maximum).")
	}
	if !r.Success && r.Error == nil && !r.TimedOut && !r.OOMKilled {
		notes = append(notes, fmt.Sprintf("The process exited with code %d.", r.ExitCode))
	}
	section("note", strings.Join(notes, "\n"))
	if b.Len() == 0 {
		return "(no output; the code ran successfully and printed nothing; the last line was not an expression with a value)"
	}
	return strings.TrimRight(b.String(), "\n")
}

func countImages(ds []kernel.Display) int {
	n := 0
	for _, d := range ds {
		if strings.HasPrefix(strings.ToLower(d.MimeType), "image/") && d.MimeType != "image/svg+xml" {
			n++
		}
	}
	return n
}

// formatValue shows a result value: strings (often reprs) as they are,
// anything else as JSON.
func formatValue(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// egressDesc is the default profile's egress allowlist for the tool's schema.
func egressDesc(cfg *profiles.Config) string {
	pol, err := cfg.EgressPolicy("")
	if err != nil || pol.IsNone() {
		return "none (no egress is configured)"
	}
	return strings.Join(pol.Strings(), ", ")
}
