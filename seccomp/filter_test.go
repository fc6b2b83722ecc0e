//go:build linux && cgo && seccomp

package seccomp

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
	lcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/test/testutil"
)

// childEnv makes the re-executed test binary a seccomp probe (see TestMain).
const childEnv = "FORGE_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// toConfig converts a spec profile the way the sandbox runtime will.
func toConfig(t testing.TB, p *specs.LinuxSeccomp) *configs.Seccomp {
	t.Helper()
	c, err := specconv.SetupSeccomp(p)
	if err != nil {
		t.Fatalf("specconv.SetupSeccomp: %v", err)
	}
	return c
}

// compile is Compile of a config's profile, as a program the test's VM runs.
func compile(t testing.TB, p *specs.LinuxSeccomp) []bpf.RawInstruction {
	t.Helper()
	raw, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	prog := make([]bpf.RawInstruction, len(raw)/8)
	for i := range prog {
		b := raw[i*8:]
		prog[i] = bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(b[0:]), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:]),
		}
	}
	return prog
}

// Seccomp return values (linux/seccomp.h).
const (
	retKillThread = 0x00000000
	retErrno      = 0x00050000
	retAllow      = 0x7fff0000
)

// run evaluates prog for one syscall. The x/net VM loads words big-endian,
// so each 32-bit word of struct seccomp_data is stored big-endian at its
// little-endian offset (filters only do aligned 32-bit loads).
func run(t *testing.T, vm *bpf.VM, arch uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[20+8*i:], uint32(a>>32))
	}
	ret, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(ret)
}

func nativeAudit(t testing.TB) uint32 {
	if runtime.GOARCH != "amd64" {
		t.Skip("BPF verdict test knows only x86_64's audit arch")
	}
	return unix.AUDIT_ARCH_X86_64
}

func TestFilterVerdicts(t *testing.T) {
	audit := nativeAudit(t)
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	prog := compile(t, p)
	insns, ok := bpf.Disassemble(prog)
	if !ok {
		t.Fatal("libseccomp emitted instructions x/net/bpf cannot disassemble")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("native filter: %d instructions", len(prog))

	const thread = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
		unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID
	eperm, enosys := uint32(retErrno|unix.EPERM), uint32(retErrno|unix.ENOSYS)
	tests := []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"read", audit, unix.SYS_READ, nil, retAllow},
		{"write", audit, unix.SYS_WRITE, nil, retAllow},
		{"getpid", audit, unix.SYS_GETPID, nil, retAllow},
		{"execve", audit, unix.SYS_EXECVE, nil, retAllow},
		{"memfd_create", audit, unix.SYS_MEMFD_CREATE, nil, retAllow},
		{"clone thread", audit, unix.SYS_CLONE, []uint64{thread}, retAllow},
		{"clone fork", audit, unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"clone vfork", audit, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD)}, retAllow},
		{"clone newuser", audit, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"clone thread+newnet", audit, unix.SYS_CLONE, []uint64{thread | unix.CLONE_NEWNET}, eperm},
		{"clone newns", audit, unix.SYS_CLONE, []uint64{unix.CLONE_NEWNS}, eperm},
		{"clone3", audit, unix.SYS_CLONE3, nil, enosys},
		{"personality query", audit, unix.SYS_PERSONALITY, []uint64{0xffffffff}, eperm},
		{"personality linux", audit, unix.SYS_PERSONALITY, []uint64{0}, eperm},
		{"unknown number", audit, 1000, nil, eperm},
		{"x32 getpid", audit, unix.SYS_GETPID | 0x40000000, nil, retKillThread},
		{"i386 getpid", unix.AUDIT_ARCH_I386, 20, nil, retKillThread},
	}
	for _, name := range DeniedSyscalls() {
		nr, err := libseccomp.GetSyscallFromName(name)
		if err != nil || nr < 0 {
			continue // umount is only a libseccomp pseudo-syscall on x86_64
		}
		tests = append(tests, struct {
			name string
			arch uint32
			nr   uint32
			args []uint64
			want uint32
		}{name, audit, uint32(nr), nil, eperm})
	}
	for _, tt := range tests {
		if got := run(t, vm, tt.arch, tt.nr, tt.args...); got != tt.want {
			t.Errorf("%s: got %#x, want %#x", tt.name, got, tt.want)
		}
	}
}

