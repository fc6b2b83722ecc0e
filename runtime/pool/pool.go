// Package pool keeps pre-started, paused sandboxes whose agent is already
// running and has imported what most code needs, so that a stateless run
// pays only for resume and exec. A pooled sandbox is handed to exactly one
// request and destroyed after it: never reused once user code ran in it.
//
// Warm imports cost CPU in every pooled sandbox (about 10 ms for the default
// list), which is worth it while the host has CPU to spare and pure waste
// when requests outrun the pool: then every sandbox is taken as soon as it
// exists and the imports only slow down the next one. So the pool warms a
// new sandbox only when it has not run dry recently (no miss within
// Options.Calm); under pressure it keeps sandboxes unwarmed and warms them
// later, in place, once requests calm down. Acquire prefers warm sandboxes.
//
// The pool's size adapts (sizer.go): every miss raises its target by one,
// up to Options.MaxSize and Options.MemoryBudget, and each ShrinkAfter
// without a miss gives half of the growth back, so bursts that return after
// a short pause find a pool of their size.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mcp-forge/forge/runtime/sandbox"
)

// refillSettle is how long after a request took a sandbox the pool waits
// before refilling past Size: a burst drains a grown pool without sandbox
// starts competing with it for CPU, and the growth is refilled in the pause
// after it. Below Size the pool refills at once.
const refillSettle = 100 * time.Millisecond

// Status is the state of one pool slot.
type Status int

const (
	// Starting: the sandbox is being created and warmed.
	Starting Status = iota
	// Ready: paused in the pool, never given to anyone.
	Ready
	// Warming: taken out of the pool to be warmed, then paused again.
	Warming
	// Acquired: handed to one request; it will be destroyed after it.
	Acquired
	// Destroyed: gone.
	Destroyed
)

