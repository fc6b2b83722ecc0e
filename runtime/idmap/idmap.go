// Package idmap hands out host uid/gid ranges for sandboxes' user
// namespaces: forge reserves one range of host ids (security.uid_range_*),
// cuts it into blocks of security.uid_map_size ids, and leases one block to
// each live sandbox, so that no two sandboxes (and no other local user)
// share a host uid.
//
// The reserved range must be clear of every subordinate range in
// /etc/subuid and /etc/subgid and of every host account (New refuses to
// work otherwise): a local user who owns a subordinate range can become any
// id in it with newuidmap, and would then own the sandboxes mapped there.
//
// Leases are files under StateDir/idmap, one per block ever used, each
// held with an exclusive flock by the forge process that leased it, so
// several forge processes can share one state dir. A file whose lock is
// free but that still says "live" was left by a process that died; its
// block is taken again only when no host process has a uid or gid in it
// (the /proc scan happens on that path only). A sandbox releases its block
// only after it is destroyed and its init reaped, so no process of an old
// sandbox ever shares ids with a new one. Released blocks stay locked by
// their allocator for its next sandbox, which costs one write.
package idmap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The default reserved range, 0x70000000-0x7fffffff: far above what
// useradd hands out (Debian's SUB_UID_MAX is 600100000), below 2^31 (ids
// some tools treat as negative), with room for 4096 blocks of 65536 ids.
const (
	DefaultStart     = 0x70000000
	DefaultSize      = 0x10000000
	DefaultBlockSize = 65536
)

// maxID is the last valid id: (uid_t)-1 means "no change" to the kernel.
const maxID = 1<<32 - 2

// Range is Size host ids from Start.
type Range struct {
	Start uint32 `json:"start"`
	Size  uint32 `json:"size"`
}

// end is one past the last id.
func (r Range) end() uint64 { return uint64(r.Start) + uint64(r.Size) }

// Overlaps reports whether r and o share an id.
func (r Range) Overlaps(o Range) bool {
	return uint64(r.Start) < o.end() && uint64(o.Start) < r.end()
}

// Contains reports whether id is in r.
func (r Range) Contains(id uint32) bool {
	return id >= r.Start && uint64(id) < r.end()
}

// String is "first-last".
func (r Range) String() string {
	if r.Size == 0 {
		return fmt.Sprintf("%d (empty)", r.Start)
	}
	return fmt.Sprintf("%d-%d", r.Start, r.end()-1)
}

// Options configure an Allocator. Filesystem roots are fields so tests can
// point them at temporary trees.
type Options struct {
	// StateDir is forge's state dir; leases live in StateDir/idmap.
	StateDir string
	// Reserved is the range blocks are cut from (zero: the default range).
	Reserved Range
	// BlockSize is the ids per sandbox (zero: DefaultBlockSize).
	BlockSize uint32
	// EtcDir holds subuid, subgid, passwd and group ("" means /etc).
	EtcDir string
	// ProcDir is the proc filesystem scanned before a dead owner's lease
	// is taken again ("" means /proc).
	ProcDir string
	// Own says the range is the user's own subordinate range, as a
	// rootless forge's user namespace maps it: the host files are not
	// checked, since the user is meant to own those ids.
	Own bool
}

