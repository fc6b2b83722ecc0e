package hosted_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// A hosted call is audited with the sha256 of its arguments, never the
// arguments.
func TestHostedCallAudited(t *testing.T) {
	testutil.RequiresRoot(t)
	logPath := filepath.Join(t.TempDir(), "audit.log")
	al, err := audit.Open(logPath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	cfg := profiles.Default()
	cfg.StateDir = testutil.StateDir(t)
	cfg.Pool.Enabled = false
	eng, err := engine.New(context.Background(), engine.Options{Config: cfg, Audit: al})
	if err != nil {
		t.Fatal(err)
	}
	testenv.ImportImages(t, eng.Store(), false)
	t.Cleanup(func() {
		if err := eng.Close(5 * time.Second); err != nil {
			t.Errorf("engine.Close: %v", err)
		}
	})
	path := filepath.Join(t.TempDir(), "tools.py")
	if err := os.WriteFile(path, []byte("from forge_tools import tool\n\n@tool\ndef echo(text: str) -> str:\n    return 'ok'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hc := cfg.HostedTools
	hc.Path, hc.PoolSize, hc.ReloadInterval = path, 0, 0
	h, err := hosted.New(context.Background(), hosted.Options{Engine: eng, Config: hc, StateDir: cfg.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	const secret = "do-not-log-this-argument"
	args := `{"text":"` + secret + `"}`
	if r, err := h.Call(context.Background(), engine.LocalPrincipal, "echo", json.RawMessage(args)); err != nil || r.IsError {
		t.Fatalf("echo: %+v, %v", r, err)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if strings.Contains(log, secret) {
		t.Fatalf("the audit log holds the arguments:\n%s", log)
	}
	if !strings.Contains(log, `"tool":"echo"`) || !strings.Contains(log, audit.CodeHash(args)) {
		t.Fatalf("the audit log lacks the call or its arguments' hash:\n%s", log)
	}
}