func (s Status) String() string {
	switch s {
	case Starting:
		return "starting"
	case Ready:
		return "ready"
	case Warming:
		return "warming"
	case Acquired:
		return "acquired"
	case Destroyed:
		return "destroyed"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// StartFunc creates a running sandbox for the pool; the pool warms and
// pauses it.
type StartFunc func(ctx context.Context) (*sandbox.Sandbox, error)

// Options configure a Pool.
type Options struct {
	Name string // for logs and stats, e.g. the image
	Size int    // sandboxes kept ready; 0 disables the pool (every Acquire is cold)
	// MaxSize is the most sandboxes the pool grows to while requests
	// outrun it (one more per miss); <= Size keeps it at Size.
	MaxSize int
	// MemoryBudget bounds the growth: the ready sandboxes together hold at
	// most this many bytes (their measured memory charge); 0: MaxSize only.
	MemoryBudget uint64
	// ShrinkAfter: after this long without a miss, the pool gives back half
	// of its growth, and again after each further period; default 1m.
	ShrinkAfter time.Duration
	// MaxIdleAge recycles a ready sandbox that waited this long.
	MaxIdleAge time.Duration
	// RefillConcurrency bounds sandboxes started at once in the background.
	RefillConcurrency int
	// WarmModules are imported in each sandbox before it is paused, or
	// later while the pool is calm (see Calm). Warming also runs an empty
	// cell, so the first request does not pay for the agent's first exec.
	WarmModules []string
	// Calm is how long after the pool last ran dry (a miss) it warms new
	// sandboxes again; default 2s.
	Calm time.Duration
	// RefillHold delays the refill after a take until the taker calls
	// Release, at most this long, while the pool still has a ready sandbox:
	// a short call then does not share the CPU with the start of its own
	// replacement (measured: a hosted tool call took 3 ms beside the boot of
	// the next sandbox, 1 ms without). 0 refills at once.
	RefillHold time.Duration
	Start      StartFunc
	// Now is the pool's clock (default time.Now): calm periods and idle
	// ages are measured on it, so tests can hold time still.
	Now    func() time.Time
	Logger *slog.Logger
}

type slot struct {
	sb      *sandbox.Sandbox
	status  Status
	readyAt time.Time
	warm    bool   // WarmModules imported
	mem     uint64 // its memory charge when it became ready (paused, it stays); 0 unknown
}

// move changes a slot's status, which must be from: a slot leaves Ready
// exactly once, so no sandbox is handed out twice or after being retired.
// Called with p.mu held (or, in Close, after the slot left the pool).
func (s *slot) move(from, to Status) {
	if s.status != from {
		panic(fmt.Sprintf("pool: sandbox %s is %s, want %s before %s", s.sb.ID(), s.status, from, to))
	}
	s.status = to
}

// Stats are the pool's counters.
type Stats struct {
	Name       string `json:"name"`
	Size       int    `json:"size"`
	Ready      int    `json:"ready"`
	Starting   int    `json:"starting"`
	Hits       uint64 `json:"hits"`
	Misses     uint64 `json:"misses"`
	ColdStarts uint64 `json:"cold_starts"`
	Warm       int    `json:"warm"`     // ready sandboxes with the warm modules imported
	Replaced   uint64 `json:"replaced"` // ready sandboxes found dead and replaced
	Recycled   uint64 `json:"recycled"` // ready sandboxes retired at max idle age
	StartErrs  uint64 `json:"start_errors"`
	// IdleMemoryBytes is the mean memory charge of the ready sandboxes, each
	// read when it became ready: paused, a sandbox's charge stays.
	IdleMemoryBytes uint64 `json:"idle_memory_bytes"`
	// Target is the size the pool fills to now: Size, or more after misses.
	Target int    `json:"target"`
	Grown  uint64 `json:"grown"`  // misses that raised the target
	Shrunk uint64 `json:"shrunk"` // idle periods that lowered it
	// OverBudget counts misses that could not grow the pool: MaxSize or
	// MemoryBudget reached.
	OverBudget uint64 `json:"over_budget"`
}

// Pool is a pool of ready sandboxes of one image and profile.
type Pool struct {
	opts   Options
	log    *slog.Logger
	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	ready    []*slot // FIFO: oldest first
	starting int
	warming  bool      // a warmOne runs
	lastMiss time.Time // when Acquire last found the pool empty
	sz       sizer
	memPer   uint64      // running mean of a ready sandbox's memory charge
	lastTake time.Time   // wall clock: when a request last took a ready sandbox
	settle   *time.Timer // kicks the refill refillSettle after the last take
	held     int         // takes not yet released (RefillHold)
	heldAt   time.Time   // when held last went from 0 to 1
	hold     *time.Timer // kicks the refill RefillHold after heldAt
	stats    Stats
	closed   bool
}

// New creates a pool and starts filling it in the background.
func New(opts Options) *Pool {
	if opts.RefillConcurrency <= 0 {
		opts.RefillConcurrency = 1
	}
	if opts.MaxIdleAge <= 0 {
		opts.MaxIdleAge = 10 * time.Minute
	}
	if opts.Calm <= 0 {
		opts.Calm = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ShrinkAfter <= 0 {
		opts.ShrinkAfter = time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{opts: opts, log: opts.Logger.With("pool", opts.Name), wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	p.stats.Name, p.stats.Size = opts.Name, opts.Size
	p.sz = newSizer(opts.Size, opts.MaxSize, opts.MemoryBudget, opts.ShrinkAfter)
	if opts.Size > 0 {
		p.wg.Add(1)
		go p.refillLoop()
		p.kick()
	}
	return p
}

func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Acquire hands out a ready sandbox, resumed and checked alive, or starts a
// cold one when none is ready. warm says which it was. The caller owns the
// sandbox and must destroy it.
func (p *Pool) Acquire(ctx context.Context) (sb *sandbox.Sandbox, warm bool, err error) {
	for {
		s := p.take()
		if s == nil {
			break
		}
		if err := p.wakeUp(ctx, s.sb); err != nil {
			p.log.Warn("ready sandbox was dead; replacing it", "sandbox", s.sb.ID(), "err", err)
			p.count(func(st *Stats) { st.Replaced++ })
			p.destroyAsync(s.sb)
			continue
		}
		p.count(func(st *Stats) { st.Hits++ })
		p.kick()
		return s.sb, true, nil
	}
	p.count(func(st *Stats) { st.Misses++; st.ColdStarts++ })
	p.mu.Lock()
	p.lastMiss = p.opts.Now()
	if p.opts.Size > 0 {
		if p.sz.miss(p.lastMiss, p.memPer) {
			p.stats.Grown++
		} else {
			p.stats.OverBudget++
		}
	}
	p.mu.Unlock()
	p.kick()
	// Once calm, unwarmed sandboxes get their imports (see warmOne).
	time.AfterFunc(p.opts.Calm+10*time.Millisecond, p.kick)
	sb, err = p.opts.Start(ctx)
	return sb, false, err
}

// take removes the oldest warm ready slot (else the oldest ready one) and
// marks it acquired: from here no one else can see it.
func (p *Pool) take() *slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 || p.closed {
		return nil
	}
	i := 0
	for j, s := range p.ready {
		if s.warm {
			i = j
			break
		}
	}
	s := p.ready[i]
	p.ready = append(p.ready[:i], p.ready[i+1:]...)
	s.move(Ready, Acquired)
	p.lastTake = time.Now()
	if p.settle == nil {
		p.settle = time.AfterFunc(refillSettle, p.kick)
	} else {
		p.settle.Reset(refillSettle)
	}
	if p.opts.RefillHold > 0 {
		if p.held == 0 {
			p.heldAt = p.lastTake
			if p.hold == nil {
				p.hold = time.AfterFunc(p.opts.RefillHold, p.kick)
			} else {
				p.hold.Reset(p.opts.RefillHold)
			}
		}
		p.held++
	}
	return s
}

// Release says that a sandbox taken from the pool has done its work: with
// Options.RefillHold, the refill the take held back starts now. Calling it
// for a cold sandbox, or more than once, is harmless.
func (p *Pool) Release() {
	p.mu.Lock()
	if p.held > 0 {
		p.held--
	}
	p.mu.Unlock()
	p.kick()
}

// calm reports whether the pool has not run dry for Options.Calm. p.mu held.
func (p *Pool) calm() bool {
	return p.lastMiss.IsZero() || p.opts.Now().Sub(p.lastMiss) >= p.opts.Calm
}

// wakeUp resumes a paused sandbox and pings its agent: a sandbox killed
// while frozen only dies once thawed, so liveness is checked after resume.
func (p *Pool) wakeUp(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := thaw(sb); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return sb.Client().Ping(pctx)
}

// thaw resumes a paused sandbox unless it is dead or dying: one killed while
// frozen only dies once thawed.
func thaw(sb *sandbox.Sandbox) error {
	if err := sb.Healthy(); err != nil {
		return err
	}
	return sb.Resume()
}

func (p *Pool) count(f func(*Stats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.stats)
}

// Stats returns a snapshot of the counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	st := p.stats
	st.Ready, st.Starting, st.Target = len(p.ready), p.starting, p.sz.want(p.memPer)
	var sum, n uint64
	for _, s := range p.ready {
		if s.warm {
			st.Warm++
		}
		if s.mem > 0 {
			sum, n = sum+s.mem, n+1
		}
	}
	p.mu.Unlock()
	if n > 0 {
		st.IdleMemoryBytes = sum / n
	}
	return st
}

// refillLoop keeps the pool at its size and retires sandboxes past their
// idle age.
func (p *Pool) refillLoop() {
	defer p.wg.Done()
	sem := make(chan struct{}, p.opts.RefillConcurrency)
	tick := time.NewTicker(max(min(p.opts.MaxIdleAge/4, p.opts.ShrinkAfter/2), time.Second))
	defer tick.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
			p.recycleOld()
			p.shrink()
		}
		for p.reserve() {
			select {
			case sem <- struct{}{}:
			case <-p.ctx.Done():
				p.unreserve()
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-sem }()
				p.fillOne()
			}()
		}
		if s := p.reserveWarming(); s != nil {
			select {
			case sem <- struct{}{}:
			case <-p.ctx.Done():
				p.finishWarming(s, errors.New("pool closing"))
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-sem }()
				p.finishWarming(s, p.warm(s.sb, true))
				p.kick() // the next one
			}()
		}
	}
}