func (o *Options) setDefaults() error {
	if o.Reserved == (Range{}) {
		o.Reserved = Range{Start: DefaultStart, Size: DefaultSize}
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.EtcDir == "" {
		o.EtcDir = "/etc"
	}
	if o.ProcDir == "" {
		o.ProcDir = "/proc"
	}
	r := o.Reserved
	switch {
	case o.StateDir == "":
		return fmt.Errorf("%w: state dir not set", ErrInvalid)
	case r.Start == 0:
		return fmt.Errorf("%w: range %s starts at 0, which would map container root to host root; set %s", ErrInvalid, r, Settings)
	case r.end()-1 > maxID:
		return fmt.Errorf("%w: range %s runs past the last valid id %d; set %s", ErrInvalid, r, uint64(maxID), Settings)
	case r.Size < o.BlockSize:
		return fmt.Errorf("%w: range %s holds no block of %d ids (security.uid_map_size); set %s", ErrInvalid, r, o.BlockSize, Settings)
	}
	return nil
}

// Allocator leases blocks of the reserved range. It is safe for concurrent
// use, and several allocators (in one or several processes) may share a
// state dir when they agree on the range and the block size.
type Allocator struct {
	dir      string
	reserved Range
	block    uint32
	blocks   int
	proc     string
	geo      int // shared flock on idmap/geometry.lock while the allocator is open

	shared bool // NewShared: one range for every sandbox, no lease files

	mu     sync.Mutex
	next   int               // block tried first by the next Allocate
	held   map[int]*Lease    // blocks this allocator leased
	free   []*Lease          // released blocks whose lock is kept, reused first
	busy   map[int]time.Time // dead owners' blocks with processes left: not rescanned before then
	closed bool
}

// busyRetry is how long a dead owner's block that still had processes is
// skipped before /proc is scanned for it again.
const busyRetry = 10 * time.Second

// maxFree bounds the released blocks an allocator keeps locked for reuse
// (hidden from other processes meanwhile); more are unlocked.
const maxFree = 64

// Lease is one block leased to one sandbox.
type Lease struct {
	a    *Allocator
	idx  int
	r    Range
	fd   int    // the lease file, flocked
	line []byte // its content while live; "free" replaces "live" on release
}

// Range is the leased block.
func (l *Lease) Range() Range { return l.r }

// New checks that the reserved range is clear of the host's subordinate
// ranges and accounts (an *OverlapError per conflict, joined), prepares
// StateDir/idmap and joins the other allocators using it.
func New(opts Options) (*Allocator, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if !opts.Own {
		if err := CheckHost(opts.Reserved, opts.EtcDir); err != nil {
			return nil, err
		}
	}
	a := &Allocator{
		dir:      filepath.Join(opts.StateDir, "idmap"),
		reserved: opts.Reserved,
		block:    opts.BlockSize,
		blocks:   int(opts.Reserved.Size / opts.BlockSize),
		proc:     opts.ProcDir,
		held:     make(map[int]*Lease),
		busy:     make(map[int]time.Time),
		geo:      -1,
	}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", a.dir, err)
	}
	if err := a.joinGeometry(); err != nil {
		return nil, err
	}
	if err := a.prepareFiles(min(a.blocks, prepared)); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// NewShared is an allocator that hands the same range r to every sandbox
// (a rootless forge whose user has no subordinate range maps only the
// user's own uid: every sandbox gets it). Nothing is leased or checked.
func NewShared(r Range) *Allocator {
	return &Allocator{reserved: r, block: r.Size, blocks: 1, shared: true, geo: -1,
		held: make(map[int]*Lease), busy: make(map[int]time.Time)}
}

// Shared reports whether every sandbox gets the same range (NewShared).
func (a *Allocator) Shared() bool { return a.shared }

// prepared is how many lease files New makes sure exist: creating one
// costs a few hundred microseconds on a busy disk, reusing one a few.
const prepared = 64

// prepareFiles creates the lease files of the first n blocks (empty:
// free) that do not exist yet, so that sandbox starts reuse files.
func (a *Allocator) prepareFiles(n int) error {
	for idx := range n {
		fd, err := unix.Open(a.leasePath(idx), unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return fmt.Errorf("preparing leases in %s: %w", a.dir, err)
		}
		unix.Close(fd)
	}
	return nil
}

// Reserved is the range blocks are cut from.
func (a *Allocator) Reserved() Range { return a.reserved }

// BlockSize is the number of ids of each block.
func (a *Allocator) BlockSize() uint32 { return a.block }

func (a *Allocator) blockRange(idx int) Range {
	return Range{Start: a.reserved.Start + uint32(idx)*a.block, Size: a.block}
}

func (a *Allocator) leasePath(idx int) string {
	return filepath.Join(a.dir, strconv.FormatUint(uint64(a.blockRange(idx).Start), 10))
}

// Allocate leases a free block. A block whose lease a dead forge process
// left is taken only when no host process has an id in it.
func (a *Allocator) Allocate() (*Lease, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("%w: allocator closed", ErrInvalid)
	}
	if a.shared {
		return &Lease{a: a, idx: -1, r: a.reserved, fd: -1}, nil
	}
	if n := len(a.free); n > 0 {
		// A block this allocator released: still locked, known clear.
		l := a.free[n-1]
		a.free = a.free[:n-1]
		if err := l.mark("live"); err != nil {
			unix.Close(l.fd)
			return nil, err
		}
		a.held[l.idx] = l
		return l, nil
	}
	var scan *procIDs // read once per call, only if a stale lease is met
	var now time.Time
	if len(a.busy) > 0 {
		now = time.Now()
	}
	for i := range a.blocks {
		idx := (a.next + i) % a.blocks
		if a.held[idx] != nil {
			continue
		}
		if until, ok := a.busy[idx]; ok {
			if now.Before(until) {
				continue
			}
			delete(a.busy, idx)
		}
		l, err := a.tryTake(idx, &scan)
		if err != nil {
			return nil, err
		}
		if l != nil {
			a.next = (idx + 1) % a.blocks
			a.held[idx] = l
			return l, nil
		}
	}
	return nil, fmt.Errorf("%w: all %d blocks of %d ids in %s are in use (%s)", ErrExhausted, a.blocks, a.block, a.reserved, Settings)
}

