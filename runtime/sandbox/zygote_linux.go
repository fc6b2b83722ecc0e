package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/seccomp"
)

// Zygote mode: every sandbox is a child forked from a warm template, one
// libcontainer container per image whose init is kernel's zygote.py. The
// template runs as root of its own user namespace with CAP_SETUID and
// CAP_SETGID only (to write its children's id maps), under a seccomp filter
// that lets unshare and mount through (seccomp.Template), and with an
// unmasked /proc (the kernel lets a child mount a fresh /proc only where one
// is fully visible). It never runs user code. Each child is a full sandbox,
// made by the C helper (kernel.ZFork, zfork.c; docs/zygote.md has every
// step): its own user namespace mapped onto a slot
// of the template's ids, its own cgroup made here, a fresh /proc, /tmp and
// /workspace, no capabilities, no_new_privs and the full seccomp profile.
// Its *Sandbox behaves as a container's: the pool, sessions and the engine
// cannot tell them apart. Where a template cannot make children (forge
// built without the helper, an image whose glibc hides the thread's tid) it
// does not start (ErrZygoteUnavailable), and Start makes that image's
// sandboxes containers.

// Mode says how a Runtime makes sandboxes.
type Mode string

// The modes.
const (
	// ModeContainer starts one libcontainer container per sandbox.
	ModeContainer Mode = "container"
	// ModeZygote forks each sandbox from a warm template of its image.
	ModeZygote Mode = "zygote"
)

// ZygoteOptions configure zygote mode.
type ZygoteOptions struct {
	// Forks retires a template after this many children (they share its
	// address layout and hash secret); 0 means DefaultZygoteForks.
	Forks int
	// MaxAge retires a template this long after it started; 0 means DefaultZygoteMaxAge.
	MaxAge time.Duration
	// Slots is how many children of one template may live at once (each
	// maps onto a block of host ids of its own); 0 means DefaultZygoteSlots.
	Slots int
	// Templates is how many templates of one image fork at once; 0 means
	// DefaultZygoteTemplates. A template forks one child at a time, so
	// concurrent starts queue behind it; a second one starts, in the
	// background, once every template of the image is busy forking.
	Templates int
	// Warm are the modules the template imports before it forks.
	Warm []string
	// BindsTemplates bounds the binds templates (Config.TemplateBinds: one
	// per hosted tools module, and tenant) alive at once; starting one more
	// retires the least recently used. 0 derives it (bindsBound).
	BindsTemplates int
}

// Zygote defaults.
const (
	DefaultZygoteForks  = 1000
	DefaultZygoteMaxAge = 10 * time.Minute
	// DefaultZygoteSlots: a template's own memory (its Python, with the
	// data image's numpy and pandas about 70 MiB) is shared by at most
	// this many live children; at 32, 1,000 sessions took 32 templates
	// and each session carried 2 MiB of them (docs/bench-log.md).
	DefaultZygoteSlots = 128
	// BindsZygoteSlots caps a binds template's slots (a hosted tools
	// module's): its children live for one call, and its host id blocks
	// are better left to the bound of binds templates (bindsBound).
	BindsZygoteSlots = 32
	// DefaultZygoteTemplates: at concurrency 4 on 2 cores, fork requests
	// waited ~18 ms (p50) for one busy template (measured per step).
	DefaultZygoteTemplates = 2
	// maxZygoteSlots keeps the template's id map within the kernel's
	// bounds (340 lines, one write of less than a page) once its blocks
	// are merged (templateIDMap).
	maxZygoteSlots = 256
)

func (o *ZygoteOptions) setDefaults() error {
	if o.Forks == 0 {
		o.Forks = DefaultZygoteForks
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultZygoteMaxAge
	}
	if o.Slots == 0 {
		o.Slots = DefaultZygoteSlots
	}
	if o.Templates == 0 {
		o.Templates = DefaultZygoteTemplates
	}
	switch {
	case o.Forks < 1:
		return fmt.Errorf("zygote forks %d: must be >= 1: %w", o.Forks, ErrInvalidConfig)
	case o.MaxAge < 0:
		return fmt.Errorf("zygote max age %s: must be >= 0: %w", o.MaxAge, ErrInvalidConfig)
	case o.BindsTemplates < 0:
		return fmt.Errorf("zygote binds templates %d: must be >= 0: %w", o.BindsTemplates, ErrInvalidConfig)
	case o.Templates < 1:
		return fmt.Errorf("zygote templates %d: must be >= 1: %w", o.Templates, ErrInvalidConfig)
	case o.Slots < 1 || o.Slots > maxZygoteSlots:
		return fmt.Errorf("zygote slots %d: must be in 1-%d: %w", o.Slots, maxZygoteSlots, ErrInvalidConfig)
	}
	return nil
}

// RootlessZygoteSlots fits zygote mode to a rootless forge's ids (ids, in
// blocks of block, as RootlessIDs gives them): the child slots a template
// gets for the asked ones, or why zygote mode cannot run. Each child needs
// a block of its own, cut from the user's subordinate range. Without a
// range every sandbox would run as the user's own uid, and children of one
// template could signal and ptrace each other: zygote mode cannot run, and
// sandboxes start as containers. With one, a template's slots shrink until
// two templates (a retiring one and its successor) fit beside a few
// containers (hosted tools, builds).
func RootlessZygoteSlots(ids idmap.Range, block uint32, slots int) (int, error) {
	if ids.Size == 0 || block == 0 {
		return 0, errors.New("zygote mode needs a subordinate id range (/etc/subuid and /etc/subgid) in rootless mode: " +
			"each child runs as host ids of its own, and without a range all of them would be the user's own uid, " +
			"able to signal and ptrace one another; add a range for the user")
	}
	blocks := int(ids.Size / block)
	fit := (blocks-max(2, blocks/8))/2 - 1
	if fit < 1 {
		return 0, fmt.Errorf("zygote mode: the user's subordinate range holds %d blocks of %d ids, too few for a template "+
			"(it takes a block for itself and one per child slot, and a retiring template and its successor live at once); "+
			"give the user a larger range in /etc/subuid and /etc/subgid", blocks, block)
	}
	return min(slots, fit), nil
}

// rootlessZygote fits zygote mode to a rootless forge, or falls back to
// containers where it cannot hold its invariants (RootlessZygoteSlots).
func (r *Runtime) rootlessZygote(ids idmap.Range, block uint32) {
	slots, err := RootlessZygoteSlots(ids, block, r.zopts.Slots)
	if err != nil {
		r.log.Warn("rootless: sandboxes start as containers (sandbox.mode zygote cannot run here; forge doctor)", "why", err)
		r.mode = ModeContainer
		return
	}
	if slots < r.zopts.Slots {
		r.log.Info("rootless: zygote slots cut to fit the user's subordinate range", "slots", slots, "asked", r.zopts.Slots)
		r.zopts.Slots = slots
	}
}

// rlimitName names the rlimits of rlimitsFor for zygote.py.
var rlimitName = map[int]string{unix.RLIMIT_DATA: "RLIMIT_DATA", unix.RLIMIT_NPROC: "RLIMIT_NPROC"}

// Mode is how the runtime makes sandboxes.
func (r *Runtime) Mode() Mode { return r.mode }

// ZygoteStats count what zygote mode did.
type ZygoteStats struct {
	Templates int `json:"templates"` // started
	Retired   int `json:"retired"`   // destroyed after their forks or age
	Forks     int `json:"forks"`     // children forked
	// Fallbacks are sandboxes started as containers instead: with extra
	// binds (sandboxed servers, builds), or of an image whose template
	// cannot start (ErrZygoteUnavailable).
	Fallbacks int `json:"fallbacks"`
	// UnavailableImages are the images (rootfs) whose template could not
	// start (ErrZygoteUnavailable): every sandbox of theirs is a container.
	UnavailableImages int `json:"unavailable_images"`
	// FastForks are the children that a template's request loop in C
	// forked: from the few fields of a request of the shape it forked
	// last, with no Python run in the template.
	FastForks int `json:"fast_forks"`
	// SpareForks are the fast forks whose child the template had cloned
	// ahead (a spare, once it had served the fork before): the clone, most
	// of it the copy of the template's page tables and the network
	// namespace, was not on the sandbox's start.
	SpareForks int `json:"spare_forks"`
	// WriteSets are the write sets sent to templates (one each, from its
	// first child: zygote_writeset_linux.go), and WriteSetPages the pages
	// of the last one.
	WriteSets     int `json:"write_sets"`
	WriteSetPages int `json:"write_set_pages"`
	// BindsTemplates are the keys (a hosted tools snapshot, and tenant:
	// Config.TemplateBinds) with templates forking now, at most
	// ZygoteOptions.BindsTemplates (each key may have up to Templates).
	BindsTemplates int `json:"binds_templates"`
	// Immortal is how many objects the last template that started made
	// immortal (PEP 683), so that its children write none of their
	// reference counts: 0 where its Python has no immortal objects (3.11).
	Immortal int `json:"immortal"`
}

