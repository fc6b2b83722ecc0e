package deploy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
)

// TestExampleConfigs loads every example with forge's own parser and
// validation, then checks that each says what its comment promises.
func TestExampleConfigs(t *testing.T) {
	env := func(name string) (string, bool) {
		switch name {
		case "FORGE_OPS_TOKEN_SHA256", "FORGE_AGENTS_TOKEN_SHA256", "FORGE_CI_TOKEN_SHA256":
			return testTokenSHA256, true
		}
		return "", false
	}
	load := func(name string) *profiles.Config {
		data, err := os.ReadFile(filepath.Join("examples", name))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := profiles.Parse(data, env)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return cfg
	}
	files, _ := filepath.Glob("examples/*.yaml")
	if len(files) != 3 {
		t.Fatalf("examples: %v, want development, production and high-concurrency", files)
	}

	dev := load("development.yaml")
	must(t, dev.Server.Transport == "stdio", "development: transport %s", dev.Server.Transport)

	prod := load("production.yaml")
	must(t, prod.Server.Transport == "http" && len(prod.Server.Auth.Tokens) == 3, "production: http with three tokens")
	must(t, prod.Security.AuditLog != "" && prod.Security.AuditMaxBackups > 0, "production: a rotated audit log")
	must(t, prod.Server.Tenants.Overrides["ci"].MaxConcurrent == 8, "production: the ci tenant's override")
	must(t, time.Duration(prod.Sessions.IdleTimeout) == 30*time.Minute, "production: idle timeout")
	_, err := profiles.Parse(mustRead(t, "examples/production.yaml"), func(string) (string, bool) { return "", false })
	must(t, err != nil, "production.yaml loads without its token hashes")

	hc := load("high-concurrency.yaml")
	must(t, hc.Execution.MaxConcurrent >= 32 && hc.Pool.Size >= 16, "high-concurrency: concurrency %d, pool %d", hc.Execution.MaxConcurrent, hc.Pool.Size)
	must(t, hc.Limits.MaxSandboxes >= hc.Execution.MaxConcurrent+hc.Sessions.MaxConcurrent, "high-concurrency: max_sandboxes %d below executions + sessions", hc.Limits.MaxSandboxes)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
