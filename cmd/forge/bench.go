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
and throughput at concurrency 1, 2, 4; then, for each sandbox mode (container
and zygote), cold latency and burst throughput at concurrency 1, 2, 4 with
the pool off (every run a fresh sandbox), and zygote mode with the pool.
--cpuprofile writes a Go CPU profile of forge itself (go tool pprof).
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
}

func cmdBench(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runs := fs.Int("runs", 200, "")
	asJSON := fs.Bool("json", false, "")
	image := fs.String("image", "", "")
	cpuProfile := fs.String("cpuprofile", "", "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *runs < 10 {
		return usagef("bench: [--runs N>=10] [--json] [--image REF] [--cpuprofile FILE]\n\n%s", benchUsage)
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
	warm.DestroySession(ctx, engine.LocalPrincipal, last)

	for _, c := range []int{1, 2, 4} {
		waitWarm()
		r := throughput(ctx, warm, req, c, *runs)
		rows = append(rows, r)
	}
	st := warm.PoolStats()
	warm.Close(time.Second)
	warmOpen = false
	modeRows, err := benchModes(ctx, g, cfg, req, *runs)
	if err != nil {
		return err
	}
	rows = append(rows, modeRows...)
	for i := range rows {
		if bare.P50MS > 0 {
			rows[i].RatioBare = rows[i].P50MS / bare.P50MS
		}
	}
	if *asJSON {
		return json.NewEncoder(g.stdout).Encode(map[string]any{"results": rows, "pool": st, "idle_sandbox_memory_bytes": idleMem})
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\truns\tfail\tp50 ms\tp95 ms\tp99 ms\t× bare\truns/s\t")
	for _, r := range rows {
		tp := ""
		if r.Throughput > 0 {
			tp = fmt.Sprintf("%.1f", r.Throughput)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n", r.Name, r.Runs, r.Failures, r.P50MS, r.P95MS, r.P99MS, r.RatioBare, tp)
	}
	tw.Flush()
	if loop.Throughput > 0 {
		for _, r := range rows {
			if r.Throughput > 0 && r.Name != loop.Name {
				fmt.Fprintf(g.stdout, "%s: %.2f × the sequential bare-python loop\n", r.Name, r.Throughput/loop.Throughput)
			}
		}
	}
	for _, s := range st {
		fmt.Fprintf(g.stdout, "pool %s: hits %d, misses %d, cold starts %d; idle pooled sandbox %.1f MiB (warm modules: %d)\n",
			s.Name, s.Hits, s.Misses, s.ColdStarts, float64(idleMem)/(1<<20), len(wcfg.Pool.WarmModules))
	}
	return nil
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
func benchModes(ctx context.Context, g *globals, cfg *profiles.Config, req engine.Request, runs int) ([]benchRow, error) {
	var rows []benchRow
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
			if !pool {
				r := measure(runs/4, func() error { return runOnce(ctx, eng, req) })
				r.Name = what + ": cold"
				rows = append(rows, r)
			}
			for _, c := range []int{1, 2, 4} {
				r := throughputOf(c, runs/2, func() error { return runOnce(ctx, eng, req) })
				r.Name = fmt.Sprintf("%s: burst, concurrency %d", what, c)
				rows = append(rows, r)
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