// ZygoteStats reports zygote mode's counters.
func (r *Runtime) ZygoteStats() ZygoteStats {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	st := r.zstats
	st.BindsTemplates = r.bindsTemplatesLocked()
	return st
}

// templateKey is what a template forks for: the image's rootfs, the
// tenant (Config.Tenant) and, for Config.TemplateBinds, the binds its
// container has mounted (bindsKey). No template forks children of two keys.
type templateKey struct{ rootfs, tenant, binds string }

func keyOf(cfg *Config) templateKey { return templateKey{cfg.Rootfs, cfg.Tenant, bindsKey(cfg)} }

// template is one zygote container.
type template struct {
	rt     *Runtime
	id     string
	key    templateKey
	slots  int   // children alive at once (slotsFor)
	memory int64 // the template's memory limit (templateMemory), 0 for none
	// immortal: the objects its Python made immortal (zygoteMsg.Immortal)
	immortal int
	c        *libcontainer.Container
	// cgroupPaths are c's cgroup paths, copied once it started (oomKills).
	cgroupPaths map[string]string
	proc        *libcontainer.Process
	ctl         *os.File // host end of the SOCK_SEQPACKET control socket
	leases      []*idmap.Lease
	block       uint32
	started     time.Time
	stderr      *boundedBuffer
	exited      chan struct{}
	state       *os.ProcessState // of the template's init, once exited is closed (nil if its wait failed)
	aging       *time.Timer      // retires the template at MaxAge, though nothing forks
	devices     []*config.Rule   // the container's device rules, for each child's cgroup on v2 (on v1 its template's has them)
	procs       *os.File         // the template's own cgroup.procs (see beat), nil if not opened
	pid         string           // of the template's init, on the host
	bridgeDir   string           // the mount points of a binds template (key.binds), removed with it
	lastTake    atomic.Int64     // unix nanoseconds of the last slot taken: the least recently used binds template goes first
	// seq numbers the template's fork requests: a request's id is its
	// number, not the sandbox's id, which names forge's host pid and which
	// every later child of the template could otherwise find in its copy of
	// the template's memory.
	seq atomic.Int64
	// writeSet: the write set was taken from the first child to reach
	// hello, and sent (or that was tried).
	writeSet atomic.Bool

	forkMu sync.Mutex      // one fork request at a time
	sent   map[string]bool // seccomp programs the template has, by id (under forkMu)
	// shape is the request, less what each fork has of its own, that the
	// template forks from a fast request (forkRequest.fast; under forkMu; nil: none).
	shape   []byte
	replies chan zygoteMsg  // "forked" replies, in order
	mu      sync.Mutex      // guards the fields below
	free    []int           // free slots (1..slots)
	forking int             // fork requests taken and not yet answered
	forks   int             // children forked
	retired bool            // forks no more; destroyed once its last child is
	kids    map[int]*zchild // by pid in the template's pid namespace
	early   map[int]int     // exit codes of children not yet registered
	gone    bool            // destroyed, or being destroyed
	over    chan struct{}   // closed once destroy has finished
}

// zchild is the zygote side of a child sandbox.
type zchild struct {
	tpl     *template
	slot    int
	tplPid  int // P (pid 1 of the sandbox) in the template's pid namespace
	hostPid int // P on the host
	s       *Sandbox
	initPid int // P on the host, once known (the same as hostPid)
	code    int // exit status, once exited
	// cgmu serialises what changes the child's cgroup manager, which keeps
	// the resources it sets: a kill (by the sandbox's Destroy, or by its
	// template's) thaws while a pause, a resume or SetLimits may be
	// setting them.
	cgmu sync.Mutex
	// frozen: a freeze was begun and no thaw has succeeded since (cgmu
	// held). A child never frozen is not thawed: its kill, at every
	// destroy, then writes no freezer file (1.5 % of forge's CPU).
	frozen bool
	// tplDied says why the child's template died, once it did with the
	// child still alive (templateDied).
	tplDied atomic.Pointer[string]
}

// setFreezer freezes (freezeChild) or thaws the child's cgroup.
func (k *zchild) setFreezer(st occgroups.FreezerState) error {
	if st == occgroups.Frozen {
		return k.freeze(freezeSpins)
	}
	k.cgmu.Lock()
	defer k.cgmu.Unlock()
	if !k.frozen {
		return nil
	}
	if err := k.s.cgm.Freeze(st); err != nil {
		return err
	}
	k.frozen = false
	return nil
}

// freeze freezes the child's cgroup, spinning spins rounds at most before
// it sleeps (freezeChild).
func (k *zchild) freeze(spins int) error {
	k.cgmu.Lock()
	defer k.cgmu.Unlock()
	k.frozen = true // even a failed freeze may leave it frozen
	return freezeChild(k.s.cgm, spins)
}

// setResources sets the child's cgroup limits.
func (k *zchild) setResources(res *occgroups.Resources) error {
	k.cgmu.Lock()
	defer k.cgmu.Unlock()
	return k.s.cgm.Set(res)
}

type zygoteMsg struct {
	Op     string   `json:"op"`
	ID     string   `json:"id"`
	Pid    int      `json:"pid"`
	Code   int      `json:"code"`
	Error  string   `json:"error"`
	Warm   []string `json:"warm"`
	Python string   `json:"python"`
	Spare  bool     `json:"spare"` // a fast fork's child was the template's spare
	// Immortal is how many objects the template made immortal before its
	// first fork (zygote.py's _immortalize; 0 before CPython 3.12).
	Immortal int `json:"immortal"`
}

// maxZygoteMsg bounds one control message from a template.
const maxZygoteMsg = 64 << 10

// startChild forks a sandbox from the template of cfg's image, starting
// the template first when there is none with a free slot. A template found
// gone is retired and the fork tried again on another, or a new one: as
// many times as the image can have templates (all of them may have been
// killed at once, and their deaths not yet seen), and once more.
func (r *Runtime) startChild(ctx context.Context, cfg Config) (*Sandbox, error) {
	for attempt := 0; ; attempt++ {
		t, slot, err := r.templateFor(ctx, cfg)
		if err != nil {
			return nil, err
		}
		s, err := t.fork(ctx, cfg, slot)
		if err == nil || attempt >= r.zopts.Templates || ctx.Err() != nil || !errors.Is(err, errTemplateGone) {
			return s, err
		}
		// Its init may not be reaped yet: forget it now, then try a new one.
		t.mu.Lock()
		t.retireLocked()
		t.mu.Unlock()
		go t.destroy()
	}
}

// templateFor returns a live template of cfg's rootfs and a slot taken on
// it: of the templates with a free slot, the one with the fewest forks in
// flight. When all of them are busy forking and the image has fewer than
// Templates, another one starts in the background for the next requests.
func (r *Runtime) templateFor(ctx context.Context, cfg Config) (*template, int, error) {
	r.tmu.Lock()
	forking := slices.Clone(r.templates)
	r.tmu.Unlock() // take may retire a template, which takes tmu
	var best *template
	n, bestBusy := 0, 0
	for _, t := range forking {
		if t.key != keyOf(&cfg) {
			continue
		}
		n++
		if busy, ok := t.load(); ok && (best == nil || busy < bestBusy) {
			best, bestBusy = t, busy
		}
	}
	if best != nil {
		if slot, ok := best.take(); ok {
			// Not for a binds key: its sources (a tools snapshot) may be
			// removed once its module is replaced, under a start in the
			// background; its calls queue on one template instead.
			if bestBusy > 0 && n < r.zopts.Templates && best.key.binds == "" {
				r.startTemplateAsync(cfg)
			}
			return best, slot, nil
		}
		return r.templateFor(ctx, cfg) // taken meanwhile, or retired
	}
	// One template start per image at a time: the others wait for it and take its slots.
	r.tmu.Lock()
	if wait, ok := r.starting[keyOf(&cfg)]; ok {
		r.tmu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		return r.templateFor(ctx, cfg)
	}
	done := make(chan struct{})
	r.starting[keyOf(&cfg)] = done
	r.tmu.Unlock()
	r.evictBindsTemplates(keyOf(&cfg))
	t, err := r.launchTemplate(ctx, cfg, done)
	if err != nil {
		return nil, 0, err
	}
	slot, ok := t.take()
	if !ok {
		return nil, 0, fmt.Errorf("%w: a new template has no free slot", errTemplateGone)
	}
	return t, slot, nil
}

