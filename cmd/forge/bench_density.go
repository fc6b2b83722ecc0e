package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// densityReport is forge bench --density N: what N live sessions cost on
// this host, each holding a DataFrame (the data image) or a list, beside
// bare python3 -c in the same run.
type densityReport struct {
	Sessions int    `json:"sessions"`
	Image    string `json:"image"`
	Failures int    `json:"failures"`
	// Host memory per live session: the delta of a private parent
	// cgroup's memory charge over the N sessions, / N.
	MemoryPerSessionMiB float64 `json:"memory_per_session_mib"`
	BareRSSMiB          float64 `json:"bare_python_rss_mib"`
	CreateP50MS         float64 `json:"create_p50_ms"`
	CreateMeanMS        float64 `json:"create_mean_ms"`
	LaterCallP50MS      float64 `json:"later_call_p50_ms"`
	LaterCallP95MS      float64 `json:"later_call_p95_ms"`
	// LaterExecP50MS is the p50 of the later calls' execution_time_ms:
	// the agent's side (thaw to answer, the code included); the rest of
	// a call is forge's own.
	LaterExecP50MS float64 `json:"later_exec_p50_ms"`
	// CPU time per later call, whoever spent it: forge's process (user +
	// system) and the sandboxes of the private parent cgroup. Wall time
	// on a shared host moves with its load; these do not.
	LaterForgeCPUMS   float64 `json:"later_forge_cpu_ms"`
	LaterSandboxCPUMS float64 `json:"later_sandbox_cpu_ms"`
	// AgainP50MS is a second round of the same calls, on the same
	// sessions in the same order: the code paths a first later call runs for the first time
	// in its forked child (copy-on-write faults of the template's pages)
	// are then its own.
	AgainP50MS float64 `json:"again_call_p50_ms"`
	BareP50MS  float64 `json:"bare_p50_ms"`
	StopMS     float64 `json:"stop_ms"`
}

// benchDensity creates n sessions one after another in a private parent
// cgroup, then calls random ones, then stops (destroying them).
func benchDensity(ctx context.Context, g *globals, cfg *profiles.Config, py, image string, n int, asJSON bool) error {
	rep := densityReport{Sessions: n}
	bare := measure(20, func() error { return exec.CommandContext(ctx, py, "-c", "print(1)").Run() })
	rep.BareP50MS = bare.P50MS
	if out, err := exec.CommandContext(ctx, py, "-c", "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)").Output(); err == nil {
		kb, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		rep.BareRSSMiB = kb / 1024
	}

	c := *cfg
	parent := fmt.Sprintf("forge-density-%d", os.Getpid())
	c.Limits.CgroupParent = parent
	c.Sessions.MaxConcurrent = max(c.Sessions.MaxConcurrent, n+10)
	c.Sessions.Persist = false // Close destroys them: nothing left on disk
	c.Sessions.IdleTimeout = profiles.Duration(24 * time.Hour)
	code := "x = list(range(1000))"
	check := "x[999]"
	if image == "" && c.Images.Data != "" {
		image = c.Images.Data
	}
	if image != "" && (image == c.Images.Data || strings.HasPrefix(image, "forge/python-data:")) {
		code = "import pandas as pd\ndf = pd.DataFrame({'a': range(1000), 'b': [float(i) for i in range(1000)]})"
		check = "int(df['a'].sum())"
	}
	rep.Image = image
	eng, err := engine.New(ctx, engine.Options{Config: &c, Logger: g.log})
	if err != nil {
		return err
	}
	defer sandbox.RemoveParent(parent)
	ids := make([]string, n+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("density-%d-%d", os.Getpid(), i)
	}
	var execMS []float64 // of the later calls
	call := func(id, code string) error {
		ms, err := runDensity(ctx, eng, engine.Request{Principal: engine.LocalPrincipal, SessionID: id, Image: image, Client: "bench", Code: code})
		if err == nil && code == check {
			execMS = append(execMS, ms)
		}
		return err
	}
	// One session first, untimed: the image's template exists before the
	// baseline is read.
	if err := call(ids[n], code); err != nil {
		eng.Close(time.Second)
		return fmt.Errorf("bench --density: the first session: %w", err)
	}
	before, err := sandbox.ParentMemory(parent)
	if err != nil {
		eng.Close(time.Second)
		return fmt.Errorf("bench --density: reading the parent cgroup's memory: %w", err)
	}
	i := 0
	start := time.Now()
	create := measure(n, func() error {
		err := call(ids[i], code)
		i++
		return err
	})
	rep.CreateMeanMS = float64(time.Since(start).Microseconds()) / 1000 / float64(n)
	rep.CreateP50MS = create.P50MS
	rep.Failures = create.Failures
	after, err := sandbox.ParentMemory(parent)
	if err == nil {
		rep.MemoryPerSessionMiB = float64(after-before) / float64(n) / (1 << 20)
	}
	calls := min(max(n, 200), 1000)
	cpu0, sbCPU0 := processCPU(), parentCPU(parent)
	picks := make([]string, 0, calls)
	later := measure(calls, func() error {
		picks = append(picks, ids[rand.IntN(n)])
		return call(picks[len(picks)-1], check)
	})
	// The last calls' pauses come after their answers: let them happen.
	time.Sleep(100 * time.Millisecond)
	rep.LaterForgeCPUMS = float64((processCPU() - cpu0).Microseconds()) / 1000 / float64(calls)
	rep.LaterSandboxCPUMS = float64((parentCPU(parent) - sbCPU0).Microseconds()) / 1000 / float64(calls)
	rep.LaterCallP50MS, rep.LaterCallP95MS = later.P50MS, later.P95MS
	if len(execMS) > 0 {
		slices.Sort(execMS)
		rep.LaterExecP50MS = execMS[len(execMS)/2]
	}
	rep.Failures += later.Failures
	j := 0
	again := measure(calls, func() error {
		j++
		return call(picks[(j-1)%len(picks)], check)
	})
	rep.AgainP50MS = again.P50MS
	rep.Failures += again.Failures
	stop := time.Now()
	if err := eng.Close(time.Second); err != nil {
		return err
	}
	rep.StopMS = float64(time.Since(stop).Microseconds()) / 1000
	return rep.print(g.stdout, asJSON)
}

