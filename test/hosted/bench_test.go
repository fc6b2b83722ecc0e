package hosted

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/testenv"
	"github.com/mcp-forge/forge/internal/testutil"
)

// BenchmarkServeInitialized is spawn → initialized of `forge serve` over
// stdio, beside `forge serve --tools` with 50 hosted tools (whose table is
// read in a sandbox before the server answers), in one run.
func BenchmarkServeInitialized(b *testing.B) {
	bin := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	_, err := os.Stat(bin)
	testutil.Require(b, err == nil, bin+" missing: run make build")
	testutil.RequiresRoot(b)
	var src strings.Builder
	src.WriteString("from forge_tools import tool\n")
	for i := range 50 {
		fmt.Fprintf(&src, "\n@tool\ndef t%d(a: int, s: str = 'x') -> int:\n    \"\"\"Tool %d.\"\"\"\n    return a\n", i, i)
	}
	path := filepath.Join(b.TempDir(), "many.py")
	if err := os.WriteFile(path, []byte(src.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	state := testutil.StateDir(b)
	once := func(args ...string) time.Duration {
		cmd := exec.Command(bin, append([]string{"--state-dir", state, "serve"}, args...)...)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
		line, err := bufio.NewReader(out).ReadString('\n')
		d := time.Since(start)
		in.Close()
		_ = cmd.Wait()
		if err != nil || !strings.Contains(line, `"id":1`) {
			b.Fatalf("initialize: %q, %v", line, err)
		}
		return d
	}
	const n = 5
	var plain, tools []time.Duration
	for range n {
		plain = append(plain, once())
		tools = append(tools, once("--tools", path))
	}
	b.ReportMetric(ms(median(plain)), "serve-initialized-ms")
	b.ReportMetric(ms(median(tools)), "serve-50-tools-initialized-ms")
	b.ReportMetric(float64(median(tools))/float64(median(plain)), "tools/plain")
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
