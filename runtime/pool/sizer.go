package pool

import "time"

// sizer decides how many sandboxes the pool keeps: Size while requests are
// served from it, one more for every miss (a request that found it empty)
// up to MaxSize and the memory budget, and half of the growth given back
// each ShrinkAfter without a miss. Growing per miss follows the demand that
// outran the pool; shrinking slowly keeps a pool sized for bursts that come
// back after a short idle. Pure: times come from the pool's clock.
type sizer struct {
	base, max   int
	budget      uint64 // bytes all ready sandboxes may hold; 0: no bound
	shrinkAfter time.Duration

	target     int
	lastMiss   time.Time
	lastShrink time.Time
}

func newSizer(base, maxSize int, budget uint64, shrinkAfter time.Duration) sizer {
	return sizer{base: base, max: max(base, maxSize), budget: budget, shrinkAfter: shrinkAfter, target: base}
}

// limit is the most sandboxes the pool may hold when each holds perSandbox
// bytes (0: not measured yet): MaxSize, lowered by the budget, never below
// Size (what the operator asked for is kept even over budget).
func (z *sizer) limit(perSandbox uint64) int {
	n := z.max
	if z.budget > 0 && perSandbox > 0 {
		n = min(n, int(z.budget/perSandbox))
	}
	return max(n, z.base)
}

// miss records a request the pool could not serve and grows the target by
// one within the limit; it reports whether the target grew.
func (z *sizer) miss(now time.Time, perSandbox uint64) bool {
	z.lastMiss = now
	if z.target >= z.limit(perSandbox) {
		return false
	}
	z.target++
	return true
}

// idle halves the growth after ShrinkAfter without a miss (and again after
// each further ShrinkAfter); it reports whether the target shrank.
func (z *sizer) idle(now time.Time) bool {
	if z.target <= z.base || now.Sub(z.lastMiss) < z.shrinkAfter || now.Sub(z.lastShrink) < z.shrinkAfter {
		return false
	}
	z.target = z.base + (z.target-z.base)/2
	z.lastShrink = now
	return true
}

// want is the target within the limit at the current memory per sandbox
// (which may have risen since the target grew).
func (z *sizer) want(perSandbox uint64) int { return min(z.target, z.limit(perSandbox)) }