// TestRealDeal installs the default filter with libcontainer's InitSeccomp
// in a re-executed child and has it try the syscalls a sandbox escape needs.
func TestRealDeal(t *testing.T) {
	out := runChild(t, "probe")
	want := map[string]unix.Errno{
		"getpid": 0, "clone3": unix.ENOSYS,
		"unshare(CLONE_NEWUSER)": unix.EPERM, "clone(CLONE_NEWUSER)": unix.EPERM,
		"setns": unix.EPERM, "mount": unix.EPERM, "umount2": unix.EPERM, "keyctl": unix.EPERM,
		"add_key": unix.EPERM, "bpf": unix.EPERM, "perf_event_open": unix.EPERM,
		"ptrace(PTRACE_TRACEME)": unix.EPERM, "personality(0xffffffff)": unix.EPERM,
		"process_vm_readv": unix.EPERM, "userfaultfd": unix.EPERM, "open_tree": unix.EPERM,
		"fsopen": unix.EPERM, "init_module": unix.EPERM, "reboot": unix.EPERM, "swapoff": unix.EPERM,
	}
	got := map[string]unix.Errno{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, num, ok := strings.Cut(line, " ")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			t.Fatalf("bad child line %q", line)
		}
		got[name] = unix.Errno(n)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: not probed", name)
		} else if g != w {
			t.Errorf("%s: got errno %d (%v), want %d (%v)", name, g, g, w, w)
		}
	}
}

// TestPython runs the host's python3 under the default filter: threads,
// subprocess, fork, memfd_create and sockets must work; ptrace and
// unshare through ctypes must not.
func TestPython(t *testing.T) {
	_, err := exec.LookPath("python3")
	testutil.Require(t, err == nil, "python3 not on PATH")
	out := runChild(t, "python")
	if strings.TrimSpace(out) != "ok" {
		t.Errorf("python under the filter printed %q, want ok", out)
	}
}

const pythonScript = `
import ctypes, os, socket, subprocess, sys, threading
r = []
t = threading.Thread(target=lambda: r.append(1)); t.start(); t.join()
assert r == [1]
assert subprocess.run([sys.executable, "-c", "print(2)"], capture_output=True).stdout == b"2\n"
pid = os.fork()
if pid == 0:
    os._exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
os.close(os.memfd_create("x"))
a, b = socket.socketpair(); a.send(b"x"); assert b.recv(1) == b"x"
libc = ctypes.CDLL(None, use_errno=True)
assert libc.ptrace(0, 0, 0, 0) == -1 and ctypes.get_errno() == 1
assert libc.unshare(0x10000000) == -1 and ctypes.get_errno() == 1
print("ok")
`

func runChild(t *testing.T, mode string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v\nstdout: %s\nstderr: %s", mode, err, out, stderr.String())
	}
	return string(out)
}

// child installs the default filter on its locked thread (libseccomp also
// syncs it to the others) and probes, or execs python3.
func child(mode string) int {
	runtime.LockOSThread()
	if err := install(); err != nil {
		fmt.Fprintln(os.Stderr, "installing filter:", err)
		return 2
	}
	if mode == "python" {
		py, err := exec.LookPath("python3")
		if err == nil {
			err = unix.Exec(py, []string{"python3", "-c", pythonScript}, os.Environ())
		}
		fmt.Fprintln(os.Stderr, "exec python3:", err)
		return 2
	}
	for _, p := range probes() {
		r, _, errno := unix.RawSyscall6(p.nr, p.a[0], p.a[1], p.a[2], p.a[3], p.a[4], p.a[5])
		if p.nr == unix.SYS_CLONE && errno == 0 && r == 0 {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) // a forked child: leave now
		}
		fmt.Printf("%s %d\n", p.name, errno)
	}
	return 0
}

