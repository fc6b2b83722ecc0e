// Package session keeps a live Python namespace between calls: each
// session is its own sandbox, paused while idle, hibernated (variables
// pickled, /workspace saved under the state dir) after its idle timeout or
// at shutdown, and brought back on its next call, also by a later forge
// process. A session belongs to one forge process at a time (a file lock).
//
// Every session also belongs to one owner, the principal that created it
// (an opaque string to this package). Ids are scoped by owner: each owner has
// its own directory (LocalOwner the sessions dir itself, as before owners
// existed), so another owner's session answers exactly like a missing one,
// and two owners may each have a session called "analysis".
package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/lazyre"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// Status of a session.
type Status string

const (
	// Active: a sandbox is running (paused between calls) in this process.
	Active Status = "active"
	// Hibernating: its state is being written; other processes wait.
	Hibernating Status = "hibernating"
	// Hibernated: no sandbox; variables and files are saved on disk.
	Hibernated Status = "hibernated"
	// Lost: the sandbox died (OOM, crash, killed); the next call starts fresh.
	Lost Status = "lost"
)

// statePath is where the agent pickles the namespace, inside the sandbox.
const statePath = "/tmp/.forge-session-state.pkl"

// Documented is what an agent wrote down about its session with
// document_state, plus the introspection taken at that moment.
type Documented struct {
	Variables     map[string]string `json:"variables"`
	Note          string            `json:"note,omitempty"`
	Updated       time.Time         `json:"updated"`
	Introspection []kernel.Variable `json:"introspection"`
}

// Meta is a session's metadata, saved as meta.json.
type Meta struct {
	ID         string      `json:"id"`
	Owner      string      `json:"owner"`
	Image      string      `json:"image"`
	Created    time.Time   `json:"created"`
	LastActive time.Time   `json:"last_active"`
	Status     Status      `json:"status"`
	OwnerPid   int         `json:"owner_pid"`
	LostReason string      `json:"lost_reason,omitempty"`
	Documented *Documented `json:"documented,omitempty"`
	// Egress is the session's egress policy (rule strings) when a request
	// gave it one; nil runs it under its profile's. Kept across hibernation.
	Egress []string `json:"egress,omitempty"`
	// Variables is the last known introspection (after document_state,
	// a variables read, or hibernation); VariableCount is updated by every
	// exec.
	Variables     []kernel.Variable `json:"variables,omitempty"`
	VariableCount int               `json:"variable_count"`
	// Unsaved names the variables the last hibernation could not pickle;
	// Unrestored those the last restore could not bring back (both).
	Unsaved    []string `json:"unsaved,omitempty"`
	Unrestored []string `json:"unrestored,omitempty"`
	// Member and Advertise name the replica that holds (or last held) the
	// session and where its peers reach it (cluster mode only).
	Member    string `json:"member,omitempty"`
	Advertise string `json:"advertise,omitempty"`
	// Checkpointed: the saved variables and /workspace are those of the
	// last answered call (cluster mode checkpoints every call), so a
	// replica that takes the session over from a dead one restores them.
	Checkpointed bool `json:"checkpointed,omitempty"`
	// TakenOver says, until the next call reports it, from which replica
	// the session was taken over.
	TakenOver string `json:"taken_over,omitempty"`
}

// Info is one row of list_sessions.
type Info struct {
	ID            string    `json:"session_id"`
	Image         string    `json:"image"`
	Created       time.Time `json:"created"`
	LastActive    time.Time `json:"last_active"`
	Status        Status    `json:"status"`
	MemoryBytes   uint64    `json:"memory_bytes"`
	VariableCount int       `json:"variable_count"`
}

// StartFunc returns a running sandbox of image for a session.
type StartFunc func(ctx context.Context, image string) (*sandbox.Sandbox, error)