// reserveWarming takes the oldest unwarmed ready slot out of the pool to be
// warmed, when the pool is full, calm, and warms nothing else.
func (p *Pool) reserveWarming() *slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.warming || p.starting > 0 ||
		len(p.ready) < p.sz.want(p.memPer) || !p.calm() {
		return nil
	}
	for i, s := range p.ready {
		if !s.warm {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			s.move(Ready, Warming)
			p.warming = true
			return s
		}
	}
	return nil
}

// finishWarming puts a warmed slot back (or destroys it after an error, or
// when the pool closed meanwhile).
func (p *Pool) finishWarming(s *slot, err error) {
	var mem uint64
	if err == nil {
		mem = memoryOf(s.sb)
	}
	p.mu.Lock()
	p.warming = false
	if err == nil && !p.closed {
		s.move(Warming, Ready)
		s.warm, s.mem = true, mem
		p.ready = append(p.ready, s)
		p.mu.Unlock()
		return
	}
	s.move(Warming, Destroyed)
	p.mu.Unlock()
	if err != nil && p.ctx.Err() == nil {
		p.log.Warn("warming pooled sandbox", "sandbox", s.sb.ID(), "err", err)
	}
	p.destroyAsync(s.sb)
}

// reserve claims one start if the pool is short of its size.
func (p *Pool) reserve() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.ready) + p.starting
	if p.closed || n >= p.sz.want(p.memPer) ||
		(n >= p.opts.Size && time.Since(p.lastTake) < refillSettle) ||
		(p.held > 0 && len(p.ready) > 0 && time.Since(p.heldAt) < p.opts.RefillHold) {
		return false
	}
	p.starting++
	return true
}

