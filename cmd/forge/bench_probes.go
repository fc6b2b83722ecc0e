package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
)

// Peers' probes (issue 31): forkd's (N runs of a numpy one-liner on the data
// image at concurrency cores × 4) and fork × 1000 (that many sandboxes, one
// after another from cores × 4 workers), each beside bare python doing the
// same in the same run. What a forge run gets is named in Gets: "fresh
// sandbox" (pool off: every run a new sandbox, a child forked from the
// image's warm template in zygote mode) or "pool checkout" (pool on: a
// sandbox made before the run; PoolHitPct says how many runs got one, the
// rest waited for a fresh one).

const (
	forkdCode = "import numpy; print(numpy.zeros(5).tolist())"
	forkdOut  = "[0.0, 0.0, 0.0, 0.0, 0.0]\n"
)

// probeRow is one probe scenario: N runs at a concurrency, timed as a whole.
type probeRow struct {
	Probe       string   `json:"probe"`
	Name        string   `json:"name"`
	Gets        string   `json:"gets"` // bare python | fresh sandbox | pool checkout
	Runs        int      `json:"runs"`
	Failures    int      `json:"failures"`
	Concurrency int      `json:"concurrency"`
	WallMS      float64  `json:"wall_ms"`
	PerRunMS    float64  `json:"per_run_ms"` // wall time / runs
	P50MS       float64  `json:"p50_ms"`
	P95MS       float64  `json:"p95_ms"`
	RatioBare   float64  `json:"ratio_wall_to_bare,omitempty"`
	PoolHitPct  *float64 `json:"pool_hit_pct,omitempty"`
	Note        string   `json:"note,omitempty"`
}

// probeOpts sizes the probes; the defaults are the peers'.
type probeOpts struct {
	Runs, Forks, Concurrency int
	Python                   string
}

// benchProbes runs both probes, each beside bare python in the same run.
func benchProbes(ctx context.Context, g *globals, cfg *profiles.Config, o probeOpts) ([]probeRow, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = runtime.NumCPU() * 4
	}
	var rows []probeRow
	data := cfg.Images.Data
	if data == "" {
		return nil, usagef("bench: the forkd probe needs the data image (images.data is empty)")
	}
	r, err := probe(ctx, g, cfg, "forkd", o, engine.Request{Code: forkdCode, Image: data}, forkdOut,
		"import numpy; numpy.zeros(5).tolist()")
	if err != nil {
		return nil, err
	}
	rows = append(rows, r...)
	fo := o
	fo.Runs = o.Forks
	r, err = probe(ctx, g, cfg, "fork x "+fmt.Sprint(o.Forks), fo, engine.Request{Code: "print(1)"}, "1\n", "pass")
	if err != nil {
		return nil, err
	}
	return append(rows, r...), nil
}

