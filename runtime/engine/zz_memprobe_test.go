package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/testenv"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
)

func TestZZMemProbe(t *testing.T) {
	for _, warm := range []bool{false, true} {
		eng := testenv.Engine(t, false, func(c *profiles.Config) {
			c.Pool.Enabled, c.Pool.Size = true, 2
			if !warm {
				c.Pool.WarmModules = nil
			}
		})
		eng.Prewarm()
		waitPool(t, eng, 2)
		time.Sleep(500 * time.Millisecond)
		var sum uint64
		for i := 0; i < 5; i++ {
			sum += eng.PoolStats()[0].IdleMemoryBytes
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("warm=%v idle %.2f MiB", warm, float64(sum/5)/(1<<20))
		if !warm {
			res, err := eng.Execute(context.Background(), engine.Request{Code: `
import os,sys
for p in ("1","self"):
    d=dict(l.split(":",1) for l in open("/proc/%s/smaps_rollup"%p).read().splitlines()[1:])
    print(p, {k:d[k].strip() for k in ("Rss","Pss","Private_Dirty","Shared_Dirty","Anonymous")})
print(sorted(k for k in sys.modules)[:0], len(sys.modules))
print(open("/sys/fs/cgroup/memory.current").read().strip() if os.path.exists("/sys/fs/cgroup/memory.current") else "")
`})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s %+v", res.Stdout, res.Stderr, res.Error)
		}
	}
}