func (p *Pool) unreserve() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
}

// fillOne starts one sandbox, warms it unless the pool ran dry recently,
// pauses it and adds it to the pool.
func (p *Pool) fillOne() {
	sb, warm, err := p.prepare()
	var mem uint64
	if err == nil {
		mem = memoryOf(sb) // paused: what it holds while it waits
	}
	p.mu.Lock()
	p.starting--
	if err != nil && p.ctx.Err() != nil {
		// Closing: a start cut short is not a failure.
		p.mu.Unlock()
		p.log.Debug("pooled sandbox start cancelled by shutdown", "err", err)
		return
	}
	if err != nil {
		p.stats.StartErrs++
		p.mu.Unlock()
		p.log.Warn("starting pooled sandbox", "err", err)
		// Back off so a broken image does not spin.
		select {
		case <-time.After(time.Second):
			p.kick()
		case <-p.ctx.Done():
		}
		return
	}
	if p.closed {
		p.mu.Unlock()
		_ = sb.Destroy()
		return
	}
	p.ready = append(p.ready, &slot{sb: sb, status: Ready, readyAt: p.opts.Now(), warm: warm, mem: mem})
	p.fold(mem)
	p.mu.Unlock()
	p.kick() // a full pool may warm what it holds unwarmed
	p.log.Debug("sandbox ready in pool", "sandbox", sb.ID())
}

// prepare starts a sandbox, warms it if the pool is calm at that point, and
// pauses it.
func (p *Pool) prepare() (_ *sandbox.Sandbox, warm bool, retErr error) {
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	sb, err := p.opts.Start(ctx)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		if retErr != nil {
			_ = sb.Destroy()
		}
	}()
	p.mu.Lock()
	// Also warm once the pool holds its base size again: requests are
	// served from it, and a grown pool refilling after a burst should hand
	// the next burst warm sandboxes.
	warm = p.calm() || (p.sz.target > p.opts.Size && len(p.ready) >= p.opts.Size)
	p.mu.Unlock()
	if warm {
		if err := p.warm(sb, false); err != nil {
			return nil, false, err
		}
	}
	if err := sb.Pause(); err != nil {
		return nil, false, err
	}
	return sb, warm, nil
}

