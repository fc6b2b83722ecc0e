//go:build linux && cgo && seccomp

package seccomp

import (
	"fmt"
	"io"
	"os"
	"slices"

	moby "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Compile builds p's filter as libcontainer's InitSeccomp does (same action
// mapping, redundant-rule skipping and condition grouping), minus loading
// it, and returns its BPF program as struct sock_filter records: what a
// zygote child loads itself with prctl(PR_SET_SECCOMP).
func Compile(p *specs.LinuxSeccomp) ([]byte, error) {
	c, err := specconv.SetupSeccomp(p)
	if err != nil {
		return nil, fmt.Errorf("converting the seccomp profile: %w", err)
	}
	def, err := scmpAction(c.DefaultAction, c.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	f, err := libseccomp.NewFilter(def)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	for _, a := range c.Architectures {
		arch, err := libseccomp.GetArchFromString(a)
		if err != nil {
			return nil, err
		}
		if err := f.AddArch(arch); err != nil {
			return nil, err
		}
	}
	if len(c.Syscalls) > 32 {
		_ = f.SetOptimize(2)
	}
	for _, s := range c.Syscalls {
		if err := addRule(f, s, def); err != nil {
			return nil, fmt.Errorf("seccomp rule %s: %w", s.Name, err)
		}
	}
	return exportBPF(f)
}

func scmpAction(a configs.Action, errno *uint) (libseccomp.ScmpAction, error) {
	ret := int16(unix.EPERM)
	if errno != nil {
		ret = int16(*errno)
	}
	switch a {
	case configs.Allow:
		return libseccomp.ActAllow, nil
	case configs.Errno:
		return libseccomp.ActErrno.SetReturnCode(ret), nil
	case configs.Kill, configs.KillThread:
		return libseccomp.ActKillThread, nil
	case configs.KillProcess:
		return libseccomp.ActKillProcess, nil
	case configs.Trap:
		return libseccomp.ActTrap, nil
	case configs.Log:
		return libseccomp.ActLog, nil
	}
	return 0, fmt.Errorf("%w: seccomp action %v", ErrInvalidProfile, a)
}

var scmpOps = map[configs.Operator]libseccomp.ScmpCompareOp{
	configs.EqualTo: libseccomp.CompareEqual, configs.NotEqualTo: libseccomp.CompareNotEqual,
	configs.GreaterThan: libseccomp.CompareGreater, configs.GreaterThanOrEqualTo: libseccomp.CompareGreaterEqual,
	configs.LessThan: libseccomp.CompareLess, configs.LessThanOrEqualTo: libseccomp.CompareLessOrEqual,
	configs.MaskEqualTo: libseccomp.CompareMaskedEqual,
}

func addRule(f *libseccomp.ScmpFilter, s *configs.Syscall, def libseccomp.ScmpAction) error {
	act, err := scmpAction(s.Action, s.ErrnoRet)
	if err != nil || act == def {
		return err
	}
	nr, err := libseccomp.GetSyscallFromName(s.Name)
	if err != nil {
		return nil // unknown on this arch: libcontainer ignores it too
	}
	if len(s.Args) == 0 {
		return f.AddRule(nr, act)
	}
	var conds []libseccomp.ScmpCondition
	seen := map[uint]bool{}
	repeated := false
	for _, a := range s.Args {
		c, err := libseccomp.MakeCondition(a.Index, scmpOps[a.Op], a.Value, a.ValueTwo)
		if err != nil {
			return err
		}
		repeated = repeated || seen[a.Index]
		seen[a.Index] = true
		conds = append(conds, c)
	}
	if !repeated {
		return f.AddRuleConditional(nr, act, conds)
	}
	for _, c := range conds {
		if err := f.AddRuleConditional(nr, act, []libseccomp.ScmpCondition{c}); err != nil {
			return err
		}
	}
	return nil
}

func exportBPF(f *libseccomp.ScmpFilter) ([]byte, error) {
	fd, err := unix.MemfdCreate("bpf", 0)
	if err != nil {
		return nil, err
	}
	file := os.NewFile(uintptr(fd), "bpf")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, err
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(file)
}

// templateAllowed are the DeniedSyscalls a zygote template's own filter lets
// through: its children make their namespaces and mounts under it before
// each loads the full default profile on top (filters stack; the stricter
// verdict wins).
var templateAllowed = []string{"unshare", "mount", "umount2", "move_mount"} // move_mount: a child's bridge directory

// Template is the filter of a zygote template: Docker's profile for a
// process holding CAP_SYS_ADMIN in its own user namespace (clone with
// namespace flags, unshare, mount), with every other DeniedSyscalls entry
// still refused. The template never runs user code; each child adds Default.
func Template() (*specs.LinuxSeccomp, error) {
	p, err := resolveFor(nil, []string{"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID"}, moby.GetDefaultProfile)
	if err != nil {
		return nil, fmt.Errorf("resolving the template's seccomp profile: %w", err)
	}
	deny(p, slices.DeleteFunc(slices.Clone(denied), func(n string) bool { return slices.Contains(templateAllowed, n) }))
	return p, nil
}
