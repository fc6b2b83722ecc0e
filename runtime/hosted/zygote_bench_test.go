package hosted_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/runtime/pool"
	"github.com/mcp-forge/forge/test/testenv"
)

// BenchmarkHostedBackToBack measures, in one run with the default pools
// (execution pool and hosted_tools.pool_size as configured, zygote mode):
// a hosted tool called back to back beside warm execute_python runs back
// to back (target: p50 at most 1.2 × execute_python's), and the first call
// of each after 1 s idle (target: at most 1.5 ×).
func BenchmarkHostedBackToBack(b *testing.B) {
	def := profiles.Default()
	eng := testenv.Engine(b, false, func(c *profiles.Config) {
		c.Sandbox.Mode = "zygote"
		c.Pool.Enabled, c.Pool.Size = true, def.Pool.Size
	})
	cfg := testenv.HostedTools(b, testenv.AddTools)
	cfg.PoolSize = def.HostedTools.PoolSize
	h, err := hosted.New(context.Background(), hosted.Options{Engine: eng, Config: cfg, StateDir: eng.Config().StateDir})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	rounds := max(b.N, 5)
	f, err := hosted.Bench(context.Background(), eng, h, engine.LocalPrincipal, "add", json.RawMessage(`{"a": 2, "b": 3}`),
		"2 + 3", rounds, 20, 5, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(ms(pct(f.Hosted, 50)), "hosted-b2b-p50-ms")
	b.ReportMetric(ms(pct(f.Exec, 50)), "exec-b2b-p50-ms")
	b.ReportMetric(float64(pct(f.Hosted, 50))/float64(pct(f.Exec, 50)), "hosted/exec-b2b-p50")
	b.ReportMetric(ms(pct(f.HostedIdle, 50)), "hosted-idle-p50-ms")
	b.ReportMetric(ms(pct(f.ExecIdle, 50)), "exec-idle-p50-ms")
	b.ReportMetric(float64(pct(f.HostedIdle, 50))/float64(pct(f.ExecIdle, 50)), "hosted/exec-idle-p50")
	hit := func(sts []pool.Stats) float64 {
		var h, m uint64
		for _, s := range sts {
			h, m = h+s.Hits, m+s.Misses
		}
		return 100 * float64(h) / float64(max(h+m, 1))
	}
	b.ReportMetric(hit(h.PoolStats()), "hosted-pool-hit-pct")
	for _, s := range h.PoolStats() {
		b.Logf("hosted pool: target %d, grown %d, over budget %d, idle memory %d KiB", s.Target, s.Grown, s.OverBudget, s.IdleMemoryBytes>>10)
	}
	for _, s := range eng.PoolStats() {
		b.Logf("execution pool: target %d, grown %d, over budget %d, idle memory %d KiB", s.Target, s.Grown, s.OverBudget, s.IdleMemoryBytes>>10)
	}
	b.ReportMetric(hit(eng.PoolStats()), "exec-pool-hit-pct")
	st := eng.Runtime().ZygoteStats()
	b.ReportMetric(float64(st.Fallbacks), "container-fallbacks")
}