// startTemplateAsync starts one more template of cfg's rootfs unless one is starting.
func (r *Runtime) startTemplateAsync(cfg Config) {
	r.tmu.Lock()
	if _, ok := r.starting[keyOf(&cfg)]; ok || r.closing {
		r.tmu.Unlock()
		return
	}
	done := make(chan struct{})
	r.starting[keyOf(&cfg)] = done
	r.bgStarts.Add(1) // under tmu: closeTemplates waits for it
	r.tmu.Unlock()
	// The rootfs is held for the start: the sandbox whose fork began it may
	// be destroyed first, and its image unmounted with it (pivot_root of
	// the template then failed, at every shutdown that caught a start).
	unpin := func() {}
	if cfg.Pin != nil {
		unpin = cfg.Pin()
	}
	go func() {
		defer r.bgStarts.Done()
		defer unpin()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := r.launchTemplate(ctx, cfg, done); err != nil {
			r.log.Warn("starting another zygote template", "err", err)
		}
	}()
}

// launchTemplate starts a template and adds it to the forking ones; done is
// r.starting's channel for cfg's rootfs, closed here.
func (r *Runtime) launchTemplate(ctx context.Context, cfg Config, done chan struct{}) (*template, error) {
	t, err := r.startTemplate(ctx, cfg)
	r.tmu.Lock()
	delete(r.starting, keyOf(&cfg))
	close(done)
	if err == nil && r.closing {
		// closeTemplates has taken its list: this one would outlive it
		// with its host ids held.
		r.tmu.Unlock()
		t.destroy()
		return nil, fmt.Errorf("zygote template %s: %w", t.id, errTemplateGone)
	}
	if err == nil {
		r.templates = append(r.templates, t)
		r.all = append(r.all, t)
		r.zstats.Templates++
		r.zstats.Immortal = t.immortal
	}
	r.tmu.Unlock()
	if err != nil {
		return nil, err
	}
	r.evictBindsTemplates(t.key) // again: other keys' templates may have started meanwhile
	t.mu.Lock()
	if !t.gone {
		t.aging = time.AfterFunc(time.Until(t.started.Add(r.zopts.MaxAge)), t.retire)
	}
	t.mu.Unlock()
	return t, nil
}

// load is the template's forks in flight, and whether it has a free slot.
func (t *template) load() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.forking, !t.retired && !t.gone && len(t.free) > 0
}

// take reserves a free slot unless the template is retired.
func (t *template) take() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.retired || t.gone || len(t.free) == 0 {
		return 0, false
	}
	if !t.alive() { // died (killed from outside, or crashed): its children went with it
		t.retireLocked()
		go t.destroy()
		return 0, false
	}
	if t.forks >= t.rt.zopts.Forks || time.Since(t.started) > t.rt.zopts.MaxAge {
		t.retireLocked()
		return 0, false
	}
	slot := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.lastTake.Store(time.Now().UnixNano())
	t.forks++
	t.forking++
	return slot, true
}

// retire retires the template (its age timer).
func (t *template) retire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.retireLocked()
}

// retireLocked stops forks; the template goes once its last child has.
func (t *template) retireLocked() {
	if t.retired {
		return
	}
	t.retired = true
	t.rt.tmu.Lock()
	t.rt.templates = slices.DeleteFunc(t.rt.templates, func(o *template) bool { return o == t })
	t.rt.zstats.Retired++
	t.rt.tmu.Unlock()
	if len(t.kids) == 0 && len(t.free) == t.slots {
		go t.destroy()
	}
}

// release gives a slot back once its child is gone.
func (t *template) release(slot int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.free = append(t.free, slot)
	if t.retired && len(t.kids) == 0 && len(t.free) == t.slots {
		go t.destroy()
	}
}

// ZygoteChildCharge is the memory that one live child of a template is
// charged in the template's own memory cgroup, with room to spare: the
// kernel's objects of its clone (page tables, task, namespaces), the pages
// its spare wrote ahead (the write set) and the pages the template copied
// since that the child still shares. The host moves the child into its own
// cgroup only after that (cgroup v2 moves no charges, and v1's
// move_charge_at_immigrate is deprecated and moves no kernel memory), and
// the charges go with the child's exit. docs/bench-log.md has the
// measurement.
const ZygoteChildCharge = 4 << 20

// templateMemory is the memory limit of a template whose children have
// the limit sandbox: a sandbox's own (the template's Python is one) plus
// ZygoteChildCharge per child slot, so that slots live children never
// make the kernel OOM-kill the template, which would take every child
// with it. 0 (no limit) stays 0.
func templateMemory(sandbox int64, slots int) int64 {
	if sandbox <= 0 {
		return 0
	}
	return sandbox + int64(slots)*ZygoteChildCharge
}

// TemplateIDSuffix ends the id of every zygote template, and so the name of
// its cgroup, and no sandbox's: tests that walk the cgroups tell them apart.
const TemplateIDSuffix = "-z"

