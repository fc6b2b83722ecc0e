package configured

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/cmd/forge/internal/early"
)

// Load answers for what cmd/forge would serve on stdio, and nothing for
// what it would stop on or serve over HTTP.
func TestLoad(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(dir, strings.ReplaceAll(body, "\n", "_")+".yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		s    early.Serving
		ok   bool
		want string
	}{
		{early.Serving{Config: file("execution:\n  default_timeout: 7s\n")}, true, "timeout: 7s by default"},
		{early.Serving{Config: file("server:\n  log_level: info\n")}, true, "timeout: 30s by default"},
		{early.Serving{LogLevel: "info+2"}, true, "timeout: 30s by default"},
		{early.Serving{LogLevel: "loud"}, false, ""},
		{early.Serving{Config: file("server:\n  log_level: loud\n")}, false, ""},
		{early.Serving{Config: file("server:\n  transport: http\n")}, false, ""},
		{early.Serving{Config: file("execution:\n  default_timeout: soon\n")}, false, ""},
		{early.Serving{Config: filepath.Join(dir, "missing.yaml")}, false, ""},
	} {
		_, instructions, ok := Load(c.s)
		if ok != c.ok || !strings.Contains(instructions, c.want) {
			t.Errorf("Load(%+v) = %v, instructions containing %q: %v", c.s, ok, c.want, ok && strings.Contains(instructions, c.want))
		}
	}
}

// Every environment early takes for the built-in configuration loads it:
// the same instructions as none.
func TestBuiltInEnvironments(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	_, want, ok := Load(early.Serving{})
	if !ok {
		t.Fatal("the built-in configuration does not load")
	}
	for _, kv := range [][2]string{{"FORGE_STATE_DIR", "/var/lib/forge-x"}, {"FORGE_TEST_ANYTHING", "1"}, {"FORGE_BIN", "/usr/bin/forge"}, {"FORGE_LOG_LEVEL", "debug"}, {"FORGE_CONFIG", ""}} {
		t.Run(kv[0], func(t *testing.T) {
			t.Setenv(kv[0], kv[1])
			if _, got, ok := Load(early.Serving{}); !ok || got != want {
				t.Fatalf("with %s=%q: ok %v, instructions equal %v", kv[0], kv[1], ok, got == want)
			}
		})
	}
}
