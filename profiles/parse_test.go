package profiles

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaultValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate(): got %v, want nil", err)
	}
}

func TestDefaultIsDeepCopy(t *testing.T) {
	a := Default()
	a.Images.AllowedPatterns[0] = "evil/*"
	a.Pool.WarmModules[0] = "evil"
	a.MCPTools["x"] = MCPToolServer{Command: "x"}
	a.EnvironmentBuilder.Presets["x"] = Preset{Packages: []string{"x"}}
	a.Execution.MaxPids = 1
	b := Default()
	if diff := cmp.Diff(defaults, b); diff != "" {
		t.Errorf("Default() changed after mutating an earlier copy (-want +got):\n%s", diff)
	}
}

func TestDefaultsYAMLNamesEveryField(t *testing.T) {
	var tree map[string]any
	if err := yaml.Unmarshal(defaultsYAML, &tree); err != nil {
		t.Fatal(err)
	}
	for _, f := range Schema() {
		if strings.Contains(f.Path, "<name>") {
			continue
		}
		var node any = tree
		for _, k := range strings.Split(f.Path, ".") {
			m, _ := node.(map[string]any)
			v, ok := m[k]
			if !ok {
				t.Errorf("defaults.yaml does not set %s", f.Path)
				break
			}
			node = v
		}
	}
}

func TestParseValues(t *testing.T) {
	c, err := Parse([]byte(`
state_dir: /srv/forge
execution:
  default_timeout: 60        # seconds
  max_timeout: "10m"
  max_memory: 4g
  max_pids: "256"            # quoted numbers are fine
server:
  allowed_origins: [https://a.example]
mcp_tools:
  gh:
    command: gh-mcp
    env: {TOKEN: abc}
profiles:
  tight: {memory: 128m}
pool:
  size:                      # null keeps the default
`), nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Default()
	want.StateDir = "/srv/forge"
	want.Execution.DefaultTimeout = Duration(time.Minute)
	want.Execution.MaxTimeout = Duration(10 * time.Minute)
	want.Execution.MaxMemory = 4 << 30
	want.Execution.MaxPids = 256
	want.Server.AllowedOrigins = []string{"https://a.example"}
	want.MCPTools = map[string]MCPToolServer{"gh": {Command: "gh-mcp", Env: map[string]string{"TOKEN": "abc"}}}
	tool := want.MCPTools["gh"]
	tool.setDefaults()
	want.MCPTools["gh"] = tool
	want.Profiles = map[string]Profile{"tight": {Memory: 128 << 20}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "---\n", "~"} {
		c, err := Parse([]byte(in), nil)
		if err != nil {
			t.Errorf("Parse(%q): got %v, want nil", in, err)
			continue
		}
		if diff := cmp.Diff(Default(), c); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", in, diff)
		}
	}
}

