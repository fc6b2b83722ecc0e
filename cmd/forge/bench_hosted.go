package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
)

// benchToolsPy is the hosted tools module forge bench calls.
const benchToolsPy = `from forge_tools import tool

@tool
def add(a: int, b: int = 1) -> int:
    """Adds two integers."""
    return a + b
`

// benchHosted measures a hosted tool called back to back beside warm
// execute_python runs back to back, in one engine and interleaved, and
// the first call of each after 1 s idle (hosted.Bench), with the
// configured pools. Each hosted row's RatioExec is its p50 over its
// execute_python row's (targets: 1.2 back to back, 1.5 after idle).
func benchHosted(ctx context.Context, g *globals, cfg *profiles.Config, runs int) ([]benchRow, error) {
	dir, err := os.MkdirTemp("", "forge-bench-tools-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tools.py")
	if err := os.WriteFile(path, []byte(benchToolsPy), 0o644); err != nil {
		return nil, err
	}
	hcfg := *cfg
	hcfg.Pool.Enabled = true
	eng, err := engine.New(ctx, engine.Options{Config: &hcfg, Logger: g.log})
	if err != nil {
		return nil, fmt.Errorf("bench of hosted tools: %w", err)
	}
	defer eng.Close(time.Second)
	tc := hcfg.HostedTools
	tc.Path, tc.ReloadInterval = path, 0
	h, err := hosted.New(ctx, hosted.Options{Engine: eng, Config: tc, StateDir: hcfg.StateDir, Logger: g.log})
	if err != nil {
		return nil, fmt.Errorf("bench of hosted tools: %w", err)
	}
	defer h.Close()
	per := 20
	f, err := hosted.Bench(ctx, eng, h, engine.LocalPrincipal, "add", json.RawMessage(`{"a": 2, "b": 3}`), "2 + 3",
		max(runs/per, 2), per, max(runs/40, 3), time.Second)
	if err != nil {
		return nil, fmt.Errorf("bench of hosted tools: %w", err)
	}
	row := func(name string, d []time.Duration) benchRow {
		r := summarize(d, len(d), 0)
		r.Name = name
		return r
	}
	b2b, x2b := row("hosted tool, back to back", f.Hosted), row("execute_python beside it, back to back", f.Exec)
	idle, xidle := row("hosted tool, first call after 1 s idle", f.HostedIdle), row("execute_python beside it, first call after 1 s idle", f.ExecIdle)
	if x2b.P50MS > 0 {
		b2b.RatioExec = b2b.P50MS / x2b.P50MS
	}
	if xidle.P50MS > 0 {
		idle.RatioExec = idle.P50MS / xidle.P50MS
	}
	return []benchRow{b2b, x2b, idle, xidle}, nil
}
