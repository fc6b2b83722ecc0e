package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ParentLimits cap forge's parent cgroup, which holds every sandbox's
// cgroup: what all sandboxes together may use, however many there are.
// Zero leaves a limit as it is.
type ParentLimits struct {
	MemoryBytes int64 `json:"memory_bytes"`
	Pids        int64 `json:"pids"`
}

// parentCgroup is forge's parent cgroup, name, below a cgroup mount root
// (/sys/fs/cgroup; tests use a temporary directory).
type parentCgroup struct {
	root string
	name string
}

// unified reports cgroup v2: its root has cgroup.controllers. On a hybrid
// host (v1 controllers, an empty v2 tree at unified/) it has not, which is
// how libcontainer tells them apart too.
func (p parentCgroup) unified() bool {
	_, err := os.Stat(filepath.Join(p.root, "cgroup.controllers"))
	return err == nil
}

// file is the path of a limit file of controller ("memory", "pids").
func (p parentCgroup) file(controller, v1, v2 string) string {
	if p.unified() {
		return filepath.Join(p.root, p.name, v2)
	}
	return filepath.Join(p.root, controller, p.name, v1)
}

func (p parentCgroup) memoryFile() string {
	return p.file("memory", "memory.limit_in_bytes", "memory.max")
}

func (p parentCgroup) pidsFile() string { return p.file("pids", "pids.max", "pids.max") }

// other is the host pid of a live forge process, not self, with sandboxes
// below p (each sandbox's cgroup is named for its forge's pid:
// "<pid>-<id>"), or 0 when there is none.
func (p parentCgroup) other(self int) int {
	ents, _ := os.ReadDir(filepath.Dir(p.pidsFile()))
	for _, e := range ents {
		prefix, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(prefix)
		if !e.IsDir() || !ok || err != nil || pid <= 0 || pid == self {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			return pid
		}
	}
	return 0
}

// notLower is l without the limits that are below those in force (an
// unlimited one included): what a forge process sharing p with another
// live one writes, so that neither lowers the other's caps. A `forge run`
// with the defaults once set the parent's pids to 2,560 under a server
// holding 5,000 sessions, whose next forks failed.
func (p parentCgroup) notLower(l ParentLimits) ParentLimits {
	cur, err := p.read()
	if err != nil {
		return l
	}
	if cur.MemoryBytes < 0 || cur.MemoryBytes > l.MemoryBytes {
		l.MemoryBytes = 0
	}
	if cur.Pids < 0 || cur.Pids > l.Pids {
		l.Pids = 0
	}
	return l
}

// apply creates the parent cgroup and writes l's non-zero limits. On v2 the
// memory and pids controllers are enabled for it (in the root's
// cgroup.subtree_control) and for the sandboxes below it (in its own).
func (p parentCgroup) apply(l ParentLimits) error {
	if p.unified() {
		if err := enableControllers(p.root, "memory", "pids"); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(p.root, p.name), 0o755); err != nil {
			return fmt.Errorf("creating parent cgroup: %w", err)
		}
		if err := enableControllers(filepath.Join(p.root, p.name), "memory", "pids"); err != nil {
			return err
		}
	}
	for _, w := range []struct {
		path string
		v    int64
	}{{p.memoryFile(), l.MemoryBytes}, {p.pidsFile(), l.Pids}} {
		if w.v <= 0 {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
			return fmt.Errorf("creating parent cgroup: %w", err)
		}
		if err := writeCgroupFile(w.path, strconv.FormatInt(w.v, 10)); err != nil {
			return err
		}
	}
	return nil
}

// read returns the limits in force; an unlimited one ("max", or v1's
// page-rounded maximum) reads as -1, a missing cgroup as 0.
func (p parentCgroup) read() (ParentLimits, error) {
	var l ParentLimits
	var errs []error
	for _, r := range []struct {
		path string
		v    *int64
	}{{p.memoryFile(), &l.MemoryBytes}, {p.pidsFile(), &l.Pids}} {
		b, err := os.ReadFile(r.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			*r.v = -1
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("reading %s: %w", r.path, err))
		case v >= 1<<62: // v1 reports "no limit" as a page-rounded INT64_MAX
			*r.v = -1
		default:
			*r.v = v
		}
	}
	return l, errors.Join(errs...)
}

// enableControllers adds the controllers missing from dir's
// cgroup.subtree_control.
func enableControllers(dir string, want ...string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("reading enabled cgroup controllers: %w", err)
	}
	have := strings.Fields(string(b))
	var add []string
	for _, c := range want {
		if !slices.Contains(have, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return writeCgroupFile(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(add, " "))
}

func writeCgroupFile(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("writing %s to %s: %w", v, path, err)
	}
	return nil
}

// ReadParentLimits returns the limits in force on the parent cgroup name
// (Options.CgroupParent) below /sys/fs/cgroup, for forge doctor.
func ReadParentLimits(name string) (ParentLimits, error) {
	return parentCgroup{root: defaultCgroupRoot, name: name}.read()
}

// HostMemory is the host's memory size (MemTotal in procRoot/meminfo), from
// which the engine derives the parent cgroup's memory limit.
func HostMemory(procRoot string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return 0, fmt.Errorf("reading the host's memory size: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing MemTotal %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no MemTotal in %s/meminfo", procRoot)
}

const (
	defaultCgroupRoot = "/sys/fs/cgroup"
	defaultProcRoot   = "/proc"
)