// probe runs req o.Runs times at o.Concurrency: bare python first, then
// fresh sandboxes (pool off), then pool checkouts (pool on, prewarmed).
func probe(ctx context.Context, g *globals, cfg *profiles.Config, name string, o probeOpts, req engine.Request, want, bareCode string) ([]probeRow, error) {
	req.Principal, req.Client = engine.LocalPrincipal, "bench"
	var rows []probeRow
	bare := timedProbe(o.Runs, o.Concurrency, func() error {
		out, err := exec.CommandContext(ctx, o.Python, "-c", bareCode).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s -c %q: %w: %s", o.Python, bareCode, err, out)
		}
		return nil
	})
	bare.Probe, bare.Name, bare.Gets = name, "bare python3 -c (host), one process per run", "bare python"
	if bare.Failures == bare.Runs {
		bare.Note = "host python3 cannot run it (no numpy?): no baseline"
	}
	rows = append(rows, bare)
	for _, pool := range []bool{false, true} {
		pcfg := *cfg
		pcfg.Pool.Enabled = pool
		eng, err := engine.New(ctx, engine.Options{Config: &pcfg, Logger: g.log})
		if err != nil {
			return nil, fmt.Errorf("bench probe %s: %w", name, err)
		}
		gets := "fresh sandbox"
		if pool {
			gets = "pool checkout"
			eng.Prewarm()
		}
		// The template (zygote) or the pool fills here, untimed: the probes
		// measure a warm forge, as the peers' do.
		_ = runWant(ctx, eng, req, want)
		if pool {
			waitPoolReady(eng, pcfg.Pool.Size, 30*time.Second)
		}
		h0, m0 := poolCounts(eng)
		r := timedProbe(o.Runs, o.Concurrency, func() error { return runWant(ctx, eng, req, want) })
		h1, m1 := poolCounts(eng)
		eng.Close(time.Second)
		r.Probe, r.Gets = name, gets
		r.Name = fmt.Sprintf("forge, %s mode, pool off: every run a fresh sandbox", pcfg.Sandbox.Mode)
		if pool {
			r.PoolHitPct = pct(h1-h0, m1-m0)
			r.Name = fmt.Sprintf("forge, %s mode, pool on (size %d): %.0f%% pool checkouts, the rest fresh", pcfg.Sandbox.Mode, pcfg.Pool.Size, *r.PoolHitPct)
		}
		if bare.WallMS > 0 && bare.Failures == 0 {
			r.RatioBare = r.WallMS / bare.WallMS
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func runWant(ctx context.Context, eng *engine.Engine, req engine.Request, want string) error {
	res, err := eng.Execute(ctx, req)
	if err != nil {
		return err
	}
	if res.Stdout != want {
		return fmt.Errorf("unexpected output %q, want %q (error %+v)", res.Stdout, want, res.Error)
	}
	return nil
}

func poolCounts(eng *engine.Engine) (hits, misses uint64) {
	for _, s := range eng.PoolStats() {
		hits, misses = hits+s.Hits, misses+s.Misses
	}
	return hits, misses
}

// waitPoolReady polls until the first pool holds size warm sandboxes, or the
// deadline passes (the probe then measures what there is).
func waitPoolReady(eng *engine.Engine, size int, within time.Duration) {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st := eng.PoolStats(); len(st) > 0 && st[0].Ready >= size && st[0].Warm >= size {
			return
		}
	}
}

// timedProbe runs f n times from conc workers and times the whole.
func timedProbe(n, conc int, f func() error) probeRow {
	start := time.Now()
	r := throughputOf(conc, n, f)
	wall := time.Since(start)
	row := probeRow{Runs: n, Failures: r.Failures, Concurrency: conc, P50MS: r.P50MS, P95MS: r.P95MS,
		WallMS: float64(wall.Microseconds()) / 1000}
	row.PerRunMS = row.WallMS / float64(n)
	return row
}

func printProbes(w io.Writer, rows []probeRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "probe\tgets\truns\tconc\tfail\twall ms\tper run ms\tp50 ms\t× bare (wall)\tscenario")
	for _, r := range rows {
		x := ""
		if r.RatioBare > 0 {
			x = fmt.Sprintf("%.2f", r.RatioBare)
		}
		name := r.Name
		if r.Note != "" {
			name += " (" + r.Note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.0f\t%.2f\t%.2f\t%s\t%s\n", r.Probe, r.Gets, r.Runs, r.Concurrency,
			r.Failures, r.WallMS, r.PerRunMS, r.P50MS, x, strings.TrimSpace(name))
	}
	tw.Flush()
}

const extraFlagsUsage = "[--only probes,cli] [--probe-runs N] [--fork-runs N] [--cli-runs N]"

const extraUsage = `Then peers' probes: forkd's (--probe-runs runs, 100 by default, of
import numpy; numpy.zeros(5).tolist() on the data image at concurrency
cores × 4) and fork × --fork-runs (1000 sandboxes at concurrency cores × 4),
each as bare python, fresh sandboxes (pool off) and pool checkouts (pool
on), with wall time and wall time per run; and the CLI: a loop of
--cli-runs whole forge run 'print(1)' processes after a first one (which
starts the warm runner), beside a loop of bare python3 -c 'print(1)'.
--only probes,cli runs just those.
`

// extraOpts are the flags of the probes and the CLI row.
type extraOpts struct {
	only                        string
	probeRuns, forkRuns, cliRun int
}

