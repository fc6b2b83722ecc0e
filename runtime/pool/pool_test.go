package pool_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/runtime/pool"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

var limits = cgroups.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 64}

func newPool(t *testing.T, size int) *pool.Pool {
	t.Helper()
	return newPoolOpts(t, pool.Options{Size: size})
}

// newPoolOpts is a pool of the base image; opts' zero fields get the
// tests' defaults.
func newPoolOpts(t *testing.T, opts pool.Options) *pool.Pool {
	t.Helper()
	rt, root := testenv.Runtime(t)
	opts.Name, opts.RefillConcurrency, opts.WarmModules = t.Name(), 2, []string{"json", "re"}
	opts.Start = func(ctx context.Context) (*sandbox.Sandbox, error) {
		return rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: limits})
	}
	p := pool.New(opts)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// waitReady polls until the pool holds n ready sandboxes.
func waitReady(t *testing.T, p *pool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.Stats().Ready < n {
		if time.Now().After(deadline) {
			t.Fatalf("pool not filled to %d: %+v", n, p.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func exec(t *testing.T, sb *sandbox.Sandbox, code string) string {
	t.Helper()
	r, err := sb.Exec(context.Background(), code, sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Error != nil {
		return r.Error.Type
	}
	return r.Stdout
}

func TestNoStateCrossesRuns(t *testing.T) {
	p := newPool(t, 2)
	waitReady(t, p, 2)
	ctx := context.Background()
	a, warm, err := p.Acquire(ctx)
	if err != nil || !warm {
		t.Fatalf("Acquire: warm %v err %v", warm, err)
	}
	out := exec(t, a, "import os\nopen('/workspace/f','w').write('x')\nopen('/tmp/g','w').write('y')\nsecret = 42\nprint(os.getpid())")
	a.Destroy()
	waitReady(t, p, 2)
	b, warm, err := p.Acquire(ctx)
	if err != nil || !warm {
		t.Fatalf("Acquire: warm %v err %v", warm, err)
	}
	defer b.Destroy()
	if a.ID() == b.ID() {
		t.Fatalf("same sandbox handed out twice: %s", a.ID())
	}
	got := exec(t, b, "import os\nprint(os.path.exists('/workspace/f'), os.path.exists('/tmp/g'), 'secret' in globals())")
	if got != "False False False\n" {
		t.Errorf("state of the previous run visible: %q (first run printed pid %q)", got, out)
	}
	if a.Pid() == b.Pid() {
		t.Errorf("host pids equal: %d", a.Pid())
	}
}

func TestParallelAcquiresNeverShare(t *testing.T) {
	p := newPool(t, 4)
	waitReady(t, p, 4)
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, _, err := p.Acquire(context.Background())
			if err != nil {
				errs <- err
				return
			}
			defer sb.Destroy()
			mu.Lock()
			dup := seen[sb.ID()]
			seen[sb.ID()] = true
			mu.Unlock()
			if dup {
				errs <- fmt.Errorf("sandbox %s handed out twice", sb.ID())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != 50 {
		t.Errorf("distinct sandboxes %d, want 50", len(seen))
	}
	st := p.Stats()
	if st.Hits+st.Misses != 50 || st.ColdStarts == 0 {
		t.Errorf("counters %+v: want hits+misses = 50 and cold starts > 0 once the pool of 4 ran dry", st)
	}
}

func TestKilledWhilePausedIsReplaced(t *testing.T) {
	p := newPool(t, 1)
	waitReady(t, p, 1)
	// Peek at the ready sandbox's pid through a first acquire-free route:
	// kill every process in the pool's sandboxes from outside.
	pids := p.ReadyPids()
	if len(pids) != 1 {
		t.Fatalf("ready pids %v", pids)
	}
	if err := unix.Kill(pids[0], unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sb, _, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	if sb.Pid() == pids[0] {
		t.Fatalf("the killed sandbox was handed out")
	}
	if got := exec(t, sb, "print('alive')"); got != "alive\n" {
		t.Errorf("replacement: %q", got)
	}
	if st := p.Stats(); st.Replaced != 1 {
		t.Errorf("replaced = %d, want 1 (%+v)", st.Replaced, st)
	}
}

func TestExhaustedFallsBackToCold(t *testing.T) {
	p := newPool(t, 1)
	waitReady(t, p, 1)
	ctx := context.Background()
	a, warm1, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Destroy()
	b, warm2, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	if !warm1 || warm2 {
		t.Errorf("warm = %v, %v; want true, false", warm1, warm2)
	}
	if st := p.Stats(); st.ColdStarts != 1 || st.Hits != 1 {
		t.Errorf("stats %+v, want 1 hit and 1 cold start", st)
	}
}

func TestRequestLimitsInForce(t *testing.T) {
	p := newPool(t, 1)
	waitReady(t, p, 1)
	sb, _, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	if err := sb.SetLimits(cgroups.Limits{MemoryBytes: 64 << 20, CPUs: 1, Pids: 64}); err != nil {
		t.Fatal(err)
	}
	r, err := sb.Exec(context.Background(), "x = bytearray(150 << 20)", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OOMKilled {
		t.Errorf("150m under a 64m request limit (pool default 256m): oom_killed false, error %+v", r.Error)
	}
}

func TestIdleMemory(t *testing.T) {
	p := newPool(t, 1)
	waitReady(t, p, 1)
	u := p.Stats().IdleMemoryBytes
	if u == 0 {
		t.Fatal("no memory figure for the ready sandbox")
	}
	t.Logf("idle pooled sandbox memory: %.1f MiB", float64(u)/(1<<20))
	if u > 16<<20 {
		t.Errorf("idle pooled sandbox holds %d bytes", u)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	rt, _ := testenv.Runtime(t)
	before := rt.Live()
	p := newPool(t, 3)
	waitReady(t, p, 3)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := rt.Live(); got != before {
		t.Errorf("live sandboxes after Close: %d, want %d", got, before)
	}
}

// waitWarm polls until the pool holds n warmed sandboxes.
func waitWarm(t *testing.T, p *pool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for st := p.Stats(); st.Warm < n; st = p.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("pool does not hold %d warm sandboxes: %+v", n, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeClock is a pool clock that moves only when the test says so, so that
// "calm" does not depend on how fast sandboxes start on this machine.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// After the pool ran dry it refills without the warm imports (under load
// they only slow the next sandbox down), and warms in place once calm. The
// pool's clock stands still until the test moves it past the calm period,
// so a slow refill cannot make the pool look calm early.
func TestWarmsOnlyWhenCalm(t *testing.T) {
	const calm = 2 * time.Second
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	// MaxIdleAge (on the fake clock, never reached) sets the refill loop's
	// real-time tick to 1s: the loop looks at the clock again by itself.
	p := newPoolOpts(t, pool.Options{Size: 2, Calm: calm, Now: clock.Now, MaxIdleAge: 4 * time.Second})
	waitWarm(t, p, 2)
	ctx := context.Background()
	hasJSON := func(sb *sandbox.Sandbox) string {
		return exec(t, sb, "import sys\nprint('json' in sys.modules)")
	}
	var taken []*sandbox.Sandbox
	for i := 0; i < 3; i++ { // two hits, then a miss
		sb, _, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, sb)
	}
	if got := hasJSON(taken[0]); got != "True\n" {
		t.Errorf("sandbox from the calm pool: json imported %q, want True", got)
	}
	for _, sb := range taken {
		sb.Destroy()
	}
	waitReady(t, p, 2)
	if st := p.Stats(); st.Warm != 0 {
		t.Errorf("refilled under pressure with warm imports: %+v", st)
	}
	sb, warm, err := p.Acquire(ctx)
	if err != nil || !warm {
		t.Fatalf("acquire: warm %v, %v", warm, err)
	}
	if got := hasJSON(sb); got != "False\n" {
		t.Errorf("sandbox refilled under pressure: json imported %q, want False", got)
	}
	sb.Destroy()

	clock.Advance(calm)
	waitWarm(t, p, 2) // once calm, in place
	sb, warm, err = p.Acquire(ctx)
	if err != nil || !warm {
		t.Fatalf("acquire: warm %v, %v", warm, err)
	}
	defer sb.Destroy()
	if got := hasJSON(sb); got != "True\n" {
		t.Errorf("sandbox warmed once calm: json imported %q, want True", got)
	}
	if st := p.Stats(); st.Replaced != 0 || st.StartErrs != 0 {
		t.Errorf("stats %+v", st)
	}
}

// waitStats polls until ok holds for the pool's counters.
func waitStats(t *testing.T, p *pool.Pool, what string, ok func(pool.Stats) bool) pool.Stats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for st := p.Stats(); ; st = p.Stats() {
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never %s: %+v", what, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A pool of 1 that ran dry grows one sandbox per miss (to MaxSize), fills
// to the new size with real sandboxes, and gives the growth back on its
// clock's idle periods, destroying what it no longer needs.
func TestAdaptiveGrowsAndShrinks(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	// ShrinkAfter 2s sets the refill loop's real-time tick to 1s;
	// MaxIdleAge (fake clock) is never reached.
	p := newPoolOpts(t, pool.Options{Size: 1, MaxSize: 3, ShrinkAfter: 2 * time.Second, MaxIdleAge: time.Hour, Now: clock.Now})
	waitReady(t, p, 1)
	var taken []*sandbox.Sandbox
	// Three misses (a refill may turn some acquires into hits): the first
	// two grow the pool, the third finds it at MaxSize.
	for i := 0; i < 20 && p.Stats().Misses < 3; i++ {
		sb, _, err := p.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, sb)
	}
	for _, sb := range taken {
		sb.Destroy()
	}
	st := waitStats(t, p, "filled to 3", func(st pool.Stats) bool { return st.Ready == 3 })
	if st.Misses != 3 || st.Target != 3 || st.Grown != 2 || st.OverBudget != 1 || st.Shrunk != 0 {
		t.Errorf("after 3 misses: %+v, want target 3, grown 2, over budget 1", st)
	}
	clock.Advance(time.Second) // short idle: kept
	sb, warm, err := p.Acquire(context.Background())
	if err != nil || !warm {
		t.Fatalf("acquire from the grown pool: warm %v, %v", warm, err)
	}
	sb.Destroy()
	waitReady(t, p, 3)
	clock.Advance(2 * time.Second)
	waitStats(t, p, "shrunk to 2", func(st pool.Stats) bool { return st.Target == 2 && st.Ready == 2 })
	clock.Advance(2 * time.Second)
	st = waitStats(t, p, "shrunk to 1", func(st pool.Stats) bool { return st.Target == 1 && st.Ready == 1 && st.Starting == 0 })
	if st.Shrunk != 2 {
		t.Errorf("shrunk %d times, want 2: %+v", st.Shrunk, st)
	}
}

// TestRefillHold: with RefillHold, a take does not start its replacement
// until Release, while the pool still has a ready sandbox; an empty pool
// refills at once, released or not.
func TestRefillHold(t *testing.T) {
	p := newPoolOpts(t, pool.Options{Size: 2, RefillHold: time.Minute})
	waitReady(t, p, 2)
	ctx := context.Background()
	a, _, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Destroy()
	// Nothing may start while a's call runs: watch for a while (the
	// refill loop reacts to the take within microseconds).
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if st := p.Stats(); st.Starting != 0 || st.Ready != 1 {
			t.Fatalf("refill during the hold: %+v", st)
		}
	}
	p.Release()
	waitReady(t, p, 2)

	// Both taken and neither released: the pool refills anyway.
	b, _, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	c, _, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	waitReady(t, p, 1)
}
