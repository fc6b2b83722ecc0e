package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-forge/forge/runtime/bridge"
)

// BenchmarkCall measures one tool call round trip through the bridge
// (Python in a host process → unix socket → bridge → downstream Go server
// → back), timed inside Python, beside the same call made directly by an
// mcp-go client to another instance of the server, and reports both
// medians and their ratio.
func BenchmarkCall(b *testing.B) {
	srv := mcpServer(b)
	br := newBridge(b, map[string]bridge.ServerConfig{"test": {Command: srv}}, nil)
	g := grant(b, br, "add")

	direct := directCalls(b, srv, b.N)
	out := python(b, g, fmt.Sprintf(`
import json, time
add(1, 2)  # warm up
d = []
for i in range(%d):
    t = time.perf_counter_ns()
    add(i, 1)
    d.append(time.perf_counter_ns() - t)
print(json.dumps(d))
`, b.N))
	var bridged []time.Duration
	if err := json.Unmarshal([]byte(out[strings.LastIndex(out, "\n")+1:]), &bridged); err != nil {
		b.Fatalf("python output %q: %v", out, err)
	}
	bp, dp := percentile(bridged, 50), percentile(direct, 50)
	b.ReportMetric(float64(bp.Microseconds())/1000, "bridged-p50-ms")
	b.ReportMetric(float64(percentile(bridged, 95).Microseconds())/1000, "bridged-p95-ms")
	b.ReportMetric(float64(dp.Microseconds())/1000, "direct-p50-ms")
	b.ReportMetric(float64(bp)/float64(dp), "ratio")
}

func directCalls(b *testing.B, srv string, n int) []time.Duration {
	ctx := context.Background()
	c, err := client.NewStdioMCPClient(srv, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		b.Fatal(err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "add"
	d := make([]time.Duration, 0, n)
	for i := range n + 1 {
		req.Params.Arguments = map[string]any{"a": i, "b": 1}
		start := time.Now()
		if _, err := c.CallTool(ctx, req); err != nil {
			b.Fatal(err)
		}
		if i > 0 { // the first is a warm-up
			d = append(d, time.Since(start))
		}
	}
	return d
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}