// tryTake leases block idx if nobody holds it; nil when it is taken.
func (a *Allocator) tryTake(idx int, scan **procIDs) (*Lease, error) {
	path := a.leasePath(idx)
	r := a.blockRange(idx)
	fd, stale, err := lockFile(path)
	if err != nil || fd < 0 {
		return nil, err
	}
	if info, ok := parseLease(stale); ok && info.Live {
		// Left by a forge process that died: its sandbox may live on.
		ok, err := a.unused(r, scan)
		if err != nil || !ok {
			unix.Close(fd)
			if err == nil {
				a.busy[idx] = time.Now().Add(busyRetry)
			}
			return nil, err
		}
	}
	l := &Lease{a: a, idx: idx, r: r, fd: fd, line: fmt.Appendf(nil, "%d %d %d live\n", os.Getpid(), r.Start, r.Size)}
	if len(stale) > len(l.line) {
		if err := unix.Ftruncate(fd, 0); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("lease %s: %w", path, err)
		}
	}
	if err := l.mark("live"); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return l, nil
}

// mark writes the lease's state ("live" or "free", the same length, so
// the file never changes size and the write stays in the page cache).
func (l *Lease) mark(state string) error {
	copy(l.line[len(l.line)-5:], state)
	if _, err := unix.Pwrite(l.fd, l.line, 0); err != nil {
		return fmt.Errorf("lease %s: %w", l.r, err)
	}
	return nil
}

// lockFile opens (creating) path and takes its exclusive lock without
// waiting. fd is -1 when another holder has it. content is what the file
// held: empty for a fresh or released block.
func lockFile(path string) (fd int, content []byte, err error) {
	for range 3 {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return -1, nil, fmt.Errorf("lease %s: %w", path, err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.EWOULDBLOCK) {
				return -1, nil, nil
			}
			return -1, nil, fmt.Errorf("locking lease %s: %w", path, err)
		}
		// The holder may have released (unlinked) the file between our
		// open and our lock: then this lock guards nothing; open again.
		var fst, pst unix.Stat_t
		if unix.Fstat(fd, &fst) == nil && unix.Stat(path, &pst) == nil && fst.Ino == pst.Ino && fst.Dev == pst.Dev {
			var buf [64]byte
			n, err := unix.Pread(fd, buf[:], 0)
			if err != nil {
				unix.Close(fd)
				return -1, nil, fmt.Errorf("reading lease %s: %w", path, err)
			}
			return fd, buf[:n], nil
		}
		unix.Close(fd)
	}
	return -1, nil, nil // churning: leave this block to its users
}

// Release gives the block back. Call it only when no process of the
// sandbox can exist any more (destroyed, init reaped). It is idempotent.
func (l *Lease) Release() error {
	a := l.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[l.idx] != l {
		return nil
	}
	delete(a.held, l.idx)
	// The file stays (creating one costs far more than reusing it); the
	// lock stays too while the allocator keeps the block for its next
	// sandbox.
	err := l.mark("free")
	if err != nil || len(a.free) >= maxFree || a.closed {
		unix.Close(l.fd)
		return err
	}
	a.free = append(a.free, l)
	return nil
}

// ReleaseIfUnused releases the block if no host process has an id in it
// (for a sandbox whose processes were never waited for); false keeps it.
func (l *Lease) ReleaseIfUnused() (bool, error) {
	if l.a.shared {
		return true, nil
	}
	var scan *procIDs
	ok, err := l.a.unused(l.r, &scan)
	if err != nil || !ok {
		return false, err
	}
	return true, l.Release()
}

// Held is the number of blocks this allocator has leased.
func (a *Allocator) Held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.held)
}

// Close leaves the state dir. Leases still held are not released: their
// lock is dropped, and another allocator takes them again once no process
// is left in them.
func (a *Allocator) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	for idx, l := range a.held {
		unix.Close(l.fd)
		delete(a.held, idx)
	}
	for _, l := range a.free {
		unix.Close(l.fd)
	}
	a.free = nil
	if a.geo >= 0 {
		unix.Close(a.geo)
	}
	return nil
}

