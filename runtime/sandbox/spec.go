package sandbox

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// SpecOpt changes one aspect of a sandbox's OCI runtime spec.
type SpecOpt func(*specs.Spec) error

// Fixed paths inside every sandbox. The image store guarantees the mount
// points exist in the shared read-only rootfs.
const (
	AgentMountPoint  = "/opt/forge/agent"
	BridgeMountPoint = "/run/forge"
	WorkspacePath    = "/workspace"
)

// Env is the whole environment of a sandbox: nothing of the host or of forge
// reaches it.
var Env = []string{
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"HOME=/tmp",
	"LANG=C.UTF-8",
	"MPLBACKEND=Agg",
	"PYTHONDONTWRITEBYTECODE=1",
}

// NewSpec builds the base spec that carries every security invariant in
// DESIGN.md, then applies opts. Options can add to it (mounts, limits) but
// none removes a namespace, the read-only root or the empty capability set.
func NewSpec(opts ...SpecOpt) (*specs.Spec, error) {
	s := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Readonly: true},
		Process: &specs.Process{
			User:            specs.User{UID: 1000, GID: 1000},
			Cwd:             WorkspacePath,
			Env:             append([]string(nil), Env...),
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
				{Type: "RLIMIT_FSIZE", Hard: 1 << 30, Soft: 1 << 30},
			},
		},
		Hostname: "sandbox",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.MountNamespace},
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.NetworkNamespace},
				{Type: specs.CgroupNamespace},
				{Type: specs.UserNamespace},
			},
			RootfsPropagation: "private",
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
				"/sys/firmware", "/sys/devices/virtual/powercap",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
			Resources: &specs.LinuxResources{},
		},
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// WithRootfs sets the (already read-only mounted) root filesystem.
func WithRootfs(path string) SpecOpt {
	return func(s *specs.Spec) error {
		if path == "" {
			return fmt.Errorf("rootfs: %w", ErrInvalidConfig)
		}
		s.Root.Path = path
		return nil
	}
}

// WithArgs sets the init process command line.
func WithArgs(args ...string) SpecOpt {
	return func(s *specs.Spec) error {
		s.Process.Args = args
		return nil
	}
}

// WithHostname gives the sandbox a hostname of its own.
func WithHostname(name string) SpecOpt {
	return func(s *specs.Spec) error {
		s.Hostname = name
		return nil
	}
}

// WithUser sets the uid and gid the code runs as inside the sandbox.
func WithUser(uid, gid uint32) SpecOpt {
	return func(s *specs.Spec) error {
		if uid == 0 || gid == 0 {
			return fmt.Errorf("sandbox user %d:%d: code never runs as root: %w", uid, gid, ErrInvalidConfig)
		}
		s.Process.User = specs.User{UID: uid, GID: gid}
		return nil
	}
}

// WithIDMapping maps container ids 0..size-1 to host ids base..base+size-1,
// an unprivileged host range.
func WithIDMapping(base, size uint32) SpecOpt {
	return func(s *specs.Spec) error {
		if base == 0 || size == 0 {
			return fmt.Errorf("id mapping %d+%d: container root must map to an unprivileged host range: %w", base, size, ErrInvalidConfig)
		}
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: base, Size: size}}
		s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
		return nil
	}
}

// maxInodes caps the files and directories of each writable tmpfs.
const maxInodes = 65536

// WithTmpfs mounts a size-capped writable tmpfs at dst owned by the sandbox user.
func WithTmpfs(dst string, size int64) SpecOpt {
	return func(s *specs.Spec) error {
		if size <= 0 {
			return fmt.Errorf("tmpfs %s size %d: %w", dst, size, ErrInvalidConfig)
		}
		u := s.Process.User
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: dst, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "mode=0755",
				"size=" + strconv.FormatInt(size, 10),
				// Bounded inodes: a million empty files would cost no
				// space but would cost the host a copy at hibernation.
				"nr_inodes=" + strconv.FormatInt(maxInodes, 10),
				"uid=" + strconv.FormatUint(uint64(u.UID), 10),
				"gid=" + strconv.FormatUint(uint64(u.GID), 10)},
		})
		return nil
	}
}

// WithReadOnlyBind bind-mounts a host directory read-only (the agent's, the
// bridge's: the only host paths a sandbox sees).
func WithReadOnlyBind(src, dst string) SpecOpt {
	return func(s *specs.Spec) error {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: dst, Type: "bind", Source: src,
			Options: []string{"rbind", "nosuid", "nodev", "ro"}})
		return nil
	}
}

// WithWritableBind bind-mounts a host path read-write: a build's uv cache
// and its target directory, never a path of a sandbox that runs user code
// for a request.
func WithWritableBind(src, dst string) SpecOpt {
	return func(s *specs.Spec) error {
		if src == "" || !strings.HasPrefix(dst, "/") {
			return fmt.Errorf("bind %q at %q: %w", src, dst, ErrInvalidConfig)
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: dst, Type: "bind", Source: src,
			Options: []string{"rbind", "nosuid", "nodev", "rw"}})
		return nil
	}
}

// WithResources sets the cgroup limits.
func WithResources(r *specs.LinuxResources) SpecOpt {
	return func(s *specs.Spec) error {
		if r == nil {
			return fmt.Errorf("resources: %w", ErrInvalidConfig)
		}
		s.Linux.Resources = r
		return nil
	}
}

// WithSeccomp installs a seccomp filter.
func WithSeccomp(sc *specs.LinuxSeccomp) SpecOpt {
	return func(s *specs.Spec) error {
		if sc == nil {
			return fmt.Errorf("seccomp profile missing: %w", ErrInvalidConfig)
		}
		s.Linux.Seccomp = sc
		return nil
	}
}

// WithCgroupsPath places the sandbox's cgroup.
func WithCgroupsPath(p string) SpecOpt {
	return func(s *specs.Spec) error {
		s.Linux.CgroupsPath = p
		return nil
	}
}

// WithUserLimits sets the sandbox's per-user kernel budgets (see
// UserLimits) as user.* sysctls of its user namespace; libcontainer writes
// them before the code starts.
func WithUserLimits(l UserLimits) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Linux.Sysctl == nil {
			s.Linux.Sysctl = make(map[string]string, len(l))
		}
		for k, v := range l {
			if v < 0 || strings.ContainsAny(k, "./") {
				return fmt.Errorf("user limit %s=%d: %w", k, v, ErrInvalidConfig)
			}
			s.Linux.Sysctl["user."+k] = strconv.FormatInt(v, 10)
		}
		return nil
	}
}