func install() error {
	p, err := Default()
	if err != nil {
		return err
	}
	c, err := specconv.SetupSeccomp(p)
	if err != nil {
		return err
	}
	// As in a sandbox: no_new_privs lets an unprivileged process install it.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	_, err = lcseccomp.InitSeccomp(c)
	return err
}

// sessionKeyring is KEY_SPEC_SESSION_KEYRING (-3) as a syscall argument.
var sessionKeyring = func() uintptr { k := int64(unix.KEY_SPEC_SESSION_KEYRING); return uintptr(k) }()

type probe struct {
	name string
	nr   uintptr
	a    [6]uintptr
}

// probes use arguments that would succeed, or fail with something other
// than EPERM, if the filter let them through. A clone that got through
// would return 0 in the child, so it exits at once (see child).
func probes() []probe {
	return []probe{
		{"getpid", unix.SYS_GETPID, [6]uintptr{}},
		{"clone3", unix.SYS_CLONE3, [6]uintptr{}},
		{"unshare(CLONE_NEWUSER)", unix.SYS_UNSHARE, [6]uintptr{unix.CLONE_NEWUSER}},
		{"clone(CLONE_NEWUSER)", unix.SYS_CLONE, [6]uintptr{unix.CLONE_NEWUSER | uintptr(unix.SIGCHLD)}},
		{"setns", unix.SYS_SETNS, [6]uintptr{^uintptr(0), 0}},
		{"mount", unix.SYS_MOUNT, [6]uintptr{}},
		{"umount2", unix.SYS_UMOUNT2, [6]uintptr{}},
		{"keyctl", unix.SYS_KEYCTL, [6]uintptr{unix.KEYCTL_GET_KEYRING_ID, sessionKeyring}},
		{"add_key", unix.SYS_ADD_KEY, [6]uintptr{}},
		{"bpf", unix.SYS_BPF, [6]uintptr{^uintptr(0)}},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, [6]uintptr{}},
		{"ptrace(PTRACE_TRACEME)", unix.SYS_PTRACE, [6]uintptr{unix.PTRACE_TRACEME}},
		{"personality(0xffffffff)", unix.SYS_PERSONALITY, [6]uintptr{0xffffffff}},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV, [6]uintptr{}},
		{"userfaultfd", unix.SYS_USERFAULTFD, [6]uintptr{}},
		{"open_tree", unix.SYS_OPEN_TREE, [6]uintptr{^uintptr(0)}},
		{"fsopen", unix.SYS_FSOPEN, [6]uintptr{}},
		{"init_module", unix.SYS_INIT_MODULE, [6]uintptr{}},
		{"reboot", unix.SYS_REBOOT, [6]uintptr{}},
		{"swapoff", unix.SYS_SWAPOFF, [6]uintptr{}},
	}
}

// BenchmarkDefaultCompile measures what a sandbox start pays for seccomp
// before loading: building the profile and compiling it to BPF, for the
// native architecture and for the three Docker lists on x86_64.
func BenchmarkDefaultCompile(b *testing.B) {
	for _, bc := range []struct {
		name  string
		archs []specs.Arch
	}{
		{"native", nil},
		{"x86_64+x86+x32", []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.archs != nil && runtime.GOARCH != "amd64" {
				b.Skip("x86_64 only")
			}
			for b.Loop() {
				p, err := Default()
				if err != nil {
					b.Fatal(err)
				}
				if bc.archs != nil {
					p.Architectures = bc.archs
				}
				_ = compile(b, p)
			}
		})
	}
}