// Options configure a Manager.
type Options struct {
	Dir           string // StateDir/sessions
	MaxConcurrent int
	IdleTimeout   time.Duration
	MaxLifetime   time.Duration
	Persist       bool
	Quota         int64 // bytes of /workspace saved at most
	// StateLimit caps the pickled variables copied out of the sandbox
	// (execution.tmp_size: an honest pickle cannot outgrow /tmp); 0 means
	// the sandbox's default /tmp size.
	StateLimit int64
	Start      StartFunc
	Logger     *slog.Logger
	// OnEvent is told of session creation and destruction (audit).
	OnEvent func(event, owner, id string)
	// LocalOwner keeps its sessions directly in Dir, where forge versions
	// without owners kept every session: those belong to it. Other owners'
	// sessions live in Dir/.principals/o-HASH (a name no session id can
	// have).
	LocalOwner string
	// Headroom is how many bytes forge's parent cgroup may still charge
	// (ok false: unknown). A stop saves fewer sessions at once when their
	// pickles would not fit (stop.go).
	Headroom func() (free int64, ok bool)
	// Member and Advertise, in cluster mode, name this replica and where
	// its peers reach it; each session's meta records its holder's, and
	// Holder reports them to the replicas that forward calls.
	Member    string
	Advertise string
	// Checkpoint saves every session's variables and /workspace after
	// each call, before the call returns (cluster mode), so no answered
	// call is lost when this process is killed.
	Checkpoint bool
}

// key names a session: ids are scoped by owner.
type key struct{ owner, id string }

// Manager owns this process's sessions.
type Manager struct {
	opts   Options
	log    *slog.Logger
	stop   chan struct{}
	reaped sync.WaitGroup

	// creating serializes counting an owner's sessions with registering a
	// new one, for calls with a quota (WithQuota). Taken before mu.
	creating sync.Mutex

	mu       sync.Mutex
	sessions map[key]*Session // in this process (active or being brought up)
	closed   bool

	settleDelay time.Duration // settle.go: settleDelay, tests set another

	census census       // hibernated sessions on disk, for metrics
	live   atomic.Int64 // sessions with a sandbox (setSandbox): O(1) for reserve and Live
}

// Session is one session owned by this process.
type Session struct {
	m *Manager

	sbSet atomic.Bool // sb != nil, readable without mu
	// seen is what List shows of this session while another holds mu (a
	// call, or the pause after one: settle.go): the session as its last
	// call left it, which meta.json then lacks. nil when meta.json is
	// current.
	seen atomic.Pointer[seenInfo]

	mu   sync.Mutex // one call at a time; guards everything below
	meta Meta
	sb   *sandbox.Sandbox
	lock *os.File // flock on the session dir: ownership across processes
	gone bool     // destroyed or hibernated: drop and look up again
	// fresh: created by this process and never started; Call removes it
	// again if its first sandbox fails to start.
	fresh bool
	// After a call (settle.go): the timer that pauses the sandbox once
	// the call is answered; written: durableMeta of what this process
	// last wrote. While seen is set, meta.json lacks only the last calls'
	// activity (LastActive, VariableCount), which the reaper writes.
	settle  *time.Timer
	written []byte
}

var idRE = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID checks a session id.
func ValidID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("%w %q: use 1-64 letters, digits, '_' or '-'", ErrBadID, id)
	}
	return nil
}

// NewID makes a fresh session id: 128 random bits, so that an id is never
// guessed (ids are also scoped by owner; this is the second fence).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "s-" + hex.EncodeToString(b[:])
}

// NewManager prepares the sessions dir and starts the idle reaper.
func NewManager(opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.OnEvent == nil {
		opts.OnEvent = func(string, string, string) {}
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating sessions dir: %w", err)
	}
	m := &Manager{opts: opts, log: opts.Logger, stop: make(chan struct{}), sessions: make(map[key]*Session), settleDelay: settleDelay}
	if opts.IdleTimeout > 0 {
		m.reaped.Add(1)
		go m.reaper()
	}
	return m, nil
}

// principalsDir holds the directories of owners other than LocalOwner.
const principalsDir = ".principals"

// ownerDir is the directory of an owner's sessions: Dir for LocalOwner, else
// named by a hash, because an owner is any string (a tenant id) and must not
// name a path.
func (m *Manager) ownerDir(owner string) string {
	if owner == m.opts.LocalOwner {
		return m.opts.Dir
	}
	h := sha256.Sum256([]byte(owner))
	return filepath.Join(m.opts.Dir, principalsDir, "o-"+hex.EncodeToString(h[:16]))
}

