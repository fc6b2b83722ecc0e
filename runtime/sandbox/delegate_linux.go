package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/rootless"
)

// A rootless forge on cgroup v2 gets cgroup limits when it runs in a
// delegated subtree: a cgroup the user owns (a systemd unit or scope with
// Delegate=yes chowns cgroup.procs and cgroup.subtree_control to the user;
// an admin may do the same by hand). v2's "no internal processes" rule
// lets a cgroup give controllers to children only while it holds no
// process itself, so forge first moves into a leaf, SupervisorCgroup, and
// puts each sandbox in a child of the sandboxes' cgroup beside it:
//
//	<delegated>/supervisor      forge (and the process that re-executed it)
//	<delegated>/forge/<id>      one sandbox, with its memory, pids, cpu limits
//
// The parent limits (limits.memory, limits.pids) go on <delegated>/forge.
// When the cgroup forge starts in is not delegated, Delegate asks the
// user's systemd manager for a scope that is (systemd_linux.go).

// SupervisorCgroup is the leaf of a delegated subtree that forge's own
// processes run in. A forge started there (a second forge of the same
// unit, or systemd's DelegateSubgroup=supervisor) takes its parent as the
// delegated cgroup.
const SupervisorCgroup = "supervisor"

// DelegatedControllers are the controllers the sandboxes' limits need.
var DelegatedControllers = []string{"memory", "pids", "cpu"}

// ErrNoDelegation says why a rootless forge has no cgroup of its own and
// uses rlimits instead.
var ErrNoDelegation = errors.New("no delegated cgroup v2 subtree")

// Delegation is a delegated cgroup v2 subtree forge may manage.
type Delegation struct {
	// Root is the delegated cgroup, as a path in the cgroup2 tree
	// ("/user.slice/user-1000.slice/user@1000.service/app.slice/forge.service").
	Root string
	// Move: forge runs in Root itself and moves into Root/supervisor.
	Move bool
	// Source says how forge got Root (Delegate sets it); Unit is the
	// systemd unit Root belongs to and Bus where its manager answered,
	// for the scopes created or found.
	Source    Source
	Unit, Bus string
}

// FindDelegated finds the delegated subtree this process runs in, reading
// procRoot/self/cgroup and the cgroup2 tree mounted at cgroupRoot. The
// error, wrapping ErrNoDelegation, says what is missing and how to get it.
func FindDelegated(procRoot, cgroupRoot string) (Delegation, error) {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		return Delegation{}, fmt.Errorf("%w: %s is not a cgroup v2 tree (this host mounts cgroup v1 controllers); boot with systemd.unified_cgroup_hierarchy=1 for cgroup limits", ErrNoDelegation, cgroupRoot)
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return Delegation{}, fmt.Errorf("%w: reading this process's cgroup: %w", ErrNoDelegation, err)
	}
	own := ""
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = path.Clean("/" + p)
		}
	}
	if own == "" {
		return Delegation{}, fmt.Errorf("%w: %s/self/cgroup has no cgroup v2 entry", ErrNoDelegation, procRoot)
	}
	d := Delegation{Root: own, Move: true}
	if path.Base(own) == SupervisorCgroup && own != "/"+SupervisorCgroup && writableCgroup(filepath.Join(cgroupRoot, path.Dir(own))) == nil {
		d = Delegation{Root: path.Dir(own)}
	}
	if d.Root == "/" {
		return Delegation{}, fmt.Errorf("%w: this process runs in the root cgroup, which forge does not manage; run forge in a cgroup delegated to you (systemd-run --user --scope -p Delegate=yes, or the user unit in deploy/systemd)", ErrNoDelegation)
	}
	dir := filepath.Join(cgroupRoot, d.Root)
	if err := writableCgroup(dir); err != nil {
		return Delegation{}, fmt.Errorf("%w: this process's cgroup %s is not delegated to you (%w); run forge in a systemd unit or scope with Delegate=yes (deploy/systemd/user/forge.service), or have root chown the cgroup to you", ErrNoDelegation, d.Root, err)
	}
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return Delegation{}, fmt.Errorf("%w: %w", ErrNoDelegation, err)
	}
	var missing []string
	for _, c := range DelegatedControllers {
		if !slices.Contains(strings.Fields(string(avail)), c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return Delegation{}, fmt.Errorf("%w: the delegated cgroup %s lacks the controllers %s (its cgroup.controllers has %q); delegate them too (Delegate=%s in the unit, or enable them in its parent's cgroup.subtree_control)",
			ErrNoDelegation, d.Root, strings.Join(missing, ", "), strings.TrimSpace(string(avail)), strings.Join(DelegatedControllers, " "))
	}
	return d, nil
}

// writableCgroup reports why dir is not a cgroup this process may manage:
// it must be able to make children and move processes (what systemd's
// delegation chowns).
func writableCgroup(dir string) error {
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.subtree_control")} {
		if err := unix.Access(p, unix.W_OK); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// Prepare moves every process of d.Root into its supervisor leaf (when
// d.Move), then enables the controllers in d.Root and in d.Root/parent,
// the cgroup the sandboxes' cgroups go in. Repeating it is harmless.
func (d Delegation) Prepare(cgroupRoot, parent string) error {
	dir := filepath.Join(cgroupRoot, d.Root)
	if d.Move {
		leaf := filepath.Join(dir, SupervisorCgroup)
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating %s: %w", leaf, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return err
		}
		// Each pid is one write; one that exited meanwhile is gone anyway.
		for _, f := range strings.Fields(string(b)) {
			if _, err := strconv.Atoi(f); err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(f), 0o644); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("moving process %s into %s: %w", f, leaf, err)
			}
		}
	}
	if err := enableControllers(dir, DelegatedControllers...); err != nil {
		return err
	}
	sub := filepath.Join(dir, parent)
	if err := os.Mkdir(sub, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s: %w", sub, err)
	}
	return enableControllers(sub, DelegatedControllers...)
}

