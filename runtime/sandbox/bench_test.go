package sandbox_test

import (
	"context"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// BenchmarkCold measures create + run print(1) + destroy of a sandbox (as the
// engine starts them: with the image's agent bytecode), and reports bare
// `python3 -c 'print(1)'` on the host from the same run.
func BenchmarkCold(b *testing.B) {
	rt, root := setup(b)
	bare := barePython(b)
	ctx := context.Background()
	var lat []time.Duration
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: defaultLimits, ImageID: testenv.BaseImageID()})
		if err != nil {
			b.Fatal(err)
		}
		r, err := sb.Exec(ctx, "print(1)", sandbox.ExecOptions{Timeout: 10 * time.Second})
		if err != nil || r.Stdout != "1\n" {
			b.Fatalf("exec: %v %+v", err, r)
		}
		if err := sb.Destroy(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "forge-cpu-ms/op")
	p50 := pct(lat, 50)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(bare.Microseconds())/1000, "bare-python-ms")
	b.ReportMetric(float64(p50)/float64(bare), "ratio")
}

// processCPU is the CPU time of this process (forge's side of a sandbox:
// the template's and the children's are in their cgroups).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// barePython is the median of 20 bare `python3 -c 'print(1)'` runs on the
// host: the baseline each benchmark measures beside itself.
func barePython(b testing.TB) time.Duration {
	return median(20, func() {
		if err := exec.Command("/usr/bin/python3", "-c", "print(1)").Run(); err != nil {
			b.Fatal(err)
		}
	})
}

func median(n int, f func()) time.Duration {
	var d []time.Duration
	for i := 0; i < n; i++ {
		s := time.Now()
		f()
		d = append(d, time.Since(s))
	}
	return pct(d, 50)
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

// BenchmarkWarmExec measures one Exec of print(1) in a running sandbox (what a pooled or
// session run costs after acquiring it: the round trip and the host's accounting of the
// result), with bare `python3 -c 'print(1)'` from the same run as the baseline.
func BenchmarkWarmExec(b *testing.B) {
	bare := barePython(b)
	sb := start(b, sandbox.Config{Limits: defaultLimits})
	ctx := context.Background()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r, err := sb.Exec(ctx, "print(1)", sandbox.ExecOptions{Timeout: 10 * time.Second})
		if err != nil || r.Stdout != "1\n" {
			b.Fatalf("exec: %v %+v", err, r)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	p50 := pct(lat, 50)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p50)/float64(bare), "ratio")
}

// BenchmarkColdBudgets measures what the kernel budgets (a dozen user.*
// sysctls written at each start) add to a cold start: runs alternate
// between the shared runtime and one that found no host limits to divide
// (its ProcRoot is empty), and the ratio of their p50s is reported.
func BenchmarkColdBudgets(b *testing.B) {
	with, root := setup(b)
	without, err := sandbox.NewRuntime(context.Background(), sandbox.Options{StateDir: testutil.StateDirPath(), ProcRoot: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer without.Close()
	if len(without.Budgets()) != 0 || len(with.Budgets()) == 0 {
		b.Fatalf("budgets: %v and %v, want none and some", without.Budgets(), with.Budgets())
	}
	ctx := context.Background()
	once := func(rt *sandbox.Runtime) time.Duration {
		start := time.Now()
		sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: defaultLimits, ImageID: testenv.BaseImageID()})
		if err != nil {
			b.Fatal(err)
		}
		if r, err := sb.Exec(ctx, "print(1)", sandbox.ExecOptions{Timeout: 10 * time.Second}); err != nil || r.Stdout != "1\n" {
			b.Fatalf("exec: %v %+v", err, r)
		}
		if err := sb.Destroy(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var latWith, latWithout []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		latWithout = append(latWithout, once(without))
		latWith = append(latWith, once(with))
	}
	b.StopTimer()
	b.ReportMetric(float64(pct(latWithout, 50).Microseconds())/1000, "p50-none-ms")
	b.ReportMetric(float64(pct(latWith, 50).Microseconds())/1000, "p50-budgets-ms")
	b.ReportMetric(float64(pct(latWith, 50))/float64(pct(latWithout, 50)), "ratio")
}