// startTemplate starts the zygote container of cfg's image.
func (r *Runtime) startTemplate(ctx context.Context, cfg Config) (_ *template, retErr error) {
	key := keyOf(&cfg)
	slots := r.slotsFor(key)
	n := slots + 1
	t := &template{rt: r, id: newID() + TemplateIDSuffix, key: key, slots: slots, block: r.ids.BlockSize(), started: time.Now(),
		stderr: &boundedBuffer{max: 64 << 10}, exited: make(chan struct{}), replies: make(chan zygoteMsg, 1), over: make(chan struct{}),
		kids: make(map[int]*zchild), early: make(map[int]int)}
	defer func() {
		if retErr != nil {
			t.destroy()
		}
	}()
	for range n {
		l, err := r.ids.Allocate()
		if errors.Is(err, idmap.ErrExhausted) && len(t.leases) >= 2 {
			// Fewer slots rather than none: the range holds fewer
			// templates of this size than are alive (tenants, images,
			// retiring ones).
			t.slots = len(t.leases) - 1
			r.log.Warn("zygote template started with fewer slots: the host id range is short of blocks", "template", t.id, "slots", t.slots, "asked", slots, "err", err)
			break
		}
		if err != nil {
			return nil, fmt.Errorf("host ids of zygote template %s: %w", t.id, err)
		}
		t.leases = append(t.leases, l)
	}
	// In host order, so that adjacent blocks merge into one line of the
	// id map (templateIDMap); slot k is t.leases[k].
	slices.SortFunc(t.leases, func(a, b *idmap.Lease) int { return cmp.Compare(a.Range().Start, b.Range().Start) })
	for i := 1; i <= t.slots; i++ {
		t.free = append(t.free, i)
	}
	spec, err := r.templateSpec(t, &cfg)
	if err != nil {
		return nil, err
	}
	// A template has a cgroup wherever sandboxes do (zygote mode makes each
	// child's on the host); a rootless one without (noCgroups) has rlimits.
	lc, err := libcontainerConfig(t.id, spec, r.rootless)
	if err != nil {
		return nil, fmt.Errorf("converting spec of zygote template %s: %w", t.id, err)
	}
	if !r.noCgroups {
		t.devices = lc.Cgroups.Resources.Devices
	}
	if t.c, err = libcontainer.Create(r.root, t.id, lc); err != nil {
		return nil, fmt.Errorf("creating zygote template %s: %w", t.id, err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	t.ctl = os.NewFile(uintptr(fds[0]), "zygote-ctl")
	peer := os.NewFile(uintptr(fds[1]), "zygote-ctl-peer")
	caps := []string{"CAP_SETUID", "CAP_SETGID"}
	p := &libcontainer.Process{
		Args: spec.Process.Args, Env: spec.Process.Env, UID: 0, GID: 0, Cwd: "/",
		Stderr: t.stderr, ExtraFiles: []*os.File{peer}, Init: true,
		NoNewPrivileges: &spec.Process.NoNewPrivileges,
		Capabilities:    &configs.Capabilities{Bounding: caps, Effective: caps, Permitted: caps},
		Rlimits:         lc.Rlimits,
	}
	err = r.run(t.c, p)
	peer.Close()
	if err != nil {
		return nil, fmt.Errorf("starting zygote template %s: %w", t.id, err)
	}
	t.proc = p
	if st, err := t.c.State(); err == nil {
		// A copy, read while nothing else touches t.c: libcontainer hands
		// out its manager's own map, which Destroy empties.
		t.cgroupPaths = maps.Clone(st.CgroupPaths)
	}
	go func() {
		t.state, _ = p.Wait()
		close(t.exited)
		t.ctl.Close() // ends read()
	}()
	ready := make(chan zygoteMsg, 1)
	go t.read(ready)
	select {
	case m := <-ready:
		if m.Op == "unavailable" {
			return nil, fmt.Errorf("zygote template %s: %w: %.500s", t.id, ErrZygoteUnavailable, m.Error)
		}
		r.log.Debug("zygote template ready", "template", t.id, "python", m.Python, "warm", m.Warm, "immortal", m.Immortal, "took", time.Since(t.started))
		t.immortal = m.Immortal
		if !r.noCgroups {
			t.openProcs()
		}
	case <-t.exited:
		return nil, fmt.Errorf("zygote template %s %w: it exited%s", t.id, errAgentStart, note(t.stderr))
	case <-ctx.Done():
		return nil, fmt.Errorf("zygote template %s: %w", t.id, ctx.Err())
	}
	return t, nil
}

// Moving a process into a cgroup (each child's, at every fork) takes the
// kernel's cgroup_threadgroup_rwsem for writing, which waits for an RCU
// grace period unless another move happened within about one: ~10 ms here,
// a third of a fork. While templates live, beat keeps moves fast by moving
// a template's init into the cgroup it is already in every moveBeat (a
// no-op move; the kernel's favordynmods mount option does the same for
// good). The cost: while moves are frequent, forks and exits on the host
// take the rwsem's slower, atomic read path.
const moveBeat = 10 * time.Millisecond

// openProcs opens the template's cgroup.procs for beat and starts beat
// unless it runs.
func (t *template) openProcs() {
	tp, err := t.proc.Pid()
	if err != nil {
		return
	}
	st, err := t.c.State()
	if err != nil {
		return
	}
	dir, ok := st.CgroupPaths["pids"]
	if !ok {
		dir = st.CgroupPaths[""]
	}
	f, err := os.OpenFile(dir+"/cgroup.procs", os.O_WRONLY, 0)
	if err != nil {
		t.rt.log.Debug("zygote template: no cgroup.procs to keep moves fast", "template", t.id, "err", err)
		return
	}
	r := t.rt
	r.tmu.Lock()
	defer r.tmu.Unlock()
	t.procs, t.pid = f, strconv.Itoa(tp)
	if !r.beating {
		r.beating = true
		go r.beat()
	}
}

// beat runs while a template lives (see moveBeat).
func (r *Runtime) beat() {
	tick := time.NewTicker(moveBeat)
	defer tick.Stop()
	for range tick.C {
		r.tmu.Lock()
		var t *template
		for _, o := range r.all {
			if o.procs != nil {
				t = o
				break
			}
		}
		if t == nil {
			r.beating = false
			r.tmu.Unlock()
			return
		}
		f, pid := t.procs, t.pid
		r.tmu.Unlock()
		_, _ = f.WriteString(pid) // fails once destroy closed it: the next beat picks another
	}
}

func note(b *boundedBuffer) string {
	if s := b.String(); s != "" {
		return "; stderr: " + s
	}
	return ""
}

// templateSpec is a sandbox's spec changed only where the template must
// differ to make children: root of its user namespace (mapped onto its
// own block, then one block per slot), an unmasked /proc, the template's
// seccomp filter, namespace budgets for its children.
func (r *Runtime) templateSpec(t *template, cfg *Config) (*specs.Spec, error) {
	sc, err := seccomp.Template()
	if err != nil {
		return nil, err
	}
	limits := cfg.Limits
	limits.Pids = int64(t.slots) + 16 // a child is here only until it joins its own cgroup
	limits.MemoryBytes = templateMemory(cfg.Limits.MemoryBytes, t.slots)
	t.memory = limits.MemoryBytes
	argv := append(kernel.Argv(kernel.ZygotePath), r.zopts.Warm...)
	if t.key.binds != "" {
		argv = append(argv, cfg.TemplateWarm...)
	}
	opts := []SpecOpt{
		WithRootfs(cfg.Rootfs),
		WithHostname("zygote"),
		WithIDMapping(t.leases[0].Range().Start, t.block),
		WithArgs(argv...),
		WithTmpfs("/tmp", 1<<20),
		WithTmpfs(WorkspacePath, 1<<20),
		WithReadOnlyBind(r.agentDir, AgentMountPoint),
		WithSeccomp(sc),
		WithUserLimits(r.templateLimits(t.slots)),
	}
	if t.key.binds != "" {
		bo, err := r.templateBinds(t, cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, bo...)
	}
	if !r.noCgroups {
		// Without (rootless, no delegated cgroup) the template keeps
		// forge's rlimits, which bound its children's own from above: each
		// child lowers them to its sandbox's limits (fork, rlimitsFor).
		opts = append(opts, WithResources(limits.Spec()), WithCgroupsPath(r.cgroupBase+"/"+t.id))
	}
	s, err := NewSpec(opts...)
	if err != nil {
		return nil, err
	}
	ranges := make([]idmap.Range, len(t.leases))
	for i, l := range t.leases {
		ranges[i] = l.Range()
	}
	m, err := templateIDMap(ranges, t.block)
	if err != nil {
		return nil, fmt.Errorf("zygote template %s: %w", t.id, err)
	}
	s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
	s.Process.User = specs.User{UID: 0, GID: 0}
	s.Linux.MaskedPaths = slices.DeleteFunc(s.Linux.MaskedPaths, func(p string) bool { return strings.HasPrefix(p, "/proc/") })
	s.Linux.ReadonlyPaths = slices.DeleteFunc(s.Linux.ReadonlyPaths, func(p string) bool { return strings.HasPrefix(p, "/proc/") })
	return s, nil
}

// slotsFor is how many children a template of key has alive at once: the
// configured slots, or for a binds template at most BindsZygoteSlots.
func (r *Runtime) slotsFor(key templateKey) int {
	if key.binds != "" {
		return min(r.zopts.Slots, BindsZygoteSlots)
	}
	return r.zopts.Slots
}

// The kernel's bounds on a user namespace's id map: at most 340 lines,
// written at once in less than a page (user_namespaces(7)).
const (
	maxIDMapLines = 340
	maxIDMapBytes = 4095
)

// templateIDMap maps a template's container ids onto its leases (in host
// order): block k (container ids k·block...) onto lease k, adjacent leases
// merged into one line. Unmerged, a line each, 150-odd blocks are more
// than the kernel takes in one write.
func templateIDMap(leases []idmap.Range, block uint32) ([]specs.LinuxIDMapping, error) {
	var m []specs.LinuxIDMapping
	size := 0
	for i, l := range leases {
		host := l.Start
		if n := len(m); n > 0 && m[n-1].HostID+m[n-1].Size == host && m[n-1].ContainerID+m[n-1].Size == uint32(i)*block {
			m[n-1].Size += block
			continue
		}
		m = append(m, specs.LinuxIDMapping{ContainerID: uint32(i) * block, HostID: host, Size: block})
	}
	for _, e := range m {
		size += len(fmt.Sprintf("%d %d %d\n", e.ContainerID, e.HostID, e.Size))
	}
	if len(m) > maxIDMapLines || size > maxIDMapBytes {
		return nil, fmt.Errorf("its %d host id blocks make an id map of %d lines (%d bytes), over the kernel's %d lines and %d bytes: the blocks are scattered over the range; lower sandbox.zygote_slots: %w",
			len(leases), len(m), size, maxIDMapLines, maxIDMapBytes, ErrInvalidConfig)
	}
	return m, nil
}

// templateLimits are the per-user kernel limits of a template's user
// namespace, which every child's usage is charged to as well: a sandbox's
// share times the slots, and namespaces for every child (each makes seven).
// Each is at most what the kernel takes (an int: a larger one fails the
// template's start with EINVAL).
func (r *Runtime) templateLimits(n int) UserLimits {
	out := make(UserLimits, len(r.budgets))
	slots := int64(n)
	for k, v := range r.budgets {
		if isNamespaceLimit(k) {
			out[k] = max(v, r.nested, 2*slots+4)
		} else {
			out[k] = v * slots
		}
		out[k] = min(out[k], math.MaxInt32)
	}
	return out
}

// read delivers the template's control messages until its socket closes.
func (t *template) read(ready chan<- zygoteMsg) {
	buf := make([]byte, maxZygoteMsg)
	defer t.dead()
	for {
		n, err := t.ctl.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var m zygoteMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			t.rt.log.Warn("zygote template sent a malformed message; destroying it", "template", t.id, "err", err)
			go t.destroy()
			return
		}
		switch m.Op {
		case "ready", "unavailable": // once, before any fork request
			ready <- m
		case "forked":
			select {
			case t.replies <- m:
			default:
				t.rt.log.Warn("zygote template sent a reply nobody asked for; destroying it", "template", t.id)
				go t.destroy()
				return
			}
		case "exit":
			t.mu.Lock()
			k := t.kids[m.Pid]
			delete(t.kids, m.Pid)
			if k == nil && m.Pid > 1 && len(t.early) < maxZygoteSlots {
				t.early[m.Pid] = m.Code // before its fork's reply was handled
			}
			t.mu.Unlock()
			if k != nil {
				k.exit(m.Code)
			}
		}
	}
}

// dead ends every child still known, once the template's control socket
// has closed (its init is gone or going): the kernel kills the template's
// pid namespace, children included, but a frozen child dies only once
// thawed, which kill does. Each child is told that its template died, and
// why (templateDied): its result and DeathReason say so rather than that a
// signal came from outside.
func (t *template) dead() {
	t.mu.Lock()
	kids := t.kids
	t.kids = make(map[int]*zchild)
	destroyed := t.gone
	t.mu.Unlock()
	if len(kids) == 0 {
		return
	}
	for _, k := range kids {
		// What ended is the child's channel, not the child: one paused in
		// the pool is frozen in its own cgroup, and lives on (keeping the
		// template's pid namespace from dying) until it is thawed. Its
		// Destroy sees it exited and no longer kills it, so it dies here.
		_ = k.kill(unix.SIGKILL)
	}
	why := "forge destroyed it"
	if !destroyed {
		// The socket closes as the template dies; its exit status comes
		// once its pid namespace is gone (the kills above thawed it).
		select {
		case <-t.exited:
		case <-time.After(2 * time.Second):
		}
		why = t.deathCause()
		t.rt.log.Warn("zygote template died; its children died with it", "template", t.id, "children", len(kids), "why", why)
	}
	for _, k := range kids {
		k.templateDied(why)
		k.exit(128 + int(unix.SIGKILL))
	}
}

// deathCause says how the template's init ended: an OOM kill in its own
// memory cgroup, a signal or an exit status.
func (t *template) deathCause() string {
	if n, err := t.oomKills(); err == nil && n > 0 {
		return fmt.Sprintf("the kernel's OOM killer killed it in its own memory cgroup (%d OOM kills there; its limit is %s, the sandboxes' memory plus %s per child slot)",
			n, cgroups.FormatMemory(t.memory), cgroups.FormatMemory(ZygoteChildCharge))
	}
	if t.state != nil {
		if ws, ok := t.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("it was killed by signal %d (%s), not by forge", int(ws.Signal()), unix.SignalName(ws.Signal()))
		}
		return fmt.Sprintf("it exited with status %d%s", t.state.ExitCode(), note(t.stderr))
	}
	return "its control socket closed" + note(t.stderr)
}

