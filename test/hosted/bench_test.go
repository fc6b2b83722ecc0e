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
// stdio, beside `forge serve --tools` with 50 hosted tools, in one run:
// restarted with the same tools (the table comes from the table cache, and
// is re-read in a sandbox in the background) and with tools never served
// before (the table is read in a sandbox before the server answers).
func BenchmarkServeInitialized(b *testing.B) {
	bin := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	_, err := os.Stat(bin)
	testutil.Require(b, err == nil, bin+" missing: run make build")
	testutil.RequiresRoot(b)
	path := testenv.HostedTools(b, testenv.ManyTools(50)).Path
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
	once("--tools", path) // fills the table cache
	var plain, cached, cold []time.Duration
	for range n {
		plain = append(plain, once())
		cached = append(cached, once("--tools", path))
		// A new path each time: no cached table, it is read in a sandbox.
		cold = append(cold, once("--tools", testenv.HostedTools(b, testenv.ManyTools(50)).Path))
	}
	b.ReportMetric(ms(median(plain)), "serve-initialized-ms")
	b.ReportMetric(ms(median(cached)), "serve-50-tools-initialized-ms")
	b.ReportMetric(ms(median(cold)), "serve-50-tools-uncached-initialized-ms")
	b.ReportMetric(float64(median(cached))/float64(median(plain)), "tools/plain")
	b.ReportMetric(float64(median(cold))/float64(median(plain)), "uncached/plain")
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