// warm imports the warm modules in sb (resuming it first and pausing it
// again after, when it is paused).
func (p *Pool) warm(sb *sandbox.Sandbox, paused bool) error {
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	if paused {
		if err := thaw(sb); err != nil {
			return err
		}
	}
	if _, err := sb.Client().Warm(ctx, p.opts.WarmModules); err != nil {
		return fmt.Errorf("warming sandbox %s: %w", sb.ID(), err)
	}
	if paused {
		return sb.Pause()
	}
	return nil
}

// memoryOf is sb's memory charge, 0 when unknown.
func memoryOf(sb *sandbox.Sandbox) uint64 {
	m, err := sb.MemoryCurrent()
	if err != nil {
		return 0
	}
	return m
}

// fold folds a new ready sandbox's memory charge m into the running mean
// the memory budget is checked against. p.mu held.
func (p *Pool) fold(m uint64) {
	if m == 0 {
		return
	}
	if p.memPer == 0 {
		p.memPer = m
	} else {
		p.memPer = (3*p.memPer + m) / 4
	}
}

// shrink gives back growth after an idle period (see sizer.idle) and
// destroys the ready sandboxes over the new target, unwarmed ones first,
// then the oldest.
func (p *Pool) shrink() {
	p.mu.Lock()
	if p.closed || !p.sz.idle(p.opts.Now()) {
		p.mu.Unlock()
		return
	}
	p.stats.Shrunk++
	target := p.sz.want(p.memPer)
	var drop []*slot
	for over := len(p.ready) + p.starting - target; over > 0 && len(p.ready) > 0; over-- {
		i := 0
		for j, s := range p.ready {
			if !s.warm {
				i = j
				break
			}
		}
		s := p.ready[i]
		p.ready = append(p.ready[:i], p.ready[i+1:]...)
		s.move(Ready, Destroyed)
		drop = append(drop, s)
	}
	p.mu.Unlock()
	for _, s := range drop {
		p.destroyAsync(s.sb)
	}
	p.log.Debug("pool shrank after idle", "target", target, "destroyed", len(drop))
}

// recycleOld destroys ready sandboxes older than MaxIdleAge; the refill
// replaces them.
func (p *Pool) recycleOld() {
	p.mu.Lock()
	var old []*slot
	keep := p.ready[:0]
	for _, s := range p.ready {
		if p.opts.Now().Sub(s.readyAt) > p.opts.MaxIdleAge || !s.sb.Alive() {
			s.move(Ready, Destroyed)
			old = append(old, s)
			continue
		}
		keep = append(keep, s)
	}
	p.ready = keep
	p.stats.Recycled += uint64(len(old))
	p.mu.Unlock()
	for _, s := range old {
		p.destroyAsync(s.sb)
	}
}

func (p *Pool) destroyAsync(sb *sandbox.Sandbox) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := sb.Destroy(); err != nil {
			p.log.Warn("destroying sandbox", "sandbox", sb.ID(), "err", err)
		}
	}()
}

// Close stops refilling and destroys every ready sandbox. Sandboxes already
// acquired belong to their callers.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.settle != nil {
		p.settle.Stop()
	}
	if p.hold != nil {
		p.hold.Stop()
	}
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	p.cancel()
	var errs []error
	for _, s := range ready {
		s.move(Ready, Destroyed)
		errs = append(errs, s.sb.Destroy())
	}
	p.wg.Wait()
	return errors.Join(errs...)
}

// ReadyPids are the host pids of the ready sandboxes' agents (for tests and
// diagnostics).
func (p *Pool) ReadyPids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, s := range p.ready {
		pids = append(pids, s.sb.Pid())
	}
	return pids
}