// oomKills is the OOM kill count of the template's memory cgroup.
func (t *template) oomKills() (uint64, error) {
	if t.cgroupPaths == nil || t.rt.noCgroups {
		return 0, ErrNoCgroup
	}
	m, err := manager.NewWithPaths(&occgroups.Cgroup{Resources: &occgroups.Resources{}}, t.cgroupPaths)
	if err != nil {
		return 0, err
	}
	u, err := cgroups.ReadUsage(m)
	return u.OOMKills, err
}

// templateDied records that the child dies because its template did (or
// was destroyed), for its result (ErrTypeTemplateDied) and DeathReason.
func (k *zchild) templateDied(why string) {
	msg := "its zygote template died (" + why + "), and every sandbox forked from it died with it"
	k.tplDied.CompareAndSwap(nil, &msg)
	k.s.killReason.CompareAndSwap(nil, &msg)
}

func (k *zchild) exit(code int) {
	if code < 0 { // killed by a signal (I itself, by Kill)
		code = 128 - code
	}
	k.code = code
	select {
	case <-k.s.exited:
	default:
		close(k.s.exited)
	}
	k.s.client.Close()
}

// forkRequest is what the template's zygote.py reads for one child.
type forkRequest struct {
	ID            string              `json:"id"` // the template's request number (template.seq), not the sandbox's id
	UID           uint32              `json:"uid"`
	IDsStart      uint32              `json:"ids_start"`
	IDsSize       uint32              `json:"ids_size"`
	TmpSize       int64               `json:"tmp_size"`
	WorkspaceSize int64               `json:"workspace_size"`
	Hostname      string              `json:"hostname"`
	UserLimits    UserLimits          `json:"user_limits"`
	Rlimits       map[string][2]int64 `json:"rlimits"`
	SeccompID     string              `json:"seccomp_id"`
	Seccomp       string              `json:"seccomp,omitempty"`       // the program's BPF (hex), once per template
	SeccompReset  bool                `json:"seccomp_reset,omitempty"` // the template forgets the programs it has first
	Env           []string            `json:"env"`
	Bridge        bool                `json:"bridge"` // a fifth descriptor: the bridge directory's detached mount
}

// bpf is a profile's compiled program: its id (a hash of it) and the
// program in hex, which a template is sent once.
type bpf struct{ id, hex string }

// compiledSeccomp caches each profile's BPF.
var compiledSeccomp sync.Map // *specs.LinuxSeccomp → bpf

func bpfOf(p *specs.LinuxSeccomp) (bpf, error) {
	if v, ok := compiledSeccomp.Load(p); ok {
		return v.(bpf), nil
	}
	b, err := seccomp.Compile(p)
	if err != nil {
		return bpf{}, err
	}
	sum := sha256.Sum256(b)
	v := bpf{id: hex.EncodeToString(sum[:8]), hex: hex.EncodeToString(b)}
	compiledSeccomp.Store(p, v)
	return v, nil
}

// maxSentPrograms bounds the seccomp programs a template keeps: past it,
// the next request resets its table.
const maxSentPrograms = 32

// defaultSeccomp is the default profile, resolved once: a child's config
// that leaves Seccomp nil gets the same pointer, so its BPF is compiled once.
var defaultSeccomp = sync.OnceValues(seccomp.Default)