func (o *extraOpts) flags(fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
}) {
	fs.StringVar(&o.only, "only", "", "")
	fs.IntVar(&o.probeRuns, "probe-runs", 100, "")
	fs.IntVar(&o.forkRuns, "fork-runs", 1000, "")
	fs.IntVar(&o.cliRun, "cli-runs", 50, "")
}

func (o extraOpts) wants(what string) bool {
	if o.only == "" {
		return true
	}
	for _, w := range strings.Split(o.only, ",") {
		if strings.TrimSpace(w) == what {
			return true
		}
	}
	return false
}

// extras are the probes' rows and the CLI rows.
type extras struct {
	Probes []probeRow `json:"probes,omitempty"`
	CLI    []benchRow `json:"cli,omitempty"`
}

func benchExtras(ctx context.Context, g *globals, cfg *profiles.Config, py string, o extraOpts) (extras, error) {
	var x extras
	for _, w := range strings.Split(o.only, ",") {
		if w = strings.TrimSpace(w); w != "" && w != "probes" && w != "cli" {
			return x, usagef("bench: --only %q: want probes, cli or both (comma-separated)", w)
		}
	}
	if o.probeRuns < 1 || o.forkRuns < 1 || o.cliRun < 1 {
		return x, usagef("bench: --probe-runs, --fork-runs and --cli-runs must be at least 1")
	}
	var err error
	if o.wants("probes") {
		if x.Probes, err = benchProbes(ctx, g, cfg, probeOpts{Runs: o.probeRuns, Forks: o.forkRuns, Python: py}); err != nil {
			return x, err
		}
	}
	if o.wants("cli") {
		if x.CLI, err = benchCLI(ctx, g, cfg, py, o.cliRun); err != nil {
			return x, err
		}
	}
	return x, nil
}

func (x extras) print(w io.Writer, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(x)
	}
	if len(x.Probes) > 0 {
		fmt.Fprintln(w, "\npeers' probes (wall time of all runs; gets: what each run got)")
		printProbes(w, x.Probes)
	}
	if len(x.CLI) > 0 {
		fmt.Fprintln(w, "\nthe CLI, whole processes one after another (after a first, untimed call)")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "scenario\truns\tfail\tp50 ms\tp95 ms\t× bare (p50)")
		for _, r := range x.CLI {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\n", r.Name, r.Runs, r.Failures, r.P50MS, r.P95MS, r.RatioBeside)
		}
		tw.Flush()
	}
	return nil
}

// benchCLI times whole `forge run 'print(1)'` processes one after another,
// the way a shell loop runs them, beside bare python3 -c in the same run.
// The first call is untimed: it starts the warm runner (or, with the warm
// runner off, is the same as the others). The runner is stopped after.
func benchCLI(ctx context.Context, g *globals, cfg *profiles.Config, py string, n int) ([]benchRow, error) {
	self, err := executable()
	if err != nil {
		return nil, fmt.Errorf("bench: finding forge's own binary: %w", err)
	}
	args := []string{"--state-dir", cfg.StateDir}
	if g.config != "" {
		args = append(args, "--config", g.config)
	}
	cliRun := func(env ...string) func() error {
		return func() error {
			cmd := exec.CommandContext(ctx, self, append(slices.Clone(args), "run", "print(1)")...)
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("forge run: %w", err)
			}
			if string(out) != "1\n" {
				return fmt.Errorf("forge run: output %q, want \"1\\n\"", out)
			}
			return nil
		}
	}
	defer stopWarm(warmDir(cfg.StateDir))
	bare := measure(n, func() error { return exec.CommandContext(ctx, py, "-c", "print(1)").Run() })
	bare.Name = "bare python3 -c 'print(1)' (host)"
	if err := cliRun()(); err != nil { // the first call: starts the warm runner
		return nil, err
	}
	warm := measure(n, cliRun())
	warm.Name = "cli run p50: forge run 'print(1)', warm runner"
	one := measure(max(n/5, 3), cliRun(warmEnv+"=0"))
	one.Name = "forge run 'print(1)', one-shot (FORGE_RUN_WARM=0)"
	rows := []benchRow{bare, warm, one}
	for i := range rows {
		if bare.P50MS > 0 {
			rows[i].RatioBeside = rows[i].P50MS / bare.P50MS
		}
	}
	return rows, nil
}
