package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
)

// Fixtures of hosted tools (runtime/hosted), shared by its own tests and
// benchmarks and those of test/hosted. They return configurations, not
// Hosts: runtime/hosted's in-package tests use them too, and this package
// must not import it.

// AddTools is a tools module with one tool, add(a, b=1) -> int.
const AddTools = `from forge_tools import tool

@tool
def add(a: int, b: int = 1) -> int:
    """Adds two integers."""
    return a + b
`

// ManyTools is a tools module of n tools t0 … t(n-1), each (a: int, s: str = 'x') -> int.
func ManyTools(n int) string {
	var b strings.Builder
	b.WriteString("from forge_tools import tool\n")
	for i := range n {
		fmt.Fprintf(&b, "\n@tool\ndef t%d(a: int, s: str = 'x') -> int:\n    \"\"\"Tool %d.\"\"\"\n    return a\n", i, i)
	}
	return b.String()
}

// HostedTools writes src as tools.py in a new temporary directory and
// returns the default hosted_tools section serving it, with a pool of one
// and no reload polling (tests reload or set the interval themselves).
func HostedTools(t testing.TB, src string) profiles.HostedToolsConfig {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tools.py")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := profiles.Default().HostedTools
	cfg.Path, cfg.PoolSize, cfg.ReloadInterval = path, 1, 0
	return cfg
}
