package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/runtime/idmap"
)

// Rootless mode: forge runs as root of a user namespace of its own
// (internal/rootless), over the user's uid and subordinate range. The
// sandboxes' blocks are cut from that range, and limits come from a
// delegated cgroup v2 subtree (delegate_linux.go) or, without one, rlimits.

// overflowID is the id the kernel shows for ids a namespace does not map:
// every host process of another user carries it in forge's /proc, so no
// block holds it (idmap's /proc scan would find it busy forever).
const overflowID = 65534

// RootlessBlockSize is the ids each sandbox maps in rootless mode when
// security.uid_map_size asks for more: the user's range (65536 ids from
// useradd) then holds 63 sandboxes, each mapping its uids 0-1023.
const RootlessBlockSize = 1024

// RootlessIDs is the range and block size sandboxes get in rootless mode
// from the ids forge's namespace maps (inside ids 1..n: the user's
// subordinate range), for a configured block size and sandbox uid. A zero
// range means the user has no subordinate range.
func RootlessIDs(procRoot string, block, uid uint32) (idmap.Range, uint32, error) {
	m, err := rootless.Mapped(procRoot)
	if err != nil {
		return idmap.Range{}, 0, err
	}
	r := idmap.Range{Start: m.Start, Size: m.Size}
	if r.Size == 0 {
		return r, 1, nil
	}
	if uint64(r.Start)+uint64(r.Size) > overflowID {
		r.Size = overflowID - r.Start
	}
	if block == 0 || block > RootlessBlockSize {
		block = max(RootlessBlockSize, uid+1)
	}
	if r.Size < block {
		return idmap.Range{}, 0, fmt.Errorf("%w: the user's subordinate range (%d ids as mapped) holds no block of %d ids; give the user a larger range in /etc/subuid and /etc/subgid", ErrInvalidConfig, r.Size, block)
	}
	return r, block, nil
}

// LimitsHeld says which sandbox limits hold in this runtime and how, for
// forge doctor and the logs.
type LimitsHeld struct {
	// Cgroup is true when each sandbox has a cgroup of its own (root, or a
	// delegated v2 subtree).
	Cgroup bool `json:"cgroup"`
	// Delegated is the delegated cgroup v2 subtree a rootless forge's
	// cgroups are in ("" as root, or with rlimits).
	Delegated string `json:"delegated,omitempty"`
	// Source says where a rootless forge's limits come from ("" as root),
	// Unit the systemd unit of Delegated, if any, and Bus where its
	// manager answered.
	Source Source `json:"source,omitempty"`
	Unit   string `json:"unit,omitempty"`
	Bus    string `json:"bus,omitempty"`
	// Memory, Pids, CPU, Freeze and Parent (all sandboxes together) say
	// how each is held ("" when it is not).
	Memory, Pids, CPU, Freeze, Parent string
}

func (h LimitsHeld) String() string {
	f := func(s string) string {
		if s == "" {
			return "not held"
		}
		return s
	}
	return fmt.Sprintf("memory: %s; pids: %s; cpu: %s; pause: %s", f(h.Memory), f(h.Pids), f(h.CPU), f(h.Freeze))
}

// Held is what limits this runtime's sandboxes get.
func (r *Runtime) Held() LimitsHeld {
	if r.delegated.Root != "" {
		return r.delegated.Held(path.Base(r.cgroupBase))
	}
	if !r.noCgroups {
		return LimitsHeld{Cgroup: true, Memory: "cgroup memory.max (all processes together, OOM kill)", Pids: "cgroup pids.max",
			CPU: "cgroup CPU quota", Freeze: "cgroup freezer", Parent: "cgroup " + r.cgroupBase}
	}
	return HeldRootless()
}

// HeldRootless is what limits hold in rootless mode without a cgroup of
// forge's own: rlimits on each sandbox process.
func HeldRootless() LimitsHeld {
	return LimitsHeld{Source: SourceRlimits, Memory: "RLIMIT_DATA per process (heap and anonymous memory of each process, not of all together; no OOM count)",
		Pids: "RLIMIT_NPROC (processes and threads of the sandbox's own uid)"}
}

// rlimitsFor adds the rlimits that stand in for cgroup limits in rootless
// mode without a cgroup.
func rlimitsFor(l cgroups.Limits) []configs.Rlimit {
	return []configs.Rlimit{
		{Type: unix.RLIMIT_DATA, Hard: uint64(l.MemoryBytes), Soft: uint64(l.MemoryBytes)},
		{Type: unix.RLIMIT_NPROC, Hard: uint64(l.Pids), Soft: uint64(l.Pids)},
	}
}

// nsProcesses lists the host pids in the pid namespace of init (a sandbox
// without a cgroup to list them from).
func nsProcesses(procRoot string, init int) ([]int, error) {
	want, err := os.Readlink(fmt.Sprintf("%s/%d/ns/pid", procRoot, init))
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("%s/%d/ns/pid", procRoot, pid)); err == nil && ns == want {
			out = append(out, pid)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no process in the sandbox's pid namespace")
	}
	return out, nil
}

// inPidNS reports whether pid is in the pid namespace of init.
func inPidNS(procRoot string, init, pid int) (bool, error) {
	want, err := os.Readlink(fmt.Sprintf("%s/%d/ns/pid", procRoot, init))
	if err != nil {
		return false, err
	}
	ns, err := os.Readlink(fmt.Sprintf("%s/%d/ns/pid", procRoot, pid))
	if err != nil {
		return false, err
	}
	return ns == want, nil
}

// setRlimits applies l's rlimits to every process of the sandbox (forge,
// root of the namespace that owns the sandbox's, may raise them too).
func (s *Sandbox) setRlimits(l cgroups.Limits) error {
	pids, err := nsProcesses(s.rt.procRoot, s.Pid())
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		for _, rl := range rlimitsFor(l) {
			lim := unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}
			if err := unix.Prlimit(pid, rl.Type, &lim, nil); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("prlimit %d: %w", pid, err))
			}
		}
	}
	return errors.Join(errs...)
}
