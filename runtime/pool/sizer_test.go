package pool

import (
	"testing"
	"time"
)

// The sizer's decisions on the pool's clock: grow one per miss up to
// MaxSize, bounded by the memory budget, halve the growth per idle period.
func TestSizerGrowsWithMissesAndShrinksWhenIdle(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	z := newSizer(2, 10, 0, time.Minute)
	for i := 0; i < 20; i++ {
		z.miss(t0.Add(time.Duration(i)*time.Millisecond), 5<<20)
	}
	if z.target != 10 {
		t.Fatalf("after 20 misses target %d, want MaxSize 10", z.target)
	}
	last := t0.Add(19 * time.Millisecond)
	for _, tc := range []struct {
		at   time.Duration // after the last miss
		want int
	}{
		{2 * time.Second, 10},                // a short idle keeps the growth for the next burst
		{time.Minute - time.Millisecond, 10}, // not yet
		{time.Minute, 6},                     // half of the growth (8) given back
		{time.Minute + 30*time.Second, 6},    // one step per period
		{2 * time.Minute, 4},                 //
		{3 * time.Minute, 3},                 //
		{4 * time.Minute, 2},                 // back to Size
		{10 * time.Minute, 2},                // never below
	} {
		z.idle(last.Add(tc.at))
		if z.target != tc.want {
			t.Errorf("%v after the last miss: target %d, want %d", tc.at, z.target, tc.want)
		}
	}
	// A miss restarts the idle period.
	z.miss(last.Add(11*time.Minute), 5<<20)
	if z.idle(last.Add(11*time.Minute + 30*time.Second)); z.target != 3 {
		t.Errorf("after a new miss: target %d, want 3", z.target)
	}
}

func TestSizerMemoryBudget(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name       string
		base, max  int
		budget     uint64
		perSandbox uint64
		want       int
	}{
		{"budget binds", 2, 32, 100 << 20, 10 << 20, 10},
		{"max binds", 2, 8, 1 << 30, 10 << 20, 8},
		{"no budget", 2, 16, 0, 10 << 20, 16},
		{"not measured yet", 2, 16, 100 << 20, 0, 16},
		{"size kept over budget", 4, 16, 10 << 20, 10 << 20, 4},
		{"fixed pool", 2, 0, 0, 10 << 20, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := newSizer(tc.base, tc.max, tc.budget, time.Minute)
			for i := 0; i < 50; i++ {
				z.miss(now, tc.perSandbox)
			}
			if got := z.want(tc.perSandbox); got != tc.want {
				t.Errorf("target after 50 misses %d, want %d", got, tc.want)
			}
		})
	}
	// Memory per sandbox that rose after the growth lowers what is filled.
	z := newSizer(2, 32, 100<<20, time.Minute)
	for i := 0; i < 50; i++ {
		z.miss(now, 5<<20)
	}
	if got := z.want(25 << 20); got != 4 {
		t.Errorf("at 25 MiB a sandbox within 100 MiB: fill to %d, want 4", got)
	}
}
