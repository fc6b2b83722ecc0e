package seccomp

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	moby "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// verdict is what a spec-level profile does with a syscall whose arguments
// no rule looks at: the action of the first unconditional rule naming it,
// else "conditional" when only argument-filtered rules name it, else the
// default action.
func verdict(p *specs.LinuxSeccomp, name string) (specs.LinuxSeccompAction, uint) {
	conditional := false
	for _, r := range p.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		if len(r.Args) > 0 {
			conditional = true
			continue
		}
		errno := uint(0)
		if r.ErrnoRet != nil {
			errno = *r.ErrnoRet
		}
		return r.Action, errno
	}
	if conditional {
		return "conditional", 0
	}
	errno := uint(0)
	if p.DefaultErrnoRet != nil {
		errno = *p.DefaultErrnoRet
	}
	return p.DefaultAction, errno
}

func TestDefaultDenies(t *testing.T) {
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range DeniedSyscalls() {
		t.Run(name, func(t *testing.T) {
			for i, r := range p.Syscalls {
				if slices.Contains(r.Names, name) && r.Action != specs.ActErrno {
					t.Errorf("rule %d has action %s for %s, want only SCMP_ACT_ERRNO rules", i, r.Action, name)
				}
			}
			act, errno := verdict(p, name)
			if act != specs.ActErrno || errno != uint(unix.EPERM) {
				t.Errorf("got %s errno %d, want SCMP_ACT_ERRNO errno %d", act, errno, unix.EPERM)
			}
		})
	}
}

func TestDefaultAllows(t *testing.T) {
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		want  specs.LinuxSeccompAction
		errno uint
	}{
		{"read", specs.ActAllow, 0},
		{"write", specs.ActAllow, 0},
		{"execve", specs.ActAllow, 0},
		{"memfd_create", specs.ActAllow, 0},
		{"futex", specs.ActAllow, 0},
		{"mmap", specs.ActAllow, 0},
		{"clone", "conditional", 0}, // by flags; see TestFilterVerdicts
		{"clone3", specs.ActErrno, uint(unix.ENOSYS)},
	}
	for _, tt := range tests {
		if act, errno := verdict(p, tt.name); act != tt.want || errno != tt.errno {
			t.Errorf("%s: got %s errno %d, want %s errno %d", tt.name, act, errno, tt.want, tt.errno)
		}
	}
}

func TestDefaultCloneRuleRejectsNamespaces(t *testing.T) {
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	const newNS = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	var found bool
	for _, r := range p.Syscalls {
		if !slices.Contains(r.Names, "clone") {
			continue
		}
		found = true
		want := []specs.LinuxSeccompArg{{Index: 0, Value: newNS, Op: specs.OpMaskedEqual}}
		if diff := cmp.Diff(want, r.Args); diff != "" || r.Action != specs.ActAllow {
			t.Errorf("clone rule %s (-want +got):\n%s", r.Action, diff)
		}
	}
	if !found {
		t.Error("no clone rule: threads could not be created")
	}
}

func TestDefaultNativeArchOnly(t *testing.T) {
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]specs.Arch{NativeArch()}, p.Architectures); diff != "" {
		t.Errorf("architectures (-want +got):\n%s", diff)
	}
	if NativeArch() == "" {
		t.Error("NativeArch() is empty")
	}
}

func TestDefaultIsFresh(t *testing.T) {
	a, _ := Default()
	a.Syscalls[0].Names[0] = "mutated"
	b, _ := Default()
	if b.Syscalls[0].Names[0] == "mutated" {
		t.Error("Default() results share memory")
	}
}

// Docker's default profile in its JSON form (default.json is generated from
// the same data) must load through the strict custom-profile path and,
// apart from forge's extra denials, give the same filter.
func TestFromJSONDockerDefault(t *testing.T) {
	data, err := json.MarshalIndent(moby.DefaultProfile(), "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	want, err := resolve(nil, moby.GetDefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestFromJSONErrors(t *testing.T) {
	native := string(NativeArch())
	tests := []struct {
		name, json, want string
	}{
		{"empty object", `{}`, `"defaultAction" is missing`},
		{"syntax", "{\n \"defaultAction\": \"SCMP_ACT_ERRNO\",\n}", "line 3, column 2"},
		{"wrong type", `{"defaultAction": 3}`, "line 1, column 20"},
		{"unknown field", `{"defaultAction": "SCMP_ACT_ERRNO", "sycalls": []}`, `unknown field "sycalls"`},
		{"trailing data", `{"defaultAction": "SCMP_ACT_ERRNO"} {}`, "unexpected data after"},
		{"bad default action", `{"defaultAction": "SCMP_ACT_NOPE"}`, `defaultAction: unknown action "SCMP_ACT_NOPE"`},
		{"bad rule action", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "ALLOW"}]}`,
			`syscalls[0]: [read]: unknown action "ALLOW"`},
		{"no names", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"action": "SCMP_ACT_ALLOW"}]}`, "syscalls[0]: no syscall names"},
		{"name and names", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"name": "a", "names": ["b"], "action": "SCMP_ACT_ALLOW"}]}`,
			`both "name" and "names"`},
		{"bad operator", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "EQ"}]}]}`,
			`args[0]: unknown operator "EQ"`},
		{"bad index", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}]}`,
			"index 6 out of range"},
		{"foreign arch only", `{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_S390"]}`, "do not include the native"},
		{"arch and archMap", `{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["` + native + `"], "archMap": [{"architecture": "` + native + `"}]}`,
			"both 'architectures' and 'archMap'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromJSON([]byte(tt.json))
			if !errors.Is(err, ErrInvalidProfile) {
				t.Fatalf("got %v, want ErrInvalidProfile", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestFromJSONCustom(t *testing.T) {
	p, err := FromJSON([]byte(`{
		"defaultAction": "SCMP_ACT_ERRNO",
		"architectures": ["SCMP_ARCH_X86", "` + string(NativeArch()) + `"],
		"syscalls": [
			{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
			{"name": "exit_group", "action": "SCMP_ACT_ALLOW"},
			{"names": ["reboot"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_BOOT"]}}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno,
		Architectures: []specs.Arch{NativeArch()},
		Syscalls: []specs.LinuxSyscall{
			{Names: []string{"read", "write"}, Action: specs.ActAllow},
			{Names: []string{"exit_group"}, Action: specs.ActAllow},
		},
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLoadNamesPath(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"defaultAction": "NOPE"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), bad) {
		t.Errorf("got %v, want ErrInvalidProfile naming %s", err, bad)
	}
	missing := filepath.Join(dir, "missing.json")
	_, err = Load(missing)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("got %v, want ErrNotExist naming %s", err, missing)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["ptrace"], "action": "SCMP_ACT_ERRNO"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good); err != nil {
		t.Errorf("Load(%s): %v", good, err)
	}
}

func TestCheck(t *testing.T) {
	err := Check()
	if Enabled && err != nil {
		t.Errorf("Check() = %v in a seccomp build", err)
	}
	if !Enabled && !errors.Is(err, ErrUnsupported) {
		t.Errorf("got %v, want ErrUnsupported", err)
	}
}