func (m *Manager) dir(k key) string { return filepath.Join(m.ownerDir(k.owner), k.id) }

func (s *Session) key() key { return key{s.meta.Owner, s.meta.ID} }

func (s *Session) dir() string { return s.m.dir(s.key()) }

// Call runs f with the session id locked and its sandbox running: created
// on first use (create must be true), brought back from hibernation, or
// started fresh after it was lost (notes say so). After f the sandbox is
// dropped if it died, else paused again once Call has returned (settle.go;
// before it returns in cluster mode, which checkpoints every call).
func (m *Manager) Call(ctx context.Context, owner, id, image string, create bool, f func(*sandbox.Sandbox, *Meta) error) (notes []string, err error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	s, err := m.get(ctx, key{owner, id}, image, create)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	notes, err = s.ensureSandboxLocked(ctx)
	if err != nil {
		if s.fresh {
			m.discardFreshLocked(s)
		}
		return notes, err
	}
	s.fresh = false
	if err := s.sb.Resume(); err != nil {
		s.dropSandboxLocked("resume failed: " + err.Error())
		return notes, err
	}
	ferr := f(s.sb, &s.meta)
	s.meta.LastActive = time.Now().UTC()
	var durable []byte
	switch {
	case !s.sb.Alive():
		s.dropSandboxLocked(s.sb.DeathReason())
	case m.opts.Checkpoint:
		// Saved, paused and written before the answer: a replica that
		// takes the session over restores what was answered.
		notes = append(notes, s.checkpointLocked(ctx)...)
	default:
		// Answered first, paused moments later (settle.go).
		s.settleLaterLocked()
		if durable = durableMeta(&s.meta); durable != nil && bytes.Equal(durable, s.written) {
			// Only the activity changed: the reaper writes it.
			s.seen.Store(&seenInfo{info: s.briefLocked(), sb: s.sb})
			return notes, ferr
		}
	}
	if err := s.saveLockedAs(durable); err != nil {
		m.log.Warn("saving session metadata", "session", id, "err", err)
	}
	return notes, ferr
}

// get returns the session, locked, owned by this process.
func (m *Manager) get(ctx context.Context, k key, image string, create bool) (*Session, error) {
	if k.owner == "" {
		return nil, ErrNoOwner
	}
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		s, ok := m.sessions[k]
		m.mu.Unlock()
		if ok {
			s.mu.Lock()
			if !s.gone {
				return s, nil
			}
			s.mu.Unlock()
			continue
		}
		s, err := m.claim(ctx, k, image, create)
		if err != nil || s != nil {
			return s, err
		}
	}
}

