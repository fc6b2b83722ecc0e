package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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

// HeldDelegated is what limits hold in rootless mode in the delegated
// subtree root, with sandboxes' cgroups under root/parent.
func HeldDelegated(root, parent string) LimitsHeld {
	at := " (delegated subtree " + root + ")"
	return LimitsHeld{Cgroup: true, Delegated: root,
		Memory: "cgroup memory.max (all processes together, OOM kill)" + at, Pids: "cgroup pids.max" + at,
		CPU: "cgroup CPU quota" + at, Freeze: "cgroup freezer" + at, Parent: "cgroup " + path.Join(root, parent)}
}

// RootlessHeld is what limits a rootless forge started like this process
// would get (forge doctor): the delegated subtree's cgroups, or rlimits and
// why.
func RootlessHeld(procRoot, cgroupRoot string) (LimitsHeld, error) {
	d, err := FindDelegated(procRoot, cgroupRoot)
	if err != nil {
		return HeldRootless(), err
	}
	return HeldDelegated(d.Root, DefaultCgroupParent), nil
}
