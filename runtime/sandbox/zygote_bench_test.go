package sandbox_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
)

// BenchmarkZygoteHelper measures a zygote child, made by the template's C
// helper (the one way a child is made), against a container of the same
// image (the other kind of sandbox): start, print(1), destroy, the two
// runtimes alternating, beside bare `python3 -c 'print(1)'` from the same
// run. Per sandbox: p50 latency, the CPU its own cgroup was charged, and
// the CPU of the whole host per sandbox (/proc/stat: forge, template,
// sandbox, the kernel's teardown, and whatever else runs on the host, the
// same for both).
func BenchmarkZygoteHelper(b *testing.B) {
	crt, root := testenv.Runtime(b)
	zrt := zygoteRuntime(b, sandbox.ZygoteOptions{Warm: profiles.Default().Pool.WarmModules, Templates: 1})
	ctx := context.Background()
	type side struct {
		name     string
		rt       *sandbox.Runtime
		lat      []time.Duration
		cg, host time.Duration
	}
	z, c := &side{name: "zygote", rt: zrt}, &side{name: "container", rt: crt}
	once := func(s *side, keep bool) {
		h0 := hostCPU(b)
		t0 := time.Now()
		sb, err := s.rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: defaultLimits, ImageID: testenv.BaseImageID()})
		if err != nil {
			b.Fatal(err)
		}
		r, err := sb.Exec(ctx, "print(1)", sandbox.ExecOptions{Timeout: 10 * time.Second})
		if err != nil || r.Stdout != "1\n" {
			b.Fatalf("%s: exec: %v %+v", s.name, err, r)
		}
		u, err := sb.Usage()
		if err != nil {
			b.Fatal(err)
		}
		if err := sb.Destroy(); err != nil {
			b.Fatal(err)
		}
		if keep {
			s.lat = append(s.lat, time.Since(t0))
			s.cg += u.CPUTime
			s.host += hostCPU(b) - h0
		}
	}
	once(z, false) // the template starts here
	once(c, false)
	if st := zrt.ZygoteStats(); st.Forks != 1 || st.Fallbacks != 0 {
		b.Fatalf("the zygote runtime: %+v, want its sandbox forked from a template", st)
	}
	bare := barePython(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		once(z, true)
		once(c, true)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	n := time.Duration(b.N)
	b.ReportMetric(ms(bare), "bare-python-ms")
	for _, s := range []*side{z, c} {
		b.ReportMetric(ms(pct(s.lat, 50)), s.name+"-p50-ms")
		b.ReportMetric(float64(pct(s.lat, 50))/float64(bare), s.name+"-ratio")
		b.ReportMetric(ms(s.cg/n), s.name+"-cpu-ms")
		b.ReportMetric(ms(s.host/n), s.name+"-host-cpu-ms")
	}
}

// hostCPU is the CPU time every core of the host has spent busy so far.
func hostCPU(t testing.TB) time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is counted in user already
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * (time.Second / 100) // USER_HZ
}

// BenchmarkSessionCall measures a session's later call on the sandbox path
// in both modes, alternating: resume, print(1), pause, as the session
// manager does between calls. Per mode: the p50 of the whole call and of
// each step, beside bare `python3 -c 'print(1)'`.
func BenchmarkSessionCall(b *testing.B) {
	crt, root := testenv.Runtime(b)
	zrt := zygoteRuntime(b, sandbox.ZygoteOptions{Warm: profiles.Default().Pool.WarmModules, Templates: 1})
	ctx := context.Background()
	type side struct {
		name                string
		sb                  *sandbox.Sandbox
		all, res, run, paus []time.Duration
	}
	var sides []*side
	for _, m := range []struct {
		name string
		rt   *sandbox.Runtime
	}{{"container", crt}, {"zygote", zrt}} {
		sb, err := m.rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: defaultLimits, ImageID: testenv.BaseImageID()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sb.Destroy() })
		if err := sb.Pause(); err != nil {
			b.Fatal(err)
		}
		sides = append(sides, &side{name: m.name, sb: sb})
	}
	bare := barePython(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range sides {
			t0 := time.Now()
			if err := s.sb.Resume(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			r, err := s.sb.Exec(ctx, "print(1)", sandbox.ExecOptions{Timeout: 10 * time.Second, KeepAlive: true})
			if err != nil || r.Stdout != "1\n" {
				b.Fatalf("%s: exec: %v %+v", s.name, err, r)
			}
			t2 := time.Now()
			if err := s.sb.Pause(); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			s.all, s.res, s.run, s.paus = append(s.all, t3.Sub(t0)), append(s.res, t1.Sub(t0)), append(s.run, t2.Sub(t1)), append(s.paus, t3.Sub(t2))
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(bare), "bare-python-ms")
	for _, s := range sides {
		b.ReportMetric(ms(pct(s.all, 50)), s.name+"-p50-ms")
		b.ReportMetric(float64(pct(s.all, 50))/float64(bare), s.name+"-ratio")
		b.ReportMetric(ms(pct(s.res, 50)), s.name+"-resume-ms")
		b.ReportMetric(ms(pct(s.run, 50)), s.name+"-exec-ms")
		b.ReportMetric(ms(pct(s.paus, 50)), s.name+"-pause-ms")
	}
}
