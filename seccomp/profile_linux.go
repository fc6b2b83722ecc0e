// Package seccomp turns seccomp profiles into runtime-spec filters for forge's
// sandboxes: Docker's default profile hardened with explicit denials, or a
// custom Docker-format profile, always restricted to the native architecture
// (compiling for every architecture Docker lists costs ~35 ms per start).
package seccomp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"

	moby "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// denied are refused with EPERM on top of Docker's profile, whatever
// Docker's rules say: debugging other processes, changing the execution
// domain, namespaces, mounts, the kernel keyring, BPF, perf, userfaultfd
// and host administration. clone stays allowed by Docker's argument filter
// (no CLONE_NEW* flags, so threads and fork work); clone3 gets ENOSYS from
// Docker's rule so libc falls back to clone, whose flags a filter can see.
var denied = []string{
	"ptrace", "personality", "process_vm_readv", "process_vm_writev",
	"unshare", "setns",
	"mount", "umount", "umount2", "pivot_root", "open_tree", "move_mount",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"add_key", "request_key", "keyctl",
	"bpf", "perf_event_open", "userfaultfd",
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff",
}

// DeniedSyscalls lists the syscalls that Default refuses with EPERM in
// addition to Docker's profile.
func DeniedSyscalls() []string { return slices.Clone(denied) }

// goarchToSpec maps GOARCH to the seccomp architecture of native syscalls.
var goarchToSpec = map[string]specs.Arch{
	"386":      specs.ArchX86,
	"amd64":    specs.ArchX86_64,
	"arm":      specs.ArchARM,
	"arm64":    specs.ArchAARCH64,
	"loong64":  specs.ArchLOONGARCH64,
	"mips":     specs.ArchMIPS,
	"mipsle":   specs.ArchMIPSEL,
	"mips64":   specs.ArchMIPS64,
	"mips64le": specs.ArchMIPSEL64,
	"ppc64":    specs.ArchPPC64,
	"ppc64le":  specs.ArchPPC64LE,
	"riscv64":  specs.ArchRISCV64,
	"s390x":    specs.ArchS390X,
}

// NativeArch is the seccomp architecture of the binary's own syscalls, or ""
// when forge does not know it.
func NativeArch() specs.Arch { return goarchToSpec[runtime.GOARCH] }

// Default returns Docker's default profile for a process with no
// capabilities on this kernel, restricted to the native architecture, with
// DeniedSyscalls refused with EPERM.
func Default() (*specs.LinuxSeccomp, error) {
	p, err := resolve(nil, moby.GetDefaultProfile)
	if err != nil {
		return nil, fmt.Errorf("resolving Docker's default seccomp profile: %w", err)
	}
	deny(p, denied)
	return p, nil
}

// Load reads a custom Docker-format profile (the JSON of `docker run
// --security-opt seccomp=FILE`) and resolves it like Default, without
// Default's extra denials.
func Load(path string) (*specs.LinuxSeccomp, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading seccomp profile: %w", err)
	}
	p, err := FromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %q: %w", path, err)
	}
	return p, nil
}

// FromJSON is Load for a profile already in memory. Unknown fields are
// errors (a misspelt "syscalls" must not silently allow everything), and so
// is a profile without a default action, which Docker reads as "no seccomp".
func FromJSON(data []byte) (*specs.LinuxSeccomp, error) {
	var prof moby.Seccomp
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&prof); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidProfile, jsonProblem(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: unexpected data after the profile's JSON object", ErrInvalidProfile)
	}
	if err := validate(&prof); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidProfile, err)
	}
	p, err := resolve(prof.Architectures, func(rs *specs.Spec) (*specs.LinuxSeccomp, error) {
		return moby.LoadProfile(string(data), rs)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidProfile, err)
	}
	return p, nil
}

// resolve has moby expand a profile's conditional rules for this kernel,
// the native architecture and an empty capability set, then keeps only the
// native architecture: 32-bit and x32 syscalls hit libseccomp's bad-arch
// action (kill) instead of being filtered a second and third time. archs is
// the profile's explicit "architectures" list, if any.
func resolve(archs []specs.Arch, expand func(*specs.Spec) (*specs.LinuxSeccomp, error)) (*specs.LinuxSeccomp, error) {
	return resolveFor(archs, nil, expand)
}

// resolveFor is resolve for a process holding caps.
func resolveFor(archs []specs.Arch, caps []string, expand func(*specs.Spec) (*specs.LinuxSeccomp, error)) (*specs.LinuxSeccomp, error) {
	native := NativeArch()
	if native == "" {
		return nil, fmt.Errorf("%w: %s", ErrUnsupportedArch, runtime.GOARCH)
	}
	if len(archs) > 0 && !slices.Contains(archs, native) {
		return nil, fmt.Errorf("architectures %v do not include the native %s", archs, native)
	}
	withCaps := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}}}
	p, err := expand(withCaps)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errors.New("profile has no defaultAction and no syscalls")
	}
	p.Architectures = []specs.Arch{native}
	return p, nil
}

// deny removes names from every rule of p and adds one rule refusing them
// with EPERM, so no allow rule (conditional or not) can let them through.
func deny(p *specs.LinuxSeccomp, names []string) {
	rules := make([]specs.LinuxSyscall, 0, len(p.Syscalls)+1)
	for _, r := range p.Syscalls {
		r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool {
			return slices.Contains(names, n)
		})
		if len(r.Names) > 0 {
			rules = append(rules, r)
		}
	}
	eperm := uint(unix.EPERM)
	p.Syscalls = append(rules, specs.LinuxSyscall{
		Names:    slices.Clone(names),
		Action:   specs.ActErrno,
		ErrnoRet: &eperm,
	})
}
