package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
)

const benchUsage = `Usage: forge bench [--runs N] [--json] [--image REF] [--cpuprofile FILE]

Measures, in one run on this host: bare python3 -c 'print(1)' (latency, and
a sequential loop's runs/s), cold runs (pool off), warm runs (from the pool),
session calls and forks, throughput at concurrency 1, 2, 4, and the pool as
configured (pool.size, growing to pool.max_size) under bursts of 20
back-to-back calls after 2 s idle and under sustained back-to-back load,
with the share of calls the pool served; then, for each sandbox mode
(container and zygote), cold latency and burst throughput at concurrency
1, 2, 4 with the pool off (every run a fresh sandbox), and zygote mode with
the pool, each beside bare python measured again just before it; then a
hosted tool called back to back beside execute_python runs back to back,
and the first call of each after 1 s idle.
--cpuprofile writes a Go CPU profile of forge itself (go tool pprof).
--density N measures only N live sessions (bench_density.go): host memory
per session, creation time, a later call's p50 at that count, and the stop.
`

// benchRow is one measured scenario.
type benchRow struct {
	Name       string  `json:"name"`
	Runs       int     `json:"runs"`
	Failures   int     `json:"failures"`
	P50MS      float64 `json:"p50_ms"`
	P95MS      float64 `json:"p95_ms"`
	P99MS      float64 `json:"p99_ms"`
	RatioBare  float64 `json:"ratio_to_bare"`
	Throughput float64 `json:"runs_per_second,omitempty"`
	// PoolHitPct is the share of calls served from the pool, for the rows
	// that load it harder than it refills.
	PoolHitPct *float64 `json:"pool_hit_pct,omitempty"`
	// RatioWarm is p50 over the paced warm p50, for the burst rows.
	RatioWarm float64 `json:"ratio_to_warm,omitempty"`
	// The mode rows' ratios to bare python measured just before them (the
	// load of a shared host drifts over a run): p50 over bare p50, and
	// runs/s over the sequential bare loop's.
	RatioBeside     float64 `json:"ratio_to_bare_beside,omitempty"`
	LoopRatioBeside float64 `json:"ratio_to_loop_beside,omitempty"`
	// RatioExec is a hosted tool row's p50 over the execute_python row
	// measured beside it (benchHosted).
	RatioExec float64 `json:"ratio_to_execute_python,omitempty"`
}