// Held is what limits hold in rootless mode in the delegated subtree d,
// with sandboxes' cgroups under d.Root/parent.
func (d Delegation) Held(parent string) LimitsHeld {
	at := " (delegated subtree " + d.Root + ")"
	return LimitsHeld{Cgroup: true, Delegated: d.Root, Source: d.Source, Unit: d.Unit, Bus: d.Bus,
		Memory: "cgroup memory.max (all processes together, OOM kill)" + at, Pids: "cgroup pids.max" + at,
		CPU: "cgroup CPU quota" + at, Freeze: "cgroup freezer" + at, Parent: "cgroup " + path.Join(d.Root, parent)}
}

// RootlessHeld is what limits a rootless forge started like this process
// would get (forge doctor): the delegated subtree's cgroups, found or made
// as a forge's runtime does (Delegate: so doctor, too, may ask systemd for
// a scope, which goes when doctor exits), or rlimits and why.
func RootlessHeld(ctx context.Context, procRoot, cgroupRoot string) (LimitsHeld, error) {
	d, err := Delegate(ctx, procRoot, cgroupRoot)
	if err != nil {
		return HeldRootless(), err
	}
	return d.Held(DefaultCgroupParent), nil
}

// scopeTimeout bounds the talk with the user's systemd manager, scope
// creation included (seconds natively; a guest under TCG is far slower).
const scopeTimeout = 30 * time.Second

// Delegate finds or makes the delegated cgroup v2 subtree of a rootless
// forge: the cgroup it runs in when that is a systemd unit with
// Delegate=yes (SourceScopeFound) or a delegated cgroup no systemd unit of
// the user's holds (SourceInherited); otherwise, when the user's systemd
// manager answers, a transient scope with Delegate=yes that it creates for
// this process (SourceScopeCreated), unless forge runs in a unit with
// Delegate=yes already, which a scope could not better. The error,
// wrapping ErrNoDelegation, says why there is none.
func Delegate(ctx context.Context, procRoot, cgroupRoot string) (Delegation, error) {
	return delegate(ctx, procRoot, cgroupRoot, os.Getpid(), func(ctx context.Context) (userManager, string, error) {
		m, err := DialUserManager(ctx, rootless.UID(), UserBusAddresses(os.Getenv))
		if err != nil {
			return nil, "", err
		}
		return m, m.Address, nil
	})
}

// userManager is what Delegate needs of the user's systemd manager: the
// real one (UserManager) or, in the unit test, one that moves a process in
// a fake cgroup tree.
type userManager interface {
	UnitOf(ctx context.Context, pid int) (string, bool, error)
	StartScope(ctx context.Context, name, slice string, pid int) error
	Close()
}

func delegate(ctx context.Context, procRoot, cgroupRoot string, pid int, dial func(context.Context) (userManager, string, error)) (Delegation, error) {
	d, err := FindDelegated(procRoot, cgroupRoot)
	if _, v2 := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); v2 != nil {
		return d, err // cgroup v1: no scope of systemd's has limits either
	}
	ctx, cancel := context.WithTimeout(ctx, scopeTimeout)
	defer cancel()
	m, bus, derr := dial(ctx)
	if derr != nil {
		if err != nil {
			return d, fmt.Errorf("%w; nor can forge ask systemd for a scope: %w", err, derr)
		}
		d.Source = SourceInherited
		return d, nil
	}
	defer m.Close()
	unit, delegated, uerr := m.UnitOf(ctx, pid)
	switch {
	case uerr == nil && delegated && err != nil:
		// A scope of forge's own would get no more controllers than the
		// unit systemd delegated already (and would take forge out of it).
		return d, fmt.Errorf("%w (in the systemd unit %s, which has Delegate=yes)", err, unit)
	case uerr == nil && delegated:
		d.Source, d.Unit, d.Bus = SourceScopeFound, unit, bus
		return d, nil
	case err == nil && uerr != nil: // none of the manager's units holds it
		d.Source = SourceInherited
		return d, nil
	}
	// Not delegated, or a unit of systemd's without Delegate=yes (a
	// terminal's scope, say): that cgroup is systemd's to manage, not forge's.
	name := fmt.Sprintf("forge-%d.scope", pid)
	if serr := m.StartScope(ctx, name, ScopeSlice, pid); serr != nil {
		if err == nil {
			err = fmt.Errorf("%w: this process's unit has no Delegate=yes", ErrNoDelegation)
		}
		return Delegation{}, fmt.Errorf("%w; and the systemd user manager at %s made no scope: %w", err, bus, serr)
	}
	if d, err = FindDelegated(procRoot, cgroupRoot); err != nil {
		return d, fmt.Errorf("in the systemd scope %s: %w", name, err)
	}
	d.Source, d.Unit, d.Bus = SourceScopeCreated, name, bus
	return d, nil
}
