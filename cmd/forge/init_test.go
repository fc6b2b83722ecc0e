package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/test/testenv"
)

// Package initializers run in every forge process before main, so also
// before `forge serve` answers initialize: the work they do is paid on each
// connect. The bounds are allocations (GODEBUG=inittrace), which do not
// depend on the machine's load. forge's own name patterns compile on first
// use (internal/lazyre), its built-in defaults are Go (profiles'
// defaults_gen.go) and its FORGE_* table is built on first use; each of its
// packages now allocates under 6 KB. Of what is left, santhosh-tekuri's
// jsonschema compiles its meta-schemas at init, about 1.7 MB: mcp-go's
// server imports it, so it is not forge's to change.
func TestInitAllocations(t *testing.T) {
	bin := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	cmd := exec.CommandContext(t.Context(), bin, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s version: %v %s", bin, err, stderr.String())
	}
	total := 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		// init github.com/x/y @1.2 ms, 0.3 ms clock, 1234 bytes, 5 allocs
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		n, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("inittrace line %q: %v", line, err)
		}
		total += n
		limit := -1
		switch {
		case strings.HasPrefix(f[1], "github.com/mcp-forge/forge/"):
			limit = 16 << 10 // 256 KiB while profiles decoded defaults.yaml here
		}
		if limit >= 0 && n > limit {
			t.Errorf("init of %s allocates %d bytes, over %d", f[1], n, limit)
		}
	}
	if total == 0 {
		t.Fatalf("no inittrace lines in:\n%s", stderr.String())
	}
	const maxTotal = 3840 << 10 // 3.67 MB now; 3.82 MB with profiles' YAML decode, 4.6 MB before lazyre
	if total > maxTotal {
		t.Errorf("package initializers allocate %d bytes in all, over %d", total, maxTotal)
	}
	t.Logf("package initializers allocate %d bytes", total)
}