// unused reports whether no host process has a uid or gid in r.
func (a *Allocator) unused(r Range, scan **procIDs) (bool, error) {
	if *scan == nil {
		ids, err := scanProc(a.proc, a.reserved)
		if err != nil {
			return false, err
		}
		*scan = ids
	}
	return !(*scan).any(r), nil
}

// ReclaimReport says what Reclaim did with leases of dead owners.
type ReclaimReport struct {
	Reclaimed []Range `json:"reclaimed"`
	// Busy are leases of dead owners whose block still has processes.
	Busy []Range `json:"busy"`
}

// Reclaim removes the leases that dead forge processes left and whose
// blocks no process uses any more (forge gc; Allocate takes such blocks
// on its own when it meets them).
func (a *Allocator) Reclaim() (ReclaimReport, error) {
	var rep ReclaimReport
	if a.shared {
		return rep, nil
	}
	ents, err := os.ReadDir(a.dir)
	if err != nil {
		return rep, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var scan *procIDs
	for _, e := range ents {
		_, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		path := filepath.Join(a.dir, e.Name())
		fd, content, err := lockFile(path)
		if err != nil {
			return rep, err
		}
		if fd < 0 {
			continue // held by a live allocator (this one included)
		}
		info, ok := parseLease(content)
		if !ok || !info.Live { // free, or made by a process that died before writing it
			unix.Close(fd)
			continue
		}
		if ok, err = a.unused(info.Range, &scan); err != nil {
			unix.Close(fd)
			return rep, err
		}
		if ok {
			err = unix.Ftruncate(fd, 0)
			rep.Reclaimed = append(rep.Reclaimed, info.Range)
		} else {
			rep.Busy = append(rep.Busy, info.Range)
		}
		unix.Close(fd)
		if err != nil {
			return rep, err
		}
	}
	clear(a.busy) // just scanned: Allocate may look at every block again
	return rep, nil
}

// AwaitReclaim is Reclaim repeated, every 20 ms for at most within, while
// blocks of dead owners are still busy: the processes of a sandbox whose
// forge was just killed (a runc init it was making, a child still in
// exit) leave within moments, and a restart should get their blocks back
// rather than keep them reserved until the next gc.
func (a *Allocator) AwaitReclaim(ctx context.Context, within time.Duration) (ReclaimReport, error) {
	deadline := time.Now().Add(within)
	var all ReclaimReport
	for {
		rep, err := a.Reclaim()
		all.Reclaimed = append(all.Reclaimed, rep.Reclaimed...)
		all.Busy = rep.Busy
		if err != nil || len(rep.Busy) == 0 || time.Now().After(deadline) {
			return all, err
		}
		select {
		case <-ctx.Done():
			return all, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LeaseInfo is one lease file as found on disk.
type LeaseInfo struct {
	Range Range `json:"range"`
	Pid   int   `json:"pid"`  // the forge process that took it (it may be gone)
	Live  bool  `json:"live"` // leased (false: released, kept for reuse)
}

// Leases lists the live leases under stateDir (for tests and diagnostics:
// a lease of a process that has no sandbox left is a leak).
func Leases(stateDir string) ([]LeaseInfo, error) {
	dir := filepath.Join(stateDir, "idmap")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []LeaseInfo
	for _, e := range ents {
		if _, err := strconv.ParseUint(e.Name(), 10, 32); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // released meanwhile
		}
		if info, ok := parseLease(b); ok && info.Live {
			out = append(out, info)
		}
	}
	return out, nil
}

// parseLease reads "<pid> <start> <size> live|free".
func parseLease(b []byte) (LeaseInfo, bool) {
	f := strings.Fields(string(b))
	if len(f) != 4 || (f[3] != "live" && f[3] != "free") {
		return LeaseInfo{}, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 32)
	size, err3 := strconv.ParseUint(f[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return LeaseInfo{}, false
	}
	return LeaseInfo{Range: Range{Start: uint32(start), Size: uint32(size)}, Pid: pid, Live: f[3] == "live"}, true
}

// procIDs is the sorted ids found in /proc.
type procIDs struct{ ids []uint32 }

func (p *procIDs) any(r Range) bool {
	i, _ := slices.BinarySearch(p.ids, r.Start)
	return i < len(p.ids) && r.Contains(p.ids[i])
}
