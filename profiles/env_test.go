package profiles

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestApplyEnv(t *testing.T) {
	c := Default()
	err := ApplyEnv(c, []string{
		"FORGE_EXECUTION_DEFAULT_TIMEOUT=60",
		"FORGE_EXECUTION_MAX_MEMORY=4g",
		"FORGE_EXECUTION_DEFAULT_CPUS=0.5",
		"FORGE_POOL_SIZE=4",
		"FORGE_POOL_ENABLED=false",
		"FORGE_STATE_DIR=/srv/forge",
		"FORGE_SERVER_HTTP_ADDR=0.0.0.0:9000",
		"FORGE_SECURITY_SANDBOX_UID=2000",
		"FORGE_IMAGES_ALLOWED=forge/*, ghcr.io/me/*,",
		"FORGE_ENVIRONMENT_BUILDER_ENABLED=true",
		"FORGE_CONFIG=/etc/forge.yaml", // not a setting: ignored
		"PATH=/bin",
		"NOEQUALS",
	})
	if err != nil {
		t.Fatalf("ApplyEnv: %v", err)
	}
	want := Default()
	want.Execution.DefaultTimeout = Duration(time.Minute)
	want.Execution.MaxMemory = 4 << 30
	want.Execution.DefaultCPUs = 0.5
	want.Pool.Size = 4
	want.Pool.Enabled = false
	want.StateDir = "/srv/forge"
	want.Server.HTTPAddr = "0.0.0.0:9000"
	want.Security.SandboxUID = 2000
	want.Images.AllowedPatterns = []string{"forge/*", "ghcr.io/me/*"}
	want.EnvironmentBuilder.Enabled = true
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("ApplyEnv (-want +got):\n%s", diff)
	}
}

func TestApplyEnvErrors(t *testing.T) {
	tests := []struct {
		kv   string
		is   error
		want string
	}{
		{"FORGE_POOL_SIZE=four", ErrInvalidValue, `FORGE_POOL_SIZE (pool.size): invalid value: "four" is not an integer`},
		{"FORGE_EXECUTION_MAX_MEMORY=lots", ErrInvalidValue, `FORGE_EXECUTION_MAX_MEMORY (execution.max_memory):`},
		{"FORGE_SESSIONS_IDLE_TIMEOUT=soon", ErrInvalidValue, `FORGE_SESSIONS_IDLE_TIMEOUT (sessions.idle_timeout):`},
		{"FORGE_EXECUTION_TIMEOT=5", ErrUnknownField, "FORGE_EXECUTION_TIMEOT (execution.timeot): unknown field"},
		{"FORGE_MCP_TOOLS_GH_COMMAND=x", ErrUnknownField, "FORGE_MCP_TOOLS_GH_COMMAND (mcp_tools):"},
		{"FORGE_PROFILES_X_MEMORY=1g", ErrUnknownField, "FORGE_PROFILES_X_MEMORY (profiles):"},
		{"FORGE_ENVIRONMENT_BUILDER_PRESETS=x", ErrUnknownField, "FORGE_ENVIRONMENT_BUILDER_PRESETS (environment_builder.presets): unknown field: environment_builder.presets cannot be set from the environment"},
		{"FORGE_ENVIRONMENT_BUILDER_TEMPLATES=x", ErrUnknownField, "FORGE_ENVIRONMENT_BUILDER_TEMPLATES (environment_builder.presets): unknown field: renamed environment_builder.presets, which cannot be set from the environment either"},
	}
	for _, tt := range tests {
		err := ApplyEnv(Default(), []string{tt.kv})
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ApplyEnv(%q): got %v, want %v containing %q", tt.kv, err, tt.is, tt.want)
		}
	}
}

// Every scalar field outside the maps has exactly one variable, and the
// derivation from the path is collision-free.
func TestEnvVarPerField(t *testing.T) {
	seen := map[string]string{}
	for _, f := range Schema() {
		if f.Type == "section" || f.Type == "map of sections" || strings.Contains(f.Path, "<name>") || strings.HasPrefix(f.Type, "map") {
			if f.Env != "" {
				t.Errorf("%s: got env %v, want none", f.Path, f.Env)
			}
			continue
		}
		if f.Env != EnvVar(f.Path) {
			t.Errorf("%s: got env %v, want %v", f.Path, f.Env, EnvVar(f.Path))
		}
		if other, dup := seen[f.Env]; dup {
			t.Errorf("%s and %s share %s", f.Path, other, f.Env)
		}
		seen[f.Env] = f.Path
		if _, ok := envSettings()[f.Env]; !ok {
			t.Errorf("%s: %s is not applied by ApplyEnv", f.Path, f.Env)
		}
	}
	if len(seen) != len(envSettings()) {
		t.Errorf("got %v env settings, want %v", len(envSettings()), len(seen))
	}
}