func cmdBench(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runs := fs.Int("runs", 200, "")
	asJSON := fs.Bool("json", false, "")
	image := fs.String("image", "", "")
	cpuProfile := fs.String("cpuprofile", "", "")
	density := fs.Int("density", 0, "")
	var xo extraOpts
	xo.flags(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *runs < 10 || *density < 0 {
		return usagef("bench: [--runs N>=10] [--json] [--image REF] [--cpuprofile FILE] [--density N] %s\n\n%s%s", extraFlagsUsage, benchUsage, extraUsage)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	var rows []benchRow

	py := "/usr/bin/python3"
	if _, err := exec.LookPath(py); err != nil {
		py = "python3"
	}
	if *density > 0 {
		return benchDensity(ctx, g, cfg, py, *image, *density, *asJSON)
	}
	extra, err := benchExtras(ctx, g, cfg, py, xo)
	if err != nil || xo.only != "" {
		if err == nil {
			err = extra.print(g.stdout, *asJSON)
		}
		return err
	}
	bare := measure(*runs/4, func() error {
		return exec.CommandContext(ctx, py, "-c", "print(1)").Run()
	})
	bare.Name = "bare python3 -c (host)"
	rows = append(rows, bare)
	loop := throughputOf(1, *runs/4, func() error { return exec.CommandContext(ctx, py, "-c", "print(1)").Run() })
	loop.Name = "bare python3 -c, sequential loop"
	rows = append(rows, loop)

	req := engine.Request{Principal: engine.LocalPrincipal, Code: "print(1)", Image: *image, Client: "bench"}
	cfg.Pool.Enabled = false
	cold, err := engine.New(ctx, engine.Options{Config: cfg, Logger: g.log})
	if err != nil {
		return err
	}
	r := measure(*runs/4, func() error { return runOnce(ctx, cold, req) })
	r.Name = "cold (pool off)"
	rows = append(rows, r)
	cold.Close(time.Second)

	wcfg := *cfg
	wcfg.Pool.Enabled = true
	if wcfg.Pool.Size < 4 {
		wcfg.Pool.Size = 4
	}
	warm, err := engine.New(ctx, engine.Options{Config: &wcfg, Logger: g.log})
	if err != nil {
		return err
	}
	warmOpen := true
	defer func() {
		if warmOpen {
			warm.Close(time.Second)
		}
	}()
	warm.Prewarm()
	waitWarm := func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			st := warm.PoolStats()
			if len(st) > 0 && st[0].Ready >= wcfg.Pool.Size && st[0].Warm >= wcfg.Pool.Size {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitWarm()
	var idleMem uint64
	if st := warm.PoolStats(); len(st) > 0 {
		idleMem = st[0].IdleMemoryBytes
	}
	// Sequential warm runs, each after the pool refilled: the latency a
	// request sees when the pool is doing its job.
	r = measureAfter(*runs/2, waitWarm, func() error { return runOnce(ctx, warm, req) })
	r.Name = "warm (pool hit)"
	rows = append(rows, r)
	pacedWarm := r.P50MS

	// Sessions: the first call of a new session takes a sandbox from the
	// pool; later calls reuse it (resume, exec, pause).
	n := 0
	var last string
	r = measureAfter(*runs/4, func() {
		if last != "" {
			warm.DestroySession(ctx, engine.LocalPrincipal, last)
		}
		waitWarm()
		n++
		last = fmt.Sprintf("bench-%d-%d", os.Getpid(), n)
	}, func() error {
		sreq := req
		sreq.SessionID = last
		return runOnce(ctx, warm, sreq)
	})
	r.Name = "session, first call"
	rows = append(rows, r)
	r = measure(*runs/2, func() error {
		sreq := req
		sreq.SessionID = last
		return runOnce(ctx, warm, sreq)
	})
	r.Name = "session, later calls"
	rows = append(rows, r)
	// Forks of a session holding a few variables and a file: pickle, copy,
	// a new sandbox from the pool, restore.
	if err := runOnce(ctx, warm, engine.Request{Principal: engine.LocalPrincipal, SessionID: last, Client: "bench",
		Code: "import json\nrows = list(range(1000))\nmeta = {'k': 'v'}\nopen('/workspace/f.txt', 'w').write('x' * 4096)\nprint(1)"}); err != nil {
		return err
	}
	var fork string
	r = measureAfter(*runs/8, func() {
		if fork != "" {
			warm.DestroySession(ctx, engine.LocalPrincipal, fork)
		}
		waitWarm()
	}, func() error {
		f, err := warm.ForkSession(ctx, engine.LocalPrincipal, last, "")
		if err == nil {
			fork = f.SessionID
		}
		return err
	})
	r.Name = "session fork"
	rows = append(rows, r)
	warm.DestroySession(ctx, engine.LocalPrincipal, fork)
	warm.DestroySession(ctx, engine.LocalPrincipal, last)

	for _, c := range []int{1, 2, 4} {
		waitWarm()
		r := throughput(ctx, warm, req, c, *runs)
		rows = append(rows, r)
	}
	adaptive, err := benchAdaptive(ctx, g, cfg, req, *runs)
	if err != nil {
		return err
	}
	for i := range adaptive {
		if pacedWarm > 0 && adaptive[i].Throughput == 0 {
			adaptive[i].RatioWarm = adaptive[i].P50MS / pacedWarm
		}
	}
	rows = append(rows, adaptive...)
	st := warm.PoolStats()
	warm.Close(time.Second)
	warmOpen = false
	modeRows, err := benchModes(ctx, g, cfg, req, *runs, py)
	if err != nil {
		return err
	}
	rows = append(rows, modeRows...)
	hostedRows, err := benchHosted(ctx, g, cfg, *runs)
	if err != nil {
		return err
	}
	rows = append(rows, hostedRows...)
	for i := range rows {
		if bare.P50MS > 0 {
			rows[i].RatioBare = rows[i].P50MS / bare.P50MS
		}
	}
	if *asJSON {
		return json.NewEncoder(g.stdout).Encode(map[string]any{"results": rows, "pool": st, "idle_sandbox_memory_bytes": idleMem,
			"probes": extra.Probes, "cli": extra.CLI})
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\truns\tfail\tp50 ms\tp95 ms\tp99 ms\t× bare\t× warm\truns/s\tpool hits\t")
	for _, r := range rows {
		tp, hits, xw := "", "", ""
		if r.Throughput > 0 {
			tp = fmt.Sprintf("%.1f", r.Throughput)
		}
		if r.PoolHitPct != nil {
			hits = fmt.Sprintf("%.0f%%", *r.PoolHitPct)
		}
		if r.RatioWarm > 0 {
			xw = fmt.Sprintf("%.2f", r.RatioWarm)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t\n", r.Name, r.Runs, r.Failures, r.P50MS, r.P95MS, r.P99MS, r.RatioBare, xw, tp, hits)
	}
	tw.Flush()
	if loop.Throughput > 0 {
		for _, r := range rows {
			if r.Throughput > 0 && r.Name != loop.Name {
				fmt.Fprintf(g.stdout, "%s: %.2f × the sequential bare-python loop\n", r.Name, r.Throughput/loop.Throughput)
			}
		}
	}
	for _, r := range rows {
		if r.RatioBeside > 0 {
			fmt.Fprintf(g.stdout, "%s: p50 %.2f × bare python measured beside it\n", r.Name, r.RatioBeside)
		}
		if r.LoopRatioBeside > 0 {
			fmt.Fprintf(g.stdout, "%s: %.2f × the bare loop measured beside it\n", r.Name, r.LoopRatioBeside)
		}
		if r.RatioExec > 0 {
			fmt.Fprintf(g.stdout, "%s: p50 %.2f × execute_python measured beside it\n", r.Name, r.RatioExec)
		}
	}
	extra.print(g.stdout, false)
	for _, s := range st {
		fmt.Fprintf(g.stdout, "pool %s: hits %d, misses %d, cold starts %d; idle pooled sandbox %.1f MiB (warm modules: %d)\n",
			s.Name, s.Hits, s.Misses, s.ColdStarts, float64(idleMem)/(1<<20), len(wcfg.Pool.WarmModules))
	}
	return nil
}

// benchAdaptive measures the pool as configured: bursts of 20 back-to-back
// calls, each after 2 s idle (the first finds the pool at pool.size, later
// ones a pool grown by the misses), then sustained back-to-back load, where
// the pool cannot refill as fast as calls take sandboxes: the share of
// calls it served says how far it keeps up.
func benchAdaptive(ctx context.Context, g *globals, cfg *profiles.Config, req engine.Request, runs int) ([]benchRow, error) {
	acfg := *cfg
	acfg.Pool.Enabled = true
	eng, err := engine.New(ctx, engine.Options{Config: &acfg, Logger: g.log})
	if err != nil {
		return nil, err
	}
	defer eng.Close(time.Second)
	eng.Prewarm()
	counts := func() (hits, misses uint64) {
		for _, s := range eng.PoolStats() {
			hits, misses = hits+s.Hits, misses+s.Misses
		}
		return hits, misses
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st := eng.PoolStats(); len(st) > 0 && st[0].Ready >= acfg.Pool.Size && st[0].Warm >= acfg.Pool.Size {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	const burst = 20
	var rows []benchRow
	var later []time.Duration
	laterFails, laterHits, laterMisses := 0, uint64(0), uint64(0)
	for b := 0; b < 4; b++ {
		time.Sleep(2 * time.Second) // the scenario: a pause between bursts
		h0, m0 := counts()
		readyAtStart := 0
		for _, st := range eng.PoolStats() {
			readyAtStart += st.Ready
		}
		lat, fails := make([]time.Duration, 0, burst), 0
		for i := 0; i < burst; i++ {
			t := time.Now()
			if err := runOnce(ctx, eng, req); err != nil {
				fails++
				continue
			}
			lat = append(lat, time.Since(t))
		}
		h1, m1 := counts()
		fmt.Fprintf(g.stderr, "burst %d: %d sandboxes ready at its start, %d of %d calls served from the pool\n", b+1, readyAtStart, h1-h0, burst)
		if b == 0 {
			r := summarize(lat, burst, fails)
			r.Name = fmt.Sprintf("burst of %d, first (pool at size %d)", burst, acfg.Pool.Size)
			r.PoolHitPct = pct(h1-h0, m1-m0)
			rows = append(rows, r)
			continue
		}
		later, laterFails = append(later, lat...), laterFails+fails
		laterHits, laterMisses = laterHits+h1-h0, laterMisses+m1-m0
	}
	r := summarize(later, 3*burst, laterFails)
	r.Name = fmt.Sprintf("burst of %d after 2 s idle (grown pool)", burst)
	r.PoolHitPct = pct(laterHits, laterMisses)
	rows = append(rows, r)
	// The same burst once the grown pool has refilled: what the sizing gives
	// when the host makes sandboxes faster than 20 per 2 s (a loaded host
	// does not, and the row above shows it).
	ready, warmed := 0, 0
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ready, warmed = 0, 0
		for _, st := range eng.PoolStats() {
			ready, warmed = ready+st.Ready, warmed+st.Warm
		}
		if ready >= burst && warmed >= burst {
			break
		}
	}
	h0, m0 := counts()
	r = measure(burst, func() error { return runOnce(ctx, eng, req) })
	h1, m1 := counts()
	r.Name = fmt.Sprintf("burst of %d, grown pool refilled (%d ready, %d warm)", burst, ready, warmed)
	r.PoolHitPct = pct(h1-h0, m1-m0)
	rows = append(rows, r)
	// Sustained: back-to-back at concurrency 2 for runs calls.
	time.Sleep(2 * time.Second)
	h0, m0 = counts()
	r = throughput(ctx, eng, req, 2, runs)
	h1, m1 = counts()
	r.Name = "sustained, concurrency 2 (pool as configured)"
	r.PoolHitPct = pct(h1-h0, m1-m0)
	rows = append(rows, r)
	for _, s := range eng.PoolStats() {
		fmt.Fprintf(g.stderr, "adaptive pool %s: target %d (size %d, max %d), grown %d, shrunk %d, misses at max_size/memory_budget %d\n",
			s.Name, s.Target, s.Size, acfg.Pool.MaxSize, s.Grown, s.Shrunk, s.OverBudget)
	}
	return rows, nil
}

func pct(hits, misses uint64) *float64 {
	v := 0.0
	if hits+misses > 0 {
		v = 100 * float64(hits) / float64(hits+misses)
	}
	return &v
}

func runOnce(ctx context.Context, eng *engine.Engine, req engine.Request) error {
	res, err := eng.Execute(ctx, req)
	if err != nil {
		return err
	}
	if res.Stdout != "1\n" {
		return fmt.Errorf("unexpected output %q (error %+v)", res.Stdout, res.Error)
	}
	return nil
}

func measure(n int, f func() error) benchRow { return measureAfter(n, func() {}, f) }

// measureAfter times f n times; prep runs before each, untimed.
func measureAfter(n int, prep func(), f func() error) benchRow {
	lat := make([]time.Duration, 0, n)
	fails := 0
	for i := 0; i < n; i++ {
		prep()
		start := time.Now()
		if err := f(); err != nil {
			fails++
			continue
		}
		lat = append(lat, time.Since(start))
	}
	return summarize(lat, n, fails)
}

func throughput(ctx context.Context, eng *engine.Engine, req engine.Request, conc, n int) benchRow {
	r := throughputOf(conc, n, func() error { return runOnce(ctx, eng, req) })
	r.Name = fmt.Sprintf("throughput, concurrency %d", conc)
	return r
}

// benchModes measures each sandbox mode with the pool off (cold latency,
// burst throughput: every run makes and destroys a sandbox) and zygote
// mode with the pool.
func benchModes(ctx context.Context, g *globals, cfg *profiles.Config, req engine.Request, runs int, py string) ([]benchRow, error) {
	var rows []benchRow
	barePy := func() error { return exec.CommandContext(ctx, py, "-c", "print(1)").Run() }
	for _, mode := range []string{"container", "zygote"} {
		for _, pool := range []bool{false, true} {
			if pool && mode == "container" {
				continue // the rows above
			}
			mcfg := *cfg
			mcfg.Sandbox.Mode = mode
			mcfg.Pool.Enabled = pool
			if pool && mcfg.Pool.Size < 4 {
				mcfg.Pool.Size = 4
			}
			eng, err := engine.New(ctx, engine.Options{Config: &mcfg, Logger: g.log})
			if err != nil {
				return nil, fmt.Errorf("bench in %s mode: %w", mode, err)
			}
			what := mode + ", pool off"
			if pool {
				what = mode + ", pool on"
				eng.Prewarm()
			}
			_ = runOnce(ctx, eng, req) // a zygote's template starts here, untimed
			bare := measure(runs/4, barePy)
			loop := throughputOf(1, runs/4, barePy)
			bare.Name, loop.Name = "bare python3 -c, beside "+what, "bare python3 -c loop, beside "+what
			rows = append(rows, bare, loop)
			beside := func(r benchRow) benchRow {
				if bare.P50MS > 0 {
					r.RatioBeside = r.P50MS / bare.P50MS
				}
				if loop.Throughput > 0 {
					r.LoopRatioBeside = r.Throughput / loop.Throughput
				}
				return r
			}
			if !pool {
				r := measure(runs/4, func() error { return runOnce(ctx, eng, req) })
				r.Name = what + ": cold"
				rows = append(rows, beside(r))
			}
			for _, c := range []int{1, 2, 4} {
				r := throughputOf(c, runs/2, func() error { return runOnce(ctx, eng, req) })
				r.Name = fmt.Sprintf("%s: burst, concurrency %d", what, c)
				rows = append(rows, beside(r))
			}
			eng.Close(time.Second)
		}
	}
	return rows, nil
}

// throughputOf runs f n times from conc goroutines.
func throughputOf(conc, n int, f func() error) benchRow {
	var mu sync.Mutex
	var lat []time.Duration
	var fails atomic.Int64
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				t := time.Now()
				if err := f(); err != nil {
					fails.Add(1)
					continue
				}
				d := time.Since(t)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	r := summarize(lat, n, int(fails.Load()))
	r.Throughput = float64(len(lat)) / el.Seconds()
	return r
}

func summarize(lat []time.Duration, n, fails int) benchRow {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(float64(len(lat)-1)*q)].Microseconds()) / 1000
	}
	return benchRow{Runs: n, Failures: fails, P50MS: p(0.50), P95MS: p(0.95), P99MS: p(0.99)}
}
