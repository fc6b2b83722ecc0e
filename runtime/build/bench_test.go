package build_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
)

// The benchmarks measure forge beside the same work done on the host in the
// same run, and report the ratio (x_host): the figures of README.md.
//
//	go test -tags '...' -run '^$' -bench . -benchtime 5x ./runtime/build/

const benchSpec = "six==1.16.0"

func benchEngine(b *testing.B, pool bool) *engine.Engine {
	return testenv.Engine(b, false, func(c *profiles.Config) {
		eb := &c.EnvironmentBuilder
		eb.Enabled, eb.AllowedPackages, eb.CABundle = true, []string{"*"}, hostCABundle()
		eb.BuildsPerPeriod = 0
		if pool {
			c.Pool.Enabled, c.Pool.Size = true, 2
		}
	})
}

// hostInstall is the baseline: uv pip install of the spec into a fresh
// venv on the host, with a warm cache of its own, from the same index.
func hostInstall(b *testing.B, cache string) time.Duration {
	b.Helper()
	uv, err := exec.LookPath("uv")
	if err != nil {
		b.Fatal("uv is not installed (scripts/install-deps.sh)")
	}
	venv := filepath.Join(b.TempDir(), "venv")
	env := append(os.Environ(), "UV_CACHE_DIR="+cache, "UV_NO_PROGRESS=1")
	if ca := hostCABundle(); ca != "" {
		env = append(env, "SSL_CERT_FILE="+ca)
	}
	start := time.Now()
	for _, args := range [][]string{{"venv", "-q", "--python", "/usr/bin/python3", venv},
		{"pip", "install", "-q", "--python", venv + "/bin/python", "--compile-bytecode", benchSpec}} {
		cmd := exec.Command(uv, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("uv %v: %v\n%s", args, err, out)
		}
	}
	return time.Since(start)
}

// BenchmarkBuild: a build of one small package from PyPI (uv cache warm)
// vs uv pip install of it into a fresh venv on the host.
func BenchmarkBuild(b *testing.B) {
	ctx := context.Background()
	eng := benchEngine(b, false)
	cache := b.TempDir()
	hostInstall(b, cache) // warm both caches
	name := uniqueName("bench-build")
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{benchSpec}}); err != nil {
		b.Fatal(err)
	}
	var forge, host time.Duration
	for i := 0; i < b.N; i++ {
		if err := eng.RemoveEnvironment(ctx, local, name); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{benchSpec}})
		if err != nil || res.Cached {
			b.Fatalf("build: %v (cached %v)", err, res != nil && res.Cached)
		}
		forge += time.Since(start)
		host += hostInstall(b, cache)
	}
	eng.RemoveEnvironment(ctx, local, name)
	report(b, forge, host)
}

// BenchmarkCacheHit: the second build of the same set vs uv pip install of
// an installed package on the host (uv checks and does nothing).
func BenchmarkCacheHit(b *testing.B) {
	ctx := context.Background()
	eng := benchEngine(b, false)
	name := uniqueName("bench-hit")
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{benchSpec}}); err != nil {
		b.Fatal(err)
	}
	defer eng.RemoveEnvironment(ctx, local, name)
	cache := b.TempDir()
	hostInstall(b, cache)
	venv := filepath.Join(b.TempDir(), "venv")
	uv, _ := exec.LookPath("uv")
	noop := func() time.Duration {
		cmd := exec.Command(uv, "pip", "install", "-q", "--python", venv+"/bin/python", benchSpec)
		cmd.Env = append(os.Environ(), "UV_CACHE_DIR="+cache, "UV_OFFLINE=1")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		return time.Since(start)
	}
	if out, err := exec.Command(uv, "venv", "-q", "--python", "/usr/bin/python3", venv).CombinedOutput(); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	noop()
	var forge, host time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{benchSpec}})
		if err != nil || !res.Cached {
			b.Fatalf("cache hit: %v", err)
		}
		forge += time.Since(start)
		host += noop()
	}
	report(b, forge, host)
}

// BenchmarkWarmRun: a warm (pooled) run in a custom environment vs in the
// base image, alternating.
func BenchmarkWarmRun(b *testing.B) {
	ctx := context.Background()
	eng := benchEngine(b, true)
	name := uniqueName("bench-run")
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{benchSpec}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		deadline := time.Now().Add(10 * time.Second)
		for eng.RemoveEnvironment(ctx, local, name) != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // polling for the pool to let go, with a deadline
		}
	}()
	run := func(image string) time.Duration {
		start := time.Now()
		out, err := eng.Execute(ctx, engine.Request{Principal: local, Code: "print(1)", Image: image})
		if err != nil || !out.Success {
			b.Fatalf("%+v %v", out, err)
		}
		return time.Since(start)
	}
	for _, img := range []string{res.Name, testenv.BaseImage} { // both pools made and filled
		run(img)
	}
	waitFull := func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			full := 0
			for _, st := range eng.PoolStats() {
				if st.Ready >= 1 {
					full++
				}
			}
			if full >= 2 {
				return
			}
			time.Sleep(5 * time.Millisecond) // polling for the refill, with a deadline
		}
	}
	var forge, host time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Each run's refill competes with the run after it: alternate
		// which goes first.
		waitFull()
		if i%2 == 0 {
			forge += run(res.Name)
			host += run(testenv.BaseImage)
		} else {
			host += run(testenv.BaseImage)
			forge += run(res.Name)
		}
	}
	report(b, forge, host)
}

func report(b *testing.B, forge, baseline time.Duration) {
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(forge.Microseconds())/1000/n, "ms/forge")
	b.ReportMetric(float64(baseline.Microseconds())/1000/n, "ms/baseline")
	b.ReportMetric(float64(forge)/float64(baseline), "x_baseline")
	b.ReportMetric(0, "ns/op")
}