func TestSubstitution(t *testing.T) {
	env := envMap(map[string]string{"ADDR": "0.0.0.0:9000", "EMPTY": "", "N": "7", "TOKEN": "s3cr$t"})
	tests := []struct {
		name, in string
		get      func(*Config) any
		want     any
	}{
		{"plain", "server:\n  http_addr: ${ADDR}\n", func(c *Config) any { return c.Server.HTTPAddr }, "0.0.0.0:9000"},
		{"default unused", "server: {http_addr: '${ADDR:-x:1}'}", func(c *Config) any { return c.Server.HTTPAddr }, "0.0.0.0:9000"},
		{"default for unset", "server:\n  name: ${NOPE:-fallback}\n", func(c *Config) any { return c.Server.Name }, "fallback"},
		{"default for empty", "server:\n  name: ${EMPTY:-fallback}\n", func(c *Config) any { return c.Server.Name }, "fallback"},
		{"empty default", "security: {audit_log: \"${NOPE:-}\"}", func(c *Config) any { return c.Security.AuditLog }, ""},
		{"int", "pool:\n  size: ${N}\n", func(c *Config) any { return c.Pool.Size }, 7},
		{"embedded", "server:\n  name: pre-${N}-post\n", func(c *Config) any { return c.Server.Name }, "pre-7-post"},
		{"escaped", "server:\n  name: $${N}\n", func(c *Config) any { return c.Server.Name }, "${N}"},
		{"lone dollar", "server:\n  name: a$b$\n", func(c *Config) any { return c.Server.Name }, "a$b$"},
		{"value not rescanned", "server:\n  name: ${TOKEN}\n", func(c *Config) any { return c.Server.Name }, "s3cr$t"},
		{"map value", "mcp_tools: {gh: {command: x, env: {T: '${TOKEN}'}}}", func(c *Config) any { return c.MCPTools["gh"].Env["T"] }, "s3cr$t"},
		{"list item", "images: {allowed: ['${NOPE:-forge/*}', x]}", func(c *Config) any { return c.Images.AllowedPatterns[0] }, "forge/*"},
	}
	for _, tt := range tests {
		c, err := Parse([]byte(tt.in), env)
		if err != nil {
			t.Errorf("%s: Parse: %v", tt.name, err)
			continue
		}
		if got := tt.get(c); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in string
		is       error
		want     []string // substrings of the error
	}{
		{"unknown field", "execution:\n  timeot: 5\n", ErrUnknownField, []string{"execution.timeot: unknown field (line 2)"}},
		{"unknown section", "exekution: {}\n", ErrUnknownField, []string{"exekution: unknown field"}},
		{"renamed field and its new name", "environment_builder:\n  presets: {a: {packages: [x]}}\n  templates: {b: {packages: [y]}}\n", ErrInvalidValue,
			[]string{"environment_builder.templates: invalid value: set together with environment_builder.presets (line 2), its new name: keep only environment_builder.presets (line 3)"}},
		{"renamed field and its new name, new first", "environment_builder:\n  templates: {b: {packages: [y]}}\n  presets: {a: {packages: [x]}}\n", ErrInvalidValue,
			[]string{"environment_builder.templates:", "environment_builder.presets (line 3)", "keep only environment_builder.presets"}},
		{"retired field", "security:\n  uid_map_base: 100000\n", ErrUnknownField, []string{"security.uid_map_base: unknown field: every sandbox now maps onto its own block", "uid_range_start", "(line 2)"}},
		{"unknown nested in map", "mcp_tools:\n  gh:\n    comand: x\n", ErrUnknownField, []string{"mcp_tools.gh.comand: unknown field (line 3)"}},
		{"unknown in profile", "profiles: {p: {mem: 1g}}", ErrUnknownField, []string{"profiles.p.mem: unknown field"}},
		{"bad int", "pool:\n  size: lots\n", ErrInvalidValue, []string{`pool.size: invalid value: "lots" is not an integer (line 2)`}},
		{"bad bool", "pool: {enabled: maybe}", ErrInvalidValue, []string{`pool.enabled:`, `"maybe"`}},
		{"negative uid", "security: {sandbox_uid: -1}", ErrInvalidValue, []string{`security.sandbox_uid:`, `"-1"`}},
		{"bad size", "execution:\n  max_memory: 2 gigs\n", ErrInvalidValue, []string{`execution.max_memory:`, `"2 gigs" is not a size`, "line 2"}},
		{"bad duration", "sessions: {idle_timeout: soon}", ErrInvalidValue, []string{`sessions.idle_timeout:`, `"soon"`}},
		{"list for scalar", "server: {name: [a]}", ErrInvalidValue, []string{"server.name:", "got a list"}},
		{"scalar for list", "images: {allowed: forge/*}", ErrInvalidValue, []string{"images.allowed:", "want a list"}},
		{"scalar for section", "server: 5", ErrInvalidValue, []string{"server:", "want a mapping"}},
		{"bad list item", "pool: {warm_modules: [json, {a: b}]}", ErrInvalidValue, []string{"pool.warm_modules[1]:"}},
		{"top level not a mapping", "- a\n", ErrInvalidValue, []string{"(top level)"}},
		{"duplicate key", "pool:\n  size: 1\n  size: 2\n", ErrInvalidValue, []string{"pool.size:", "set twice (first on line 2)", "line 3"}},
		{"missing variable", "server:\n  name: x\n  http_addr: ${FORGE_TEST_ADDR}\n", ErrMissingVariable, []string{"server.http_addr:", "FORGE_TEST_ADDR", "line 3"}},
		{"bad variable name", "server: {name: '${1X}'}", ErrInvalidValue, []string{"server.name:", "${1X}"}},
		{"unterminated variable", "server: {name: '${X'}", ErrInvalidValue, []string{"unterminated"}},
		{"two documents", "pool: {}\n---\npool: {}\n", ErrInvalidValue, []string{"one YAML document"}},
		{"yaml syntax", "pool: [\n", ErrInvalidValue, []string{"line"}},
		{"all problems reported", "pool: {size: x}\nexecution: {max_pids: y}\n", ErrInvalidValue, []string{"pool.size", "execution.max_pids"}},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in), nil)
		if err == nil {
			t.Errorf("%s: Parse: got nil error, want %v", tt.name, tt.is)
			continue
		}
		if !errors.Is(err, tt.is) {
			t.Errorf("%s: got %v, want errors.Is %v", tt.name, err, tt.is)
		}
		for _, s := range tt.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: got %q, want it to contain %q", tt.name, err, s)
			}
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := Default()
	c.MCPTools["gh"] = MCPToolServer{Command: "gh", Args: []string{"a"}, Env: map[string]string{"K": "v"}, Timeout: Duration(90 * time.Second), MaxResponseSize: 3000}
	c.Profiles["p"] = Profile{Memory: 1 << 30, CPUs: 0.5, Timeout: Duration(time.Minute)}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(out, nil)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "forge.yaml")
	if err := os.WriteFile(file, []byte("state_dir: /from/file\npool: {size: 3, refill_concurrency: 5}\nserver:\n  name: ${FORGE_TEST_NAME}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FORGE_TEST_NAME", "substituted")
	t.Setenv("FORGE_POOL_SIZE", "4")
	t.Setenv("FORGE_STATE_DIR", "/from/env")
	c, err := Load(file)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"env over file", c.Pool.Size, 4},
		{"env over file (state_dir)", c.StateDir, "/from/env"},
		{"file over default", c.Pool.RefillConcurrency, 5},
		{"default", c.Sessions.MaxConcurrent, 10},
		{"substitution", c.Server.Name, "substituted"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// A config that still says environment_builder.templates (the old name of
// environment_builder.presets) keeps working: its presets apply, and Load
// warns once, naming the new key and the line.
func TestLoadRenamedTemplates(t *testing.T) {
	t.Setenv("FORGE_STATE_DIR", "/x")
	file := filepath.Join(t.TempDir(), "forge.yaml")
	if err := os.WriteFile(file, []byte("environment_builder:\n  max_packages: 20\n  templates:\n    mine:\n      packages: [requests]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	c, err := LoadFor(file, 0, func(msg string) { warnings = append(warnings, msg) })
	if err != nil {
		t.Fatalf("LoadFor: %v", err)
	}
	if got := c.EnvironmentBuilder.Presets["mine"].Packages; !slices.Equal(got, []string{"requests"}) {
		t.Errorf("presets.mine.packages: got %v, want [requests]", got)
	}
	if _, ok := c.EnvironmentBuilder.Presets["data-science"]; !ok {
		t.Errorf("the built-in presets are gone: %v", slices.Sorted(maps.Keys(c.EnvironmentBuilder.Presets)))
	}
	want := "config " + file + ": line 3: environment_builder.templates was renamed environment_builder.presets"
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], want) {
		t.Errorf("warnings: got %q, want one starting %q", warnings, want)
	}

	// Under the new name: no warning.
	if err := os.WriteFile(file, []byte("environment_builder:\n  presets:\n    mine:\n      packages: [requests]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	warnings = nil
	if c, err = LoadFor(file, 0, func(msg string) { warnings = append(warnings, msg) }); err != nil || len(c.EnvironmentBuilder.Presets["mine"].Packages) != 1 || len(warnings) != 0 {
		t.Errorf("presets: got %v, %v, warnings %q; want the preset and no warning", c.EnvironmentBuilder.Presets, err, warnings)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Setenv("FORGE_STATE_DIR", "/x")
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing): got %v, want os.ErrNotExist", err)
	}
	t.Setenv("FORGE_EXECUTION_NETWORK", "true")
	if _, err := Load(""); !errors.Is(err, ErrSecurityInvariant) {
		t.Errorf("Load with FORGE_EXECUTION_NETWORK=true: got %v, want ErrSecurityInvariant", err)
	}
}

func TestDefaultStateDir(t *testing.T) {
	tests := []struct {
		euid int
		env  map[string]string
		want string
	}{
		{0, map[string]string{"XDG_STATE_HOME": "/x"}, "/var/lib/forge"},
		{1000, map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/home/u"}, "/x/forge"},
		{1000, map[string]string{"XDG_STATE_HOME": "rel", "HOME": "/home/u"}, "/home/u/.local/state/forge"},
		{1000, nil, ""},
	}
	for _, tt := range tests {
		got := DefaultStateDir(tt.euid, func(k string) string { return tt.env[k] })
		if got != tt.want {
			t.Errorf("DefaultStateDir(%d, %v): got %v, want %v", tt.euid, tt.env, got, tt.want)
		}
	}
}

func TestParseErrorCap(t *testing.T) {
	in := "mcp_tools:\n" + strings.Repeat("  x: {command: y}\n", 200)
	_, err := Parse([]byte(in), nil)
	if got := len(err.(interface{ Unwrap() []error }).Unwrap()); got != maxErrors+1 {
		t.Errorf("got %v errors, want %v", got, maxErrors+1)
	}
	if !strings.Contains(err.Error(), "and 149 more errors") {
		t.Errorf("got %v, want a count of the errors left out", err)
	}
}

func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("x0: &a0 [" + strings.Repeat("v,", 9) + "v]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "x%d: &a%d [%s*a%d]\n", i, i, strings.Repeat(fmt.Sprintf("*a%d,", i-1), 9), i-1)
	}
	b.WriteString("pool:\n  warm_modules: *a8\n")
	start := time.Now()
	_, err := Parse([]byte(b.String()), nil)
	if err == nil {
		t.Fatal("got nil, want errors")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v, want well under 5s", d)
	}
}