// claim takes ownership of a session that is on disk (hibernated or lost)
// or creates a new one. It returns nil, nil if another goroutine won.
func (m *Manager) claim(ctx context.Context, k key, image string, create bool) (*Session, error) {
	id, dir := k.id, m.dir(k)
	meta, err := readMeta(dir)
	exists := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading session %s: %w", id, err)
	}
	if !exists && !create {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if !exists {
		// Counted and registered under one lock (see WithQuota).
		unlock, err := m.admitNew(ctx, k)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := m.lock(ctx, dir, id)
	if err != nil {
		return nil, err
	}
	if exists {
		// Re-read under the lock: the previous owner may just have finished.
		if meta, err = readMeta(dir); err != nil {
			lock.Close()
			return nil, err
		}
		orphanedLocked(meta)
		m.logTakeover(meta)
	} else {
		now := time.Now().UTC()
		meta = &Meta{ID: id, Owner: k.owner, Image: image, Created: now, LastActive: now, Status: Hibernated}
	}
	meta.ID, meta.Owner = id, k.owner // the directory says whose it is (older metas name none)
	s := &Session{m: m, meta: *meta, lock: lock, fresh: !exists}
	s.mu.Lock()
	m.mu.Lock()
	if _, raced := m.sessions[k]; raced || m.closed {
		m.mu.Unlock()
		s.mu.Unlock()
		lock.Close()
		return nil, nil
	}
	m.sessions[k] = s
	m.mu.Unlock()
	if !exists {
		m.opts.OnEvent("session.create", k.owner, id)
	}
	return s, nil
}

// lock takes the session's file lock; if another process holds it while
// hibernating, wait for it to finish instead of reading half-written state.
func (m *Manager) lock(ctx context.Context, dir, id string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		// Hibernating: another process is saving it. Hibernated with the
		// lock still held: it has just written so and is about to let go.
		// Either way, wait for the lock (bounded); anything else is busy.
		meta, _ := readMeta(dir)
		// In cluster mode another replica's Holder probe takes the lock
		// for an instant: wait that out before calling the session held.
		probed := m.opts.Member != "" && time.Since(start) < clusterProbeWait
		if !probed && (meta == nil || (meta.Status != Hibernating && meta.Status != Hibernated) || time.Now().After(deadline)) {
			f.Close()
			pid := 0
			if meta != nil {
				pid = meta.OwnerPid
			}
			if meta != nil && meta.Member != "" {
				return nil, &HeldError{ID: id, Member: meta.Member, Advertise: meta.Advertise}
			}
			return nil, fmt.Errorf("%w: session %s is held by forge process %d", ErrBusy, id, pid)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// orphanedLocked marks a session lost whose meta says it was live in a
// forge process that ended without hibernating it (killed, crashed): its
// sandbox, namespace and tmpfs /workspace died with that process, and
// whatever an earlier hibernation saved is older than what the caller last
// saw, so it is not brought back. The caller holds the session's file lock,
// so no live process owns it.
func orphanedLocked(meta *Meta) {
	if meta.Status != Active && meta.Status != Hibernating {
		return
	}
	if meta.Checkpointed {
		// Its last answered call was checkpointed before it was answered
		// (a save in progress swaps files whole): nothing acknowledged is
		// lost, so it comes back from there.
		who := meta.Member
		if who == "" {
			who = fmt.Sprintf("forge process %d", meta.OwnerPid)
		}
		meta.Status, meta.LostReason = Hibernated, ""
		meta.TakenOver = fmt.Sprintf("session %s was taken over from %s, which stopped without handing it over; it is restored from the checkpoint of its last answered call", meta.ID, who)
		return
	}
	how := "ended"
	if meta.Status == Hibernating {
		how = "ended while hibernating it"
	}
	meta.Status = Lost
	meta.LostReason = fmt.Sprintf("forge process %d %s without saving it (killed or crashed); its sandbox died with it", meta.OwnerPid, how)
}

// ensureSandboxLocked gives the session a running sandbox.
func (s *Session) ensureSandboxLocked(ctx context.Context) ([]string, error) {
	if s.sb != nil {
		return nil, nil
	}
	m := s.m
	if err := m.reserve(s); err != nil {
		return nil, err
	}
	var notes []string
	if s.meta.TakenOver != "" {
		notes = append(notes, s.meta.TakenOver)
		s.meta.TakenOver = ""
	}
	switch s.meta.Status {
	case Lost:
		notes = append(notes, fmt.Sprintf("session %s was lost (%s); this call starts a fresh namespace and an empty /workspace", s.meta.ID, s.meta.LostReason))
		dropSaved(s.dir())
	}
	sb, err := m.opts.Start(ctx, s.meta.Image)
	if err != nil {
		return notes, err
	}
	s.setSandbox(sb)
	if s.meta.Status == Hibernated && s.hasSavedState() {
		n, err := s.restoreLocked(ctx)
		notes = append(notes, n...)
		if err != nil {
			s.dropSandboxLocked("restore failed: " + err.Error())
			return notes, err
		}
	}
	s.meta.Status, s.meta.OwnerPid, s.meta.LostReason = Active, os.Getpid(), ""
	s.meta.Member, s.meta.Advertise = m.opts.Member, m.opts.Advertise
	err = s.saveLocked()
	m.census.invalidate() // perhaps restored from hibernation
	return notes, err
}

// reserve checks that s may have a sandbox within max_concurrent (it is
// counted as soon as it has one) and that forge's parent cgroup has room
// for it (capacity.go). The count is a lock-free counter: no scan.
func (m *Manager) reserve(s *Session) error {
	if m.opts.MaxConcurrent <= 0 {
		return m.room()
	}
	live := int(m.live.Load())
	if s.hasSandbox() {
		live--
	}
	if live >= m.opts.MaxConcurrent {
		return fmt.Errorf("%w: %d sessions are live, the limit is %d (sessions.max_concurrent); destroy one with destroy_session", ErrLimit, live, m.opts.MaxConcurrent)
	}
	return m.room()
}

func (s *Session) setSandbox(sb *sandbox.Sandbox) {
	s.sb = sb
	if s.sbSet.Swap(sb != nil) != (sb != nil) {
		if sb != nil {
			s.m.live.Add(1)
		} else {
			s.m.live.Add(-1)
		}
	}
}

// hasSandbox is read without s.mu by reserve; a stale answer only makes
// the limit slightly early or late by one in a race.
func (s *Session) hasSandbox() bool { return s.sbSet.Load() }

func (s *Session) hasSavedState() bool {
	_, err1 := os.Stat(filepath.Join(s.dir(), "state.pkl"))
	_, err2 := os.Stat(filepath.Join(s.dir(), "workspace"))
	return err1 == nil || err2 == nil
}

// restoreLocked copies the saved /workspace into the fresh sandbox (paused
// while files go in) and unpickles the saved variables.
func (s *Session) restoreLocked(ctx context.Context) ([]string, error) {
	dir := s.dir()
	root := fmt.Sprintf("/proc/%d/root", s.sb.Pid())
	uid := s.sb.HostUID() // this sandbox's own: a restored session gets a new block
	if err := s.sb.Pause(); err != nil {
		return nil, err
	}
	ws := filepath.Join(dir, "workspace")
	if _, err := os.Stat(ws); err == nil {
		if err := copyIn(ws, root+sandbox.WorkspacePath, uid); err != nil {
			return nil, fmt.Errorf("restoring /workspace: %w", err)
		}
	}
	pkl := filepath.Join(dir, "state.pkl")
	_, hasState := os.Stat(pkl)
	if hasState == nil {
		tmp, err := os.OpenFile(root+filepath.Dir(statePath), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return nil, err
		}
		err = copyInFile(pkl, int(tmp.Fd()), filepath.Base(statePath), uid)
		tmp.Close()
		if err != nil {
			return nil, fmt.Errorf("restoring variables: %w", err)
		}
	}
	if err := s.sb.Resume(); err != nil {
		return nil, err
	}
	if hasState != nil {
		return nil, nil
	}
	rep, err := s.sb.Client().RestoreState(ctx, statePath)
	if err != nil {
		return nil, fmt.Errorf("restoring variables: %w", err)
	}
	s.meta.Unrestored = append(append([]string(nil), s.meta.Unsaved...), rep.Failed...)
	rep.Failed = s.meta.Unrestored
	notes := []string{fmt.Sprintf("session %s was restored from hibernation: %d variables back", s.meta.ID, len(rep.Restored))}
	if len(rep.Failed) > 0 {
		notes = append(notes, fmt.Sprintf("these variables could not be restored: %v", rep.Failed))
	}
	return notes, nil
}

// dropSandboxLocked destroys the sandbox after it died; the session is lost.
func (s *Session) dropSandboxLocked(reason string) {
	if s.sb != nil {
		_ = s.sb.Destroy()
		s.setSandbox(nil)
	}
	s.meta.Status, s.meta.LostReason = Lost, reason
	// What was saved before is no longer the session's state.
	dropSaved(s.dir())
}

// dropSaved removes a session's saved variables and /workspace copy.
func dropSaved(dir string) {
	os.RemoveAll(filepath.Join(dir, "workspace"))
	os.Remove(filepath.Join(dir, "state.pkl"))
	os.RemoveAll(filepath.Join(dir, ".save"))
}

func (s *Session) saveLocked() error { return s.saveLockedAs(nil) }

// saveLockedAs writes meta.json; durable is durableMeta(&s.meta) when the
// caller has it already.
func (s *Session) saveLockedAs(durable []byte) error {
	if err := writeMeta(s.dir(), &s.meta); err != nil {
		s.written = nil // unknown: the next call writes again
		return err
	}
	if durable == nil {
		durable = durableMeta(&s.meta)
	}
	s.written = durable
	s.seen.Store(nil) // meta.json is current
	return nil
}

func readMeta(dir string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, err
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("corrupt %s: %w", filepath.Join(dir, "meta.json"), err)
	}
	return &m, nil
}

// writeMeta replaces meta.json atomically.
func writeMeta(dir string, m *Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".meta.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "meta.json"))
}

// hibernateLocked saves the namespace and /workspace to disk and destroys
// the sandbox; the session stays listed and comes back on its next call.
func (s *Session) hibernateLocked(ctx context.Context, force bool) error {
	if s.sb == nil {
		return nil
	}
	dir := s.dir()
	s.meta.Status = Hibernating
	if err := s.saveLocked(); err != nil {
		// Nothing was touched: the session stays live.
		s.meta.Status = Active
		return fmt.Errorf("hibernating session %s (kept live): saving its metadata: %w", s.meta.ID, err)
	}
	err := s.saveStateLocked(ctx, dir)
	if err != nil && !force && s.sb.Alive() {
		// Nothing is lost: the session stays live (paused) and the
		// reaper tries again later.
		s.meta.Status = Active
		_ = s.sb.Pause()
		return errors.Join(fmt.Errorf("hibernating session %s (kept live): %w", s.meta.ID, err), s.saveLocked())
	}
	_ = s.sb.Destroy()
	s.setSandbox(nil)
	switch {
	case err == nil:
		s.meta.Status = Hibernated
	case s.meta.Checkpointed:
		// Cluster mode saved the state of its last answered call before
		// answering it, and a failed save swaps no file in: that
		// checkpoint is the session (a full volume at a rollout lost
		// such sessions: TestPVCFull).
		s.m.log.Warn("hibernating session failed; it keeps the checkpoint of its last answered call", "session", s.meta.ID, "err", err)
		s.meta.Status, err = Hibernated, nil
	default:
		s.meta.Status, s.meta.LostReason = Lost, "hibernation failed: "+err.Error()
	}
	return errors.Join(err, s.saveLocked())
}

func (s *Session) saveStateLocked(ctx context.Context, dir string) error {
	sb := s.sb
	if err := sb.Resume(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if vars, err := sb.Client().Inspect(cctx); err == nil {
		s.meta.Variables = vars
	}
	rep, err := sb.Client().PickleState(cctx, statePath)
	if err != nil {
		return fmt.Errorf("pickling variables: %w", err)
	}
	s.meta.Unsaved = rep.Failed
	// Frozen from here: nothing inside can change a path while it is copied.
	if err := sb.Pause(); err != nil {
		return err
	}
	root := fmt.Sprintf("/proc/%d/root", sb.Pid())
	tmp := filepath.Join(dir, ".save")
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	// A half-written copy (a full disk) must not keep the space it took:
	// the metadata written next needs it.
	defer os.RemoveAll(tmp)
	if err := copyOut(root+sandbox.WorkspacePath, filepath.Join(tmp, "workspace"), s.m.opts.Quota); err != nil {
		return fmt.Errorf("saving /workspace: %w", err)
	}
	limit := s.m.opts.StateLimit
	if limit <= 0 {
		limit = sandbox.DefaultTmpSize
	}
	if _, err := copyFile(root+statePath, filepath.Join(tmp, "state.pkl"), 0o600, -1, limit); err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			// The agent's handler was replaced: a pickle it wrote is a regular file that
			// fits in /tmp. Nothing it says can be trusted, so the sandbox goes.
			fe.Path = statePath
			sb.KillFor("hibernation found a forged state file: " + fe.Error())
			return fmt.Errorf("saving variables: %w; the agent writes a regular file of at most execution.tmp_size, so its handler was replaced and the sandbox was killed", err)
		}
		return fmt.Errorf("saving variables: %w", err)
	}
	// Swap the new save in; a crash in between leaves either the old or
	// the new copy, never half of one.
	for _, n := range []string{"workspace", "state.pkl"} {
		os.RemoveAll(filepath.Join(dir, n))
		if err := os.Rename(filepath.Join(tmp, n), filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	return os.RemoveAll(tmp)
}

// release forgets a session in this process and drops its lock.
func (m *Manager) release(s *Session) {
	m.census.invalidate() // hibernated or destroyed
	s.gone = true
	if s.settle != nil {
		s.settle.Stop()
	}
	m.mu.Lock()
	if m.sessions[s.key()] == s {
		delete(m.sessions, s.key())
	}
	m.mu.Unlock()
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

// Destroy removes a session: its sandbox, saved state and metadata.
func (m *Manager) Destroy(ctx context.Context, owner, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	s, err := m.get(ctx, key{owner, id}, "", false)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.sb != nil {
		_ = s.sb.Destroy()
		s.setSandbox(nil)
	}
	err = os.RemoveAll(s.dir())
	m.release(s)
	m.opts.OnEvent("session.destroy", owner, id)
	return err
}

// Hibernate saves a live session's variables and /workspace and frees its
// sandbox now, as idleness would later; the next call brings it back.
// ErrHibernated when it has no sandbox in this process.
func (m *Manager) Hibernate(ctx context.Context, owner, id string) error {
	if !m.opts.Persist {
		return ErrNoPersist
	}
	if err := ValidID(id); err != nil {
		return err
	}
	s, err := m.get(ctx, key{owner, id}, "", false)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.sb == nil {
		if s.meta.Status == Hibernated {
			m.release(s) // on disk only: nothing of it stays in this process
		}
		return fmt.Errorf("%w: %s", ErrHibernated, id)
	}
	if err := s.hibernateLocked(ctx, false); err != nil && s.sb != nil {
		return err // kept live
	}
	m.release(s)
	m.log.Info("session hibernated on request", "session", id)
	return nil
}

// Document stores descriptions of variables and a note, with an
// introspection of every user variable.
func (m *Manager) Document(ctx context.Context, owner, id string, vars map[string]string, note string, clear bool) (*Documented, error) {
	var doc *Documented
	_, err := m.Call(ctx, owner, id, "", false, func(sb *sandbox.Sandbox, meta *Meta) error {
		intro, err := sb.Client().Inspect(ctx)
		if err != nil {
			return err
		}
		meta.Variables, meta.VariableCount = intro, len(intro)
		if meta.Documented == nil || clear {
			meta.Documented = &Documented{Variables: map[string]string{}}
		}
		for k, v := range vars {
			meta.Documented.Variables[k] = v
		}
		if note != "" || clear {
			meta.Documented.Note = note
		}
		meta.Documented.Updated = time.Now().UTC()
		meta.Documented.Introspection = intro
		d := *meta.Documented
		doc = &d
		return nil
	})
	return doc, err
}

// State returns a session's metadata with a fresh introspection when it is
// live in this process, else what was saved.
func (m *Manager) State(ctx context.Context, owner, id string) (*Meta, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	if owner == "" {
		return nil, ErrNoOwner
	}
	k := key{owner, id}
	m.mu.Lock()
	_, live := m.sessions[k]
	m.mu.Unlock()
	if !live {
		meta, err := readMeta(m.dir(k))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if err == nil && m.ownerGone(m.dir(k), meta) {
			orphanedLocked(meta) // as the next call will find it
		}
		return meta, err
	}
	var out Meta
	_, err := m.Call(ctx, owner, id, "", false, func(sb *sandbox.Sandbox, meta *Meta) error {
		vars, err := sb.Client().Inspect(ctx)
		if errors.Is(err, kernel.ErrProtocol) {
			return err // the sandbox has been killed; the session is lost
		}
		if err == nil {
			meta.Variables = vars
		}
		out = *meta
		return nil
	})
	return &out, err
}

// List reports owner's sessions in the state dir: live ones of this
// process, hibernated, lost, and those other processes hold.
func (m *Manager) List(ctx context.Context, owner string) ([]Info, error) {
	if owner == "" {
		return nil, ErrNoOwner
	}
	ents, err := os.ReadDir(m.ownerDir(owner))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, e := range ents {
		if !e.IsDir() || ValidID(e.Name()) != nil {
			continue
		}
		k := key{owner, e.Name()}
		m.mu.Lock()
		s, live := m.sessions[k]
		m.mu.Unlock()
		var info Info
		if live && s.mu.TryLock() {
			info = s.infoLocked()
			s.mu.Unlock()
		} else if sn := seenOf(s, live); sn != nil {
			info = sn.info
			info.MemoryBytes = memoryOf(sn.sb)
		} else {
			meta, err := readMeta(m.dir(k))
			if err != nil {
				continue
			}
			if m.ownerGone(m.dir(k), meta) {
				orphanedLocked(meta) // as the next call will find it
			}
			info = Info{ID: meta.ID, Image: meta.Image, Created: meta.Created, LastActive: meta.LastActive,
				Status: meta.Status, VariableCount: meta.VariableCount}
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (s *Session) infoLocked() Info {
	info := s.briefLocked()
	info.MemoryBytes = memoryOf(s.sb)
	return info
}

// briefLocked is infoLocked without the memory, which takes a read of the
// sandbox's cgroup.
func (s *Session) briefLocked() Info {
	return Info{ID: s.meta.ID, Image: s.meta.Image, Created: s.meta.Created, LastActive: s.meta.LastActive,
		Status: s.meta.Status, VariableCount: s.meta.VariableCount}
}

// seenInfo is a session as its last call left it (Session.seen).
type seenInfo struct {
	info Info
	sb   *sandbox.Sandbox // its memory is read when listed
}

func seenOf(s *Session, live bool) *seenInfo {
	if !live {
		return nil
	}
	return s.seen.Load()
}

// memoryOf is sb's memory charge, 0 without a sandbox or when it is gone.
func memoryOf(sb *sandbox.Sandbox) uint64 {
	if sb == nil {
		return 0
	}
	mem, err := sb.MemoryCurrent()
	if err != nil {
		return 0
	}
	return mem
}

// reaper hibernates sessions idle past the timeout and deletes those past
// their maximum lifetime.
func (m *Manager) reaper() {
	defer m.reaped.Done()
	every := min(max(m.opts.IdleTimeout/10, 50*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.reap()
		}
	}
}

func (m *Manager) reap() {
	m.mu.Lock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		if !s.mu.TryLock() {
			continue // busy: not idle
		}
		idle := time.Since(s.meta.LastActive)
		old := m.opts.MaxLifetime > 0 && time.Since(s.meta.Created) > m.opts.MaxLifetime
		switch {
		case old:
			id := s.meta.ID
			if s.sb != nil {
				_ = s.sb.Destroy()
				s.setSandbox(nil)
			}
			os.RemoveAll(s.dir())
			m.release(s)
			m.opts.OnEvent("session.destroy", s.meta.Owner, id)
			m.log.Info("session reached its maximum lifetime; destroyed", "session", id)
		case s.sb != nil && idle > m.opts.IdleTimeout:
			m.idleOut(s)
		case s.seen.Load() != nil:
			s.flushMetaLocked() // the last calls' activity (settle.go)
		}
		s.mu.Unlock()
	}
}

// idleOut frees an idle session's sandbox: hibernated when sessions
// persist, else destroyed.
func (m *Manager) idleOut(s *Session) {
	id := s.meta.ID
	if m.opts.Persist {
		if err := s.hibernateLocked(context.Background(), false); err != nil {
			m.log.Warn("hibernating idle session", "session", id, "err", err)
			if s.sb != nil {
				s.meta.LastActive = time.Now().UTC() // retry after another idle period
				return
			}
		}
		m.release(s)
		m.log.Info("idle session hibernated", "session", id)
		return
	}
	_ = s.sb.Destroy()
	s.setSandbox(nil)
	os.RemoveAll(s.dir())
	m.release(s)
	m.opts.OnEvent("session.destroy", s.meta.Owner, id)
	m.log.Info("idle session destroyed", "session", id)
}

// Close hibernates (or, without persistence, destroys) every session of
// this process (see stopAll: bounded parallelism, a deadline per session).
// Cancelling ctx abandons the sessions not yet saved.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	close(m.stop)
	m.reaped.Wait()
	return m.stopAll(ctx, all)
}

// Live is the number of sessions with a running sandbox in this process.
func (m *Manager) Live() int {
	return int(m.live.Load())
}