// fork makes one child sandbox on slot.
func (t *template) fork(ctx context.Context, cfg Config, slot int) (_ *Sandbox, retErr error) {
	r := t.rt
	id := newID()
	k := &zchild{tpl: t, slot: slot}
	answered := sync.OnceFunc(func() { // the fork take counted
		t.mu.Lock()
		t.forking--
		t.mu.Unlock()
	})
	defer answered()
	defer func() {
		if retErr != nil && k.s == nil {
			t.release(slot)
		}
	}()
	prog, err := bpfOf(cfg.Seccomp)
	if err != nil {
		return nil, fmt.Errorf("seccomp of sandbox %s: %w", id, err)
	}
	req := forkRequest{
		ID: strconv.FormatInt(t.seq.Add(1), 10), UID: cfg.UID, IDsStart: uint32(slot) * t.block, IDsSize: t.block,
		TmpSize: cfg.TmpSize, WorkspaceSize: cfg.WorkspaceSize, Hostname: "sandbox-" + id[len(id)-6:],
		UserLimits: r.budgets, SeccompID: prog.id, Env: Env,
		Rlimits: map[string][2]int64{"RLIMIT_NOFILE": {1024, 1024}, "RLIMIT_CORE": {0, 0}, "RLIMIT_FSIZE": {1 << 30, 1 << 30}},
	}
	if r.noCgroups {
		// No cgroup of its own: the child's limits are rlimits, as a
		// container's are (rlimitsFor; RLIMIT_NPROC counts its own uid).
		for _, rl := range rlimitsFor(cfg.Limits) {
			req.Rlimits[rlimitName[rl.Type]] = [2]int64{int64(rl.Soft), int64(rl.Hard)}
		}
	}
	var bridge *os.File
	if cfg.BridgeDir != "" && !cfg.TemplateBinds { // a binds child keeps its template's /run/forge
		// A detached copy of the bind mount, which the child (root of its
		// own user and mount namespaces) moves to /run/forge: nothing else
		// of the host is reachable through it, and the template, which
		// hands it on, only closes it.
		fd, err := unix.OpenTree(unix.AT_FDCWD, cfg.BridgeDir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("bridge directory of sandbox %s: open_tree %q: %w", id, cfg.BridgeDir, err)
		}
		bridge = os.NewFile(uintptr(fd), "bridge-tree")
		defer bridge.Close()
		req.Bridge = true
	}
	// The agent's requests and replies go over one stream socket, its fds
	// 3 and 4 both (a container's are two pipes): forge keeps one
	// descriptor for them, not two, which is what a live session costs it
	// besides its stderr and lock (runtime/sandbox/files_linux.go). Its
	// stderr is a pipe.
	var agentHost, agentChild, errR, errW *os.File
	defer func() {
		for _, f := range []*os.File{agentHost, agentChild, errR, errW} {
			if f != nil {
				f.Close()
			}
		}
	}()
	afds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	agentHost, agentChild = os.NewFile(uintptr(afds[0]), "agent"), os.NewFile(uintptr(afds[1]), "agent-child")
	if errR, errW, err = os.Pipe(); err != nil {
		return nil, err
	}
	// P's own socket: P writes a byte as its first step, which the kernel
	// sends with P's credentials (SO_PASSCRED), its pid translated into
	// forge's pid namespace; the host writes 'g' on it once P is in its
	// cgroup. So the move waits neither for the template's reply nor for a
	// search of /proc.
	gofds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	goHost, goChild := os.NewFile(uintptr(gofds[0]), "zygote-go"), os.NewFile(uintptr(gofds[1]), "zygote-go-child")
	defer goHost.Close()
	defer goChild.Close()
	if err := unix.SetsockoptInt(gofds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		return nil, err
	}

	t0 := time.Now()
	// The cgroup is made while the template forks; the child joins it below.
	cgroupPath := r.cgroupBase + "/" + id
	type made struct {
		m   occgroups.Manager
		err error
	}
	cgDone := make(chan made, 1)
	go func() {
		if r.noCgroups {
			cgDone <- made{}
			return
		}
		res := cfg.Limits.Resources()
		cg := &occgroups.Cgroup{Path: cgroupPath, Resources: res, Rootless: r.rootless}
		if !occgroups.IsCgroup2UnifiedMode() && !r.rootless {
			res.SkipDevices = true // in its template's devices cgroup (childSubsystems)
			m, err := childCgroupV1(cg)
			cgDone <- made{m, err}
			return
		}
		res.Devices = t.devices // the device program of a container, on its own cgroup
		m, err := manager.New(cg)
		if err == nil {
			if err = m.Apply(-1); err == nil {
				err = m.Set(res)
			}
		}
		cgDone <- made{m, err}
	}()
	// P's pid, then its move into the cgroup and 'g', while the template replies.
	type started struct {
		pid int
		cg  made
		err error
	}
	startDone := make(chan started, 1)
	go func() {
		pid, err := credPid(gofds[0])
		cg := <-cgDone
		if err == nil && cg.err != nil {
			err = fmt.Errorf("cgroup of sandbox %s: %w", id, cg.err)
		}
		if err == nil && cg.m != nil {
			var moved []string // v1's cpu and cpuacct may be one hierarchy
			for _, p := range cg.m.GetPaths() {
				if slices.Contains(moved, p) {
					continue
				}
				moved = append(moved, p)
				if err = cgroups.AddProcess(p, pid); err != nil {
					err = fmt.Errorf("cgroup of sandbox %s: %w", id, err)
					break
				}
			}
		}
		if err == nil {
			if _, err = unix.Write(gofds[0], []byte{'g'}); err != nil {
				err = fmt.Errorf("starting sandbox %s: %w", id, err)
			}
		}
		startDone <- started{pid, cg, err}
	}()
	fds := []int{int(agentChild.Fd()), int(agentChild.Fd()), int(errW.Fd()), gofds[1]}
	if bridge != nil {
		fds = append(fds, int(bridge.Fd()))
	}
	reply, err := t.request(ctx, &req, prog, fds)
	answered()
	for _, f := range []*os.File{agentChild, errW, goChild} {
		f.Close()
	}
	agentChild, errW = nil, nil
	tReply := time.Since(t0)
	if err != nil {
		// No P, or one that will not be known: the template closes its
		// copy of P's socket, or is destroyed; this ends credPid too.
		_ = unix.Shutdown(gofds[0], unix.SHUT_RDWR)
	}
	var st started
	select {
	case st = <-startDone:
	case <-ctx.Done():
		_ = unix.Shutdown(gofds[0], unix.SHUT_RDWR)
		st = <-startDone
		if st.err == nil {
			st.err = ctx.Err() // with a reply: the sandbox made below is destroyed
		}
	}
	cg := st.cg
	if err != nil {
		if st.pid > 0 {
			_ = unix.Kill(st.pid, unix.SIGKILL) // in its pid namespace: all of it
		}
		if cg.m != nil {
			_ = cg.m.Destroy()
		}
		return nil, fmt.Errorf("forking sandbox %s: %w", id, err)
	}
	// Set before k is in t.kids, where a template's destroy reads them.
	k.tplPid, k.hostPid, k.initPid = reply.Pid, st.pid, st.pid
	s := &Sandbox{limits: cfg.Limits, id: id, rt: r, exited: make(chan struct{}), stderr: &boundedBuffer{max: 64 << 10},
		uid: cfg.UID, lease: t.leases[slot], cgroup: cgroupPath, child: k, started: t0, cgm: cg.m, bridgeDir: cfg.BridgeDir}
	s.client = kernel.NewClient(agentHost, agentHost, kernel.Options{Logger: r.log.With("sandbox", id), OnBreak: s.onClientBreak})
	agentHost = nil
	k.s = s
	t.mu.Lock()
	code, early := t.early[k.tplPid]
	delete(t.early, k.tplPid)
	if !early {
		t.kids[k.tplPid] = k
	}
	t.mu.Unlock()
	r.track(s)
	if early {
		k.exit(code)
	}
	defer func() {
		if retErr != nil {
			_ = s.Destroy()
		}
	}()
	go func(errR *os.File) { _, _ = io.Copy(s.stderr, errR); errR.Close() }(errR)
	errR = nil

	if st.err != nil {
		return nil, fmt.Errorf("%w%s", st.err, s.stderrNote())
	}
	tRun := time.Since(t0)
	hello, err := s.client.Hello(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s %w: %w%s", id, errAgentStart, err, s.stderrNote())
	}
	s.hello = hello
	if !t.writeSet.Swap(true) {
		t.sendWriteSet(k.hostPid) // before the sandbox runs code: its caller has it only below
	}
	r.zstat(func(z *ZygoteStats) { z.Forks++ })
	r.log.Debug("sandbox forked", "sandbox", id, "template", t.id, "slot", slot, "reply", tReply, "started", tRun, "total", time.Since(t0))
	return s, nil
}

// childSubsystems are the cgroup v1 hierarchies in which a zygote child has
// a cgroup of its own: where its limits, usage and freezer are. In the
// others it stays in its template's: in cpuset, blkio, name=systemd, ...,
// where a container of forge sets nothing either, and in devices, whose
// rules are a container's, the same for the template and every child: the
// template's cgroup has them (setting them in a child's own took 9 % of
// forge's CPU per child). Each
// hierarchy costs a child a mkdir, a move and an rmdir (and cpuset a copy
// of its parent's settings): 9 of them made the cgroup 0.9 ms of the host's
// time. On v2 a child has one cgroup, with a container's device program.
var childSubsystems = []string{"memory", "cpu", "cpuacct", "pids", "freezer"}