// processCPU is the CPU time forge's process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parentCPU is the CPU time of the sandboxes below parent so far (0 when it
// cannot be read).
func parentCPU(parent string) time.Duration {
	d, _ := sandbox.ParentCPU(parent)
	return d
}

// runDensity runs one call and returns its execution_time_ms.
func runDensity(ctx context.Context, eng *engine.Engine, req engine.Request) (float64, error) {
	res, err := eng.Execute(ctx, req)
	if err != nil {
		return 0, err
	}
	if !res.Success {
		return 0, fmt.Errorf("session %s: %+v", req.SessionID, res.Error)
	}
	return res.ExecutionTimeMS, nil
}

func (r densityReport) print(w io.Writer, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	fmt.Fprintf(w, "%d live sessions of %s (failures: %d), beside bare python3 -c in the same run\n", r.Sessions, r.Image, r.Failures)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tforge\tbare python\t× bare")
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	fmt.Fprintf(tw, "host memory per session (MiB; bare: RSS)\t%.2f\t%.2f\t%s\n", r.MemoryPerSessionMiB, r.BareRSSMiB, ratio(r.MemoryPerSessionMiB, r.BareRSSMiB))
	fmt.Fprintf(tw, "creation per session, p50 ms (mean %.2f)\t%.2f\t%.2f\t%s\n", r.CreateMeanMS, r.CreateP50MS, r.BareP50MS, ratio(r.CreateP50MS, r.BareP50MS))
	fmt.Fprintf(tw, "later call, p50 ms (p95 %.2f)\t%.2f\t%.2f\t%s\n", r.LaterCallP95MS, r.LaterCallP50MS, r.BareP50MS, ratio(r.LaterCallP50MS, r.BareP50MS))
	fmt.Fprintf(tw, "  of which the agent's exec, p50 ms\t%.2f\t\t\n", r.LaterExecP50MS)
	fmt.Fprintf(tw, "  CPU per call, ms: forge's process, sandboxes\t%.2f, %.2f\t\t\n", r.LaterForgeCPUMS, r.LaterSandboxCPUMS)
	fmt.Fprintf(tw, "later call again (second round), p50 ms\t%.2f\t%.2f\t%s\n", r.AgainP50MS, r.BareP50MS, ratio(r.AgainP50MS, r.BareP50MS))
	fmt.Fprintf(tw, "stop, destroying all (ms)\t%.0f\t\t\n", r.StopMS)
	return tw.Flush()
}
