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

	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// BenchmarkServeInitialized is spawn → initialized, and spawn → tools/list
// answered, of `forge serve` over stdio, beside `forge serve --tools` with
// 50 hosted tools, in one run: restarted with the same tools (the table
// comes from the table cache, and is re-read in a sandbox in the
// background) and with tools never served before (the table is read in a
// sandbox; tools/list waits for it, initialize does not).
func BenchmarkServeInitialized(b *testing.B) {
	bin := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	_, err := os.Stat(bin)
	testutil.Require(b, err == nil, bin+" missing: run make build")
	testutil.RequiresRoot(b)
	path := testenv.HostedTools(b, testenv.ManyTools(50)).Path
	state := testutil.StateDir(b)
	// once is spawn → initialized, and spawn → the tools/list answer
	// that includes the 50 tools (with them; forge's own tools without).
	once := func(args ...string) (initialized, listed time.Duration) {
		cmd := exec.Command(bin, append([]string{"--state-dir", state, "serve"}, args...)...)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() {
			in.Close()
			_ = cmd.Wait()
		}()
		r := bufio.NewReader(out)
		fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
		line, err := r.ReadString('\n')
		initialized = time.Since(start)
		if err != nil || !strings.Contains(line, `"id":1`) {
			b.Fatalf("initialize: %q, %v", line, err)
		}
		fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		fmt.Fprintln(in, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		for {
			line, err = r.ReadString('\n')
			if err != nil {
				b.Fatalf("tools/list: %v", err)
			}
			if strings.Contains(line, `"id":2`) {
				break // notifications (list_changed) may come first
			}
		}
		listed = time.Since(start)
		if len(args) > 0 && !strings.Contains(line, `"name":"t49"`) {
			b.Fatalf("tools/list without the hosted tools: %.300s", line)
		}
		return initialized, listed
	}
	const n = 5
	once("--tools", path) // fills the table cache
	var plain, cached, cold, plainL, cachedL, coldL []time.Duration
	for range n {
		i, l := once()
		plain, plainL = append(plain, i), append(plainL, l)
		i, l = once("--tools", path)
		cached, cachedL = append(cached, i), append(cachedL, l)
		// A new path each time: no cached table, it is read in a sandbox.
		i, l = once("--tools", testenv.HostedTools(b, testenv.ManyTools(50)).Path)
		cold, coldL = append(cold, i), append(coldL, l)
	}
	b.ReportMetric(ms(median(plain)), "serve-initialized-ms")
	b.ReportMetric(ms(median(cached)), "serve-50-tools-initialized-ms")
	b.ReportMetric(ms(median(cold)), "serve-50-tools-uncached-initialized-ms")
	b.ReportMetric(float64(median(cached))/float64(median(plain)), "tools/plain")
	b.ReportMetric(ms(median(plainL)), "serve-listed-ms")
	b.ReportMetric(ms(median(cachedL)), "serve-50-tools-listed-ms")
	b.ReportMetric(ms(median(coldL)), "serve-50-tools-uncached-listed-ms")
	b.ReportMetric(float64(median(cachedL))/float64(median(plainL)), "listed-tools/plain")
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