// childCgroupV1 makes a zygote child's cgroup cg on v1, in the
// childSubsystems, by plain system calls: a mkdir in each hierarchy, then
// the limits that cgroups.Limits sets, written as libcontainer's Set
// writes them into a new cgroup (the memory limit, then memory+swap; the
// CPU period, then the quota; pids.max). What follows (pause, SetLimits,
// usage, Destroy) is libcontainer's manager of those paths. Its own Apply
// and Set took about twice the CPU: a MkdirAll stats each path and its
// parent first, and its files are opened with openat2 from the cgroupfs
// root (cgroups.WriteFile has why that is slow).
func childCgroupV1(cg *occgroups.Cgroup) (_ occgroups.Manager, retErr error) {
	roots, err := childRoots()
	if err != nil {
		return nil, err
	}
	paths := make(map[string]string, len(roots))
	var made []string
	defer func() {
		if retErr != nil {
			for _, dir := range made {
				_ = unix.Rmdir(dir)
			}
		}
	}()
	for _, name := range childSubsystems {
		root, ok := roots[name]
		if !ok {
			continue
		}
		dir := filepath.Join(root, cg.Path) // as libcontainer joins an absolute path
		paths[name] = dir
		if slices.Contains(made, dir) {
			continue // cpu and cpuacct in one hierarchy
		}
		if err := unix.Mkdir(dir, 0o755); err != nil && err != unix.EEXIST {
			return nil, fmt.Errorf("making cgroup %s: %w", dir, err)
		}
		made = append(made, dir)
	}
	res := cg.Resources
	type write struct{ sub, file, val string }
	var writes []write
	if res.Memory != 0 {
		writes = append(writes, write{"memory", "memory.limit_in_bytes", strconv.FormatInt(res.Memory, 10)})
	}
	if res.MemorySwap != 0 {
		writes = append(writes, write{"memory", "memory.memsw.limit_in_bytes", strconv.FormatInt(res.MemorySwap, 10)})
	}
	if res.CpuPeriod != 0 {
		writes = append(writes, write{"cpu", "cpu.cfs_period_us", strconv.FormatUint(res.CpuPeriod, 10)})
	}
	if res.CpuQuota != 0 {
		writes = append(writes, write{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(res.CpuQuota, 10)})
	}
	if res.PidsLimit != nil {
		v := "max"
		if *res.PidsLimit > 0 {
			v = strconv.FormatInt(*res.PidsLimit, 10)
		}
		writes = append(writes, write{"pids", "pids.max", v})
	}
	for _, w := range writes {
		dir := paths[w.sub]
		if dir == "" {
			return nil, fmt.Errorf("cannot set %s limit: no %s hierarchy", w.sub, w.sub)
		}
		if err := cgroups.WriteFile(dir, w.file, w.val); err != nil {
			return nil, err
		}
	}
	return manager.NewWithPaths(cg, paths)
}

// childRoots are the mount points of the childSubsystems' v1 hierarchies,
// found once by libcontainer's own search.
var childRoots = sync.OnceValues(func() (map[string]string, error) {
	m, err := manager.New(&occgroups.Cgroup{Path: "/", Resources: &occgroups.Resources{}})
	if err != nil {
		return nil, err
	}
	all, roots := m.GetPaths(), map[string]string{}
	for _, name := range childSubsystems {
		if p, ok := all[name]; ok {
			roots[name] = p
		}
	}
	if all["devices"] == "" || roots["freezer"] == "" || roots["pids"] == "" {
		// As libcontainer's own check: no devices cgroup is no sandbox
		// (a child's device rules are its template's there).
		return nil, fmt.Errorf("cgroup v1: no devices, freezer or pids hierarchy among %v", slices.Sorted(maps.Keys(all)))
	}
	return roots, nil
})

func (r *Runtime) zstat(f func(*ZygoteStats)) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	f(&r.zstats)
}

func (t *template) alive() bool {
	select {
	case <-t.exited:
		return false
	default:
		return true
	}
}

// request sends one fork request with its descriptors and waits for the
// reply. The request carries the seccomp program's BPF only when the
// template was not sent it before.
func (t *template) request(ctx context.Context, req *forkRequest, prog bpf, fds []int) (zygoteMsg, error) {
	t.forkMu.Lock()
	defer t.forkMu.Unlock()
	if !t.alive() {
		return zygoteMsg{}, errTemplateGone
	}
	msg, shape, fast, err := t.message(req, prog)
	if err != nil {
		return zygoteMsg{}, err
	}
	if err := sendFds(t.ctl, msg, fds); err != nil {
		return zygoteMsg{}, fmt.Errorf("%w: %w", errTemplateGone, err)
	}
	select {
	case m := <-t.replies:
		if m.Error != "" {
			return m, fmt.Errorf("zygote template %s: %.500s", t.id, m.Error)
		}
		if m.Pid <= 1 {
			return m, fmt.Errorf("zygote template %s: a reply without a pid", t.id)
		}
		if fast {
			t.rt.zstat(func(z *ZygoteStats) {
				z.FastForks++
				if m.Spare {
					z.SpareForks++
				}
			})
		} else if shape != nil { // the template registered it: it forks the next of its shape in C
			t.shape = shape
		}
		return m, nil
	case <-t.exited:
		return zygoteMsg{}, fmt.Errorf("%w%s", errTemplateGone, note(t.stderr))
	case <-ctx.Done():
		// The reply may still come: the template is no longer to be trusted in step.
		go t.destroy()
		return zygoteMsg{}, ctx.Err()
	}
}

// sendFds sends msg with fds on the socket f. Through f's SyscallConn, so
// a Close of f (its template's exit) waits for the send and never lets the
// descriptor's number be reused under it.
func sendFds(f *os.File, msg []byte, fds []int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	oob := unix.UnixRights(fds...)
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), msg, oob, nil, 0)
		return serr != unix.EAGAIN
	}); err != nil {
		return err
	}
	return serr
}

// message is the fork request as sent (under forkMu). When the request's
// shape is the one the template registered last, it is a fast request (forkRequest.fast). Else it is the whole request,
// with the BPF of its seccomp program only if the template has not been
// sent it, which it is counted as from here (a request that fails to reach
// the template ends the template); shape is then the request's shape,
// which the template registers if the fork succeeds.
func (t *template) message(req *forkRequest, prog bpf) (msg, shape []byte, fast bool, err error) {
	req.Seccomp, req.SeccompReset = "", false
	if shape, err = req.shape(); err != nil {
		return nil, nil, false, err
	}
	if t.sent[prog.id] && bytes.Equal(shape, t.shape) {
		msg, err := req.fast()
		return msg, nil, true, err
	}
	t.shape = nil // the template forgets its own at this request
	if !t.sent[prog.id] {
		if t.sent == nil || len(t.sent) >= maxSentPrograms {
			req.SeccompReset = t.sent != nil
			t.sent = make(map[string]bool)
		}
		req.Seccomp = prog.hex
		t.sent[prog.id] = true
	}
	msg, err = json.Marshal(req)
	return msg, shape, false, err
}

// shape is the request without what each fork has of its own (its id, host
// ids, hostname and bridge): the same for the forks of one configuration.
func (req forkRequest) shape() ([]byte, error) {
	req.ID, req.IDsStart, req.Hostname, req.Bridge = "", 0, "", false
	return json.Marshal(req)
}

// fast is req as a fast request, the message a template forks from in C
// (zfork.c's serve_fast): 'F', flags (1: the bridge), the lengths of the id
// and the hostname, the first host id (32 bits, little-endian), the id and
// the hostname, whose bytes are [0-9A-Za-z.-].
func (req *forkRequest) fast() ([]byte, error) {
	if len(req.ID) == 0 || len(req.ID) > 63 || len(req.Hostname) == 0 || len(req.Hostname) > 63 {
		return nil, fmt.Errorf("fork request: id %q or hostname %q is not 1-63 bytes", req.ID, req.Hostname)
	}
	var flags byte
	if req.Bridge {
		flags = 1
	}
	msg := append(make([]byte, 0, 8+len(req.ID)+len(req.Hostname)), 'F', flags, byte(len(req.ID)), byte(len(req.Hostname)))
	msg = binary.LittleEndian.AppendUint32(msg, req.IDsStart)
	return append(append(msg, req.ID...), req.Hostname...), nil
}

