package engine_test

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
)

// BenchmarkExecuteCold measures stateless engine.Execute of print(1) with
// the pool off (every run a fresh sandbox, destroyed after it), in the mode
// of testenv.ModeEnv, beside bare `python3 -c 'print(1)'` from the same
// run: the engine path of what runtime/sandbox's BenchmarkCold measures on
// the sandbox path. It also reports create-run-destroy throughput at
// concurrency 4 over a sequential bare-python loop.
func BenchmarkExecuteCold(b *testing.B) {
	eng := testenv.Engine(b, false, func(c *profiles.Config) { c.Pool.Enabled = false })
	benchExecute(b, eng)
}

// BenchmarkExecuteZygote is BenchmarkExecuteCold in zygote mode whatever
// testenv.ModeEnv says, with the pool off and on.
func BenchmarkExecuteZygote(b *testing.B) {
	for _, pool := range []bool{false, true} {
		b.Run(fmt.Sprintf("pool=%t", pool), func(b *testing.B) {
			eng := testenv.Engine(b, false, func(c *profiles.Config) {
				c.Sandbox.Mode = string(sandbox.ModeZygote)
				c.Pool.Enabled = pool
			})
			if pool {
				eng.Prewarm()
			}
			benchExecute(b, eng)
		})
	}
}

func benchExecute(b *testing.B, eng *engine.Engine) {
	ctx := context.Background()
	req := engine.Request{Principal: engine.LocalPrincipal, Code: "print(1)", Client: "bench"}
	run := func() error {
		res, err := eng.Execute(ctx, req)
		if err == nil && res.Stdout != "1\n" {
			err = fmt.Errorf("stdout %q, error %+v", res.Stdout, res.Error)
		}
		return err
	}
	if err := run(); err != nil { // a zygote's template starts here, untimed
		b.Fatal(err)
	}
	bare := func() error { return exec.Command("/usr/bin/python3", "-c", "print(1)").Run() }
	bareLat, _ := timed(b, 1, 20, bare)
	_, loopRate := timed(b, 1, 20, bare)
	cpu0 := processCPU()
	b.ResetTimer()
	lat, _ := timed(b, 1, b.N, run)
	cpu := processCPU() - cpu0
	_, rate4 := timed(b, 4, max(b.N, 40), run)
	b.StopTimer()
	b.ReportMetric(ms(cpu)/float64(b.N), "forge-cpu-ms/op")
	b.ReportMetric(ms(pctl(lat, 50)), "p50-ms")
	b.ReportMetric(ms(pctl(bareLat, 50)), "bare-python-ms")
	b.ReportMetric(float64(pctl(lat, 50))/float64(pctl(bareLat, 50)), "ratio")
	b.ReportMetric(rate4/loopRate, "c4/loop")
}

// timed runs f n times from conc goroutines: the latencies and runs/s.
func timed(b *testing.B, conc, n int, f func() error) ([]time.Duration, float64) {
	var mu sync.Mutex
	var lat []time.Duration
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				t := time.Now()
				if err := f(); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(t))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, float64(len(lat)) / time.Since(start).Seconds()
}

func pctl(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[(len(s)-1)*p/100]
}

// processCPU is the CPU time forge's own process (this test binary) used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
