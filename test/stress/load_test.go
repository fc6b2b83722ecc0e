package stress

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// concurrency of the load test.
const concurrency = 8

// memSample is forge's memory at one point: the Go heap after a GC and the
// process's resident set (the engine runs in this test process).
type memSample struct {
	heap, rss uint64
}

func sampleMem(t *testing.T) memSample {
	t.Helper()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return memSample{heap: ms.HeapAlloc, rss: rssBytes(t)}
}

// rssBytes is VmRSS of this process.
func rssBytes(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

const mib = 1 << 20

// loadResult counts the outcomes of a phase of the load test.
type loadResult struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	first      []string // the first few failures
}

func (r *loadResult) fail(format string, a ...any) {
	r.failed.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.first) < 5 {
		r.first = append(r.first, fmt.Sprintf(format, a...))
	}
}

// TestLoad runs stressRuns executions at concurrency 8, a quarter of them in
// sessions (one per worker, whose counter must go up by one per call), the
// rest stateless from the warm pool. None may fail; afterwards no sandbox,
// cgroup, process, container state or session dir is left, and forge's
// heap and RSS at the end stay near what they were after a warm-up.
func TestLoad(t *testing.T) {
	runs := stressRuns(t)
	ids := make([]string, concurrency)
	for w := range ids {
		ids[w] = fmt.Sprintf("stress-%d-%d", os.Getpid(), w)
	}
	state := testutil.StateDir(t)
	// Registered before the engine, so it runs after the engine's Close.
	t.Cleanup(func() {
		for _, id := range ids {
			if _, err := os.Stat(filepath.Join(state, "sessions", id)); err == nil {
				t.Errorf("session dir %s left behind", id)
			}
		}
	})
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.Pool.Enabled = true
		c.Sessions.MaxConcurrent = concurrency
	})
	ctx := context.Background()
	counts := make([]int, concurrency) // per worker's session: calls so far
	phase := func(n int) (*loadResult, time.Duration) {
		var res loadResult
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					if i%4 == 0 {
						counts[w]++
						sessionCall(ctx, eng, ids[w], counts[w], &res)
					} else {
						statelessCall(ctx, eng, i, &res)
					}
				}
			}()
		}
		wg.Wait()
		return &res, time.Since(start)
	}

	warmup := max(runs/10, 2*concurrency)
	if r, _ := phase(warmup); r.failed.Load() > 0 {
		t.Fatalf("warm-up: %d of %d executions failed, e.g. %v", r.failed.Load(), warmup, r.first)
	}
	before := sampleMem(t)
	res, took := phase(runs)
	after := sampleMem(t)
	rate := float64(runs) / took.Seconds()
	bare := bareRate(t, max(runs/20, 4*concurrency))
	t.Logf("load: %d executions at concurrency %d in %s: %.1f/s, %d failed; bare python3 -c at concurrency %d: %.1f/s (forge = %.2f x bare)",
		runs, concurrency, took.Round(time.Millisecond), rate, res.failed.Load(), concurrency, bare, rate/bare)
	t.Logf("memory after warm-up: heap %.1f MiB, RSS %.1f MiB; at the end: heap %.1f MiB, RSS %.1f MiB",
		float64(before.heap)/mib, float64(before.rss)/mib, float64(after.heap)/mib, float64(after.rss)/mib)
	if n := res.failed.Load(); n > 0 || res.ok.Load() != int64(runs) {
		t.Errorf("%d of %d executions failed (%d ok), e.g. %v", n, runs, res.ok.Load(), res.first)
	}
	// Generous: a leak of a few KiB per execution over the full run would
	// pass neither bound.
	if after.heap > 2*before.heap+32*mib {
		t.Errorf("Go heap grew from %d to %d bytes over %d executions", before.heap, after.heap, runs)
	}
	if after.rss > before.rss+before.rss/2+64*mib {
		t.Errorf("RSS grew from %d to %d bytes over %d executions", before.rss, after.rss, runs)
	}
	for _, id := range ids {
		if err := eng.DestroySession(ctx, engine.LocalPrincipal, id); err != nil {
			t.Errorf("destroying session %s: %v", id, err)
		}
	}
}

func statelessCall(ctx context.Context, eng *engine.Engine, i int, res *loadResult) {
	r, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: fmt.Sprintf("print(%d * 2)", i)})
	switch {
	case err != nil:
		res.fail("stateless %d: %v", i, err)
	case !r.Success || r.Stdout != fmt.Sprintf("%d\n", 2*i):
		res.fail("stateless %d: success %v stdout %q error %+v", i, r.Success, r.Stdout, r.Error)
	default:
		res.ok.Add(1)
	}
}

// sessionCall adds one to the session's counter, which must then be want.
func sessionCall(ctx context.Context, eng *engine.Engine, id string, want int, res *loadResult) {
	r, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: "n = globals().get('n', 0) + 1\nn", SessionID: id})
	switch {
	case err != nil:
		res.fail("session %s call %d: %v", id, want, err)
	case !r.Success || fmt.Sprint(r.Result) != fmt.Sprint(want):
		res.fail("session %s call %d: success %v result %v error %+v notes %v", id, want, r.Success, r.Result, r.Error, r.Notes)
	default:
		res.ok.Add(1)
	}
}

// bareRate is how many `python3 -c 'print(1)'` per second this host runs at
// the same concurrency, measured in the same test as the baseline.
func bareRate(t *testing.T, n int) float64 {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Logf("no python3 on the host: no baseline (%v)", err)
		return 0
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for int(next.Add(1)) <= n {
				if out, err := exec.Command(py, "-c", "print(1)").Output(); err != nil || string(out) != "1\n" {
					t.Errorf("bare python3: %q %v", out, err)
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}