// credPid reads the byte P writes first on its socket and the pid the
// kernel sent with it (SO_PASSCRED: P's, in forge's pid namespace).
func credPid(fd int) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("the sandbox's pid 1: %w", err)
		}
		if n != 1 || buf[0] != 'p' {
			return 0, errors.New("the sandbox's pid 1 ended before it started")
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return 0, fmt.Errorf("the sandbox's pid 1 sent no credentials (%d messages): %v", len(msgs), err)
		}
		cred, err := unix.ParseUnixCredentials(&msgs[0])
		if err != nil {
			return 0, fmt.Errorf("the sandbox's pid 1: %w", err)
		}
		if cred.Pid <= 1 {
			return 0, fmt.Errorf("the sandbox's pid 1 has host pid %d", cred.Pid)
		}
		return int(cred.Pid), nil
	}
}

// destroy kills the template and gives its ids back (children die with it).
// A second call waits for the first: Runtime.Close must not return while a
// retired template's destroy still holds its ids.
func (t *template) destroy() {
	t.mu.Lock()
	if t.gone {
		t.mu.Unlock()
		<-t.over
		return
	}
	defer close(t.over)
	t.gone = true
	t.retired = true
	if t.aging != nil {
		t.aging.Stop()
	}
	t.mu.Unlock()
	t.rt.tmu.Lock()
	t.rt.templates = slices.DeleteFunc(t.rt.templates, func(o *template) bool { return o == t })
	t.rt.tmu.Unlock()
	// Out of all only at the end: closeTemplates then waits for a destroy
	// begun elsewhere (a retired template's) until its ids are given back.
	defer func() {
		t.rt.tmu.Lock()
		t.rt.all = slices.DeleteFunc(t.rt.all, func(o *template) bool { return o == t })
		t.rt.tmu.Unlock()
	}()
	t.killChildren()
	if t.c != nil {
		if t.proc != nil {
			_ = t.c.Signal(unix.SIGKILL)
			select {
			case <-t.exited:
			case <-time.After(5 * time.Second):
				t.rt.log.Warn("zygote template init not reaped 5s after SIGKILL", "template", t.id)
			}
		}
		if err := t.c.Destroy(); err != nil {
			t.rt.log.Warn("destroying zygote template (its host ids stay reserved)", "template", t.id, "err", err)
			return
		}
	}
	if t.ctl != nil {
		t.ctl.Close()
	}
	if t.procs != nil {
		t.procs.Close()
	}
	for _, l := range t.leases {
		var err error
		if t.proc != nil && !t.alive() {
			err = l.Release()
		} else if _, err = l.ReleaseIfUnused(); err == nil {
			continue
		}
		if err != nil {
			t.rt.log.Warn("releasing zygote template ids", "template", t.id, "err", err)
		}
	}
	if t.bridgeDir != "" {
		if err := os.RemoveAll(t.bridgeDir); err != nil {
			t.rt.log.Warn("removing a zygote template's mount points", "template", t.id, "err", err)
		}
	}
	t.rt.log.Debug("zygote template destroyed", "template", t.id)
}

// killChildren kills the children still alive and waits (bounded) until
// the template has reported each one's exit: killing the template first
// would leave the kernel to kill them all as its pid namespace goes, slowly.
func (t *template) killChildren() {
	t.mu.Lock()
	kids := make([]*zchild, 0, len(t.kids))
	for _, k := range t.kids {
		kids = append(kids, k)
	}
	t.mu.Unlock()
	deadline := time.After(5 * time.Second)
	for _, k := range kids {
		k.templateDied("forge destroyed it while the sandbox lived: it fell out of step with the host, or forge is closing")
		_ = k.kill(unix.SIGKILL)
	}
	for _, k := range kids {
		select {
		case <-k.s.exited:
		case <-t.exited:
			return
		case <-deadline:
			t.rt.log.Warn("children of a zygote template not reaped 5s after SIGKILL", "template", t.id)
			return
		}
	}
}

// closeTemplates destroys every template (Runtime.Close, after the children).
func (r *Runtime) closeTemplates() {
	r.tmu.Lock()
	r.closing = true
	r.tmu.Unlock()
	r.bgStarts.Wait()
	r.tmu.Lock()
	all := slices.Clone(r.all)
	r.tmu.Unlock()
	for _, t := range all {
		t.destroy()
	}
}

// Child-side operations of Sandbox.

func (k *zchild) kill(sig unix.Signal) error {
	if k.initPid <= 0 { // kill(0) would signal forge's own process group
		if sig != unix.SIGKILL {
			return fmt.Errorf("signal %s: the sandbox's pid 1 is not known yet", unix.SignalName(sig))
		}
	} else if err := unix.Kill(k.initPid, sig); sig != unix.SIGKILL {
		return err
	}
	if k.s.cgm == nil {
		return nil
	}
	// A frozen process dies only once thawed (the pool pauses children).
	_ = k.setFreezer(occgroups.Thawed)
	if k.initPid > 0 {
		// P is pid 1: the kernel kills its whole pid namespace, and nothing
		// leaves a pid namespace. (Listing the cgroup after P's death only
		// spun while the kernel tore the namespace down: 1.4 ms of host CPU
		// per child, measured.)
		return nil
	}
	// Before P was known, what is in the cgroup is killed by its list
	// until it is empty; nothing can leave the cgroup.
	for range 100 {
		pids, err := cgroupProcs(k.s.cgm)
		if err != nil || len(pids) == 0 {
			return err
		}
		for _, p := range pids {
			_ = unix.Kill(p, sig)
		}
	}
	return errors.New("processes remain in the cgroup after 100 rounds of SIGKILL")
}

// freezeChild freezes a child's cgroup. On v1, libcontainer's freezer
// rewrites and rereads freezer.state in a busy loop until every task has
// entered the refrigerator, so on a loaded host the host spins for as long
// as the child's tasks wait to be scheduled (a pause in the pool's refills
// took 6.7 ms p50 at load 5), on the cores those tasks need. Here the
// first rounds only yield the processor (an idle child's tasks freeze within
// a few of them: a sleep, even of 50 µs, costs about a millisecond when Go's
// timers have to wake an idle thread, and callers of Pause wait for it);
// then the wait sleeps, from 50 µs up, for at most about 200 ms, as
// libcontainer's 1000 rounds; then it thaws and fails, as libcontainer does
// (freezeLocked retries). A pause off the request's path (PauseIdle: a
// session's sandbox, after the answer) sleeps from the first round.
// freezeSpins is how many rounds freezeChild takes before it sleeps.
const freezeSpins = 20

func freezeChild(m occgroups.Manager, spins int) error {
	if occgroups.IsCgroup2UnifiedMode() {
		return m.Freeze(occgroups.Frozen)
	}
	dir := m.Path("freezer")
	wait := 50 * time.Microsecond
	for round, deadline := 0, time.Now().Add(200*time.Millisecond); ; round++ {
		// Written again each round, as libcontainer does: a task that
		// escaped one pass (forked meanwhile) is frozen by the next.
		if err := occgroups.WriteFile(dir, "freezer.state", string(occgroups.Frozen)); err != nil {
			return err
		}
		st, err := occgroups.ReadFile(dir, "freezer.state")
		if err != nil {
			_ = occgroups.WriteFile(dir, "freezer.state", string(occgroups.Thawed))
			return err
		}
		switch strings.TrimSpace(st) {
		case string(occgroups.Frozen):
			return nil
		case "FREEZING":
		default:
			return fmt.Errorf("unexpected freezer state %q while freezing", strings.TrimSpace(st))
		}
		if time.Now().After(deadline) {
			_ = occgroups.WriteFile(dir, "freezer.state", string(occgroups.Thawed))
			return errors.New("unable to freeze")
		}
		if round < spins {
			runtime.Gosched()
			continue
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Millisecond)
	}
}

// cgroupProcs lists the processes of a sandbox's cgroup (on v1, of its pids hierarchy).
func cgroupProcs(m occgroups.Manager) ([]int, error) {
	dir := m.Path("pids")
	if occgroups.IsCgroup2UnifiedMode() {
		dir = m.Path("")
	}
	return occgroups.GetPids(dir)
}

func (k *zchild) destroy() error {
	s := k.s
	if s.cgm != nil {
		if err := s.cgm.Destroy(); err != nil {
			return err
		}
	}
	select {
	case <-s.exited:
	default:
		return errors.New("its init is not reaped")
	}
	k.tpl.release(k.slot)
	return nil
}
