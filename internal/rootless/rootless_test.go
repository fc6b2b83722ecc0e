package rootless

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeProc(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckUserNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // "" means allowed
	}{
		{"allowed", map[string]string{"sys/user/max_user_namespaces": "15000\n"}, ""},
		{"max 0", map[string]string{"sys/user/max_user_namespaces": "0\n"}, "user.max_user_namespaces is 0"},
		{"no user namespaces", map[string]string{"sys/kernel/x": ""}, "has no user namespaces"},
		{"debian knob", map[string]string{"sys/user/max_user_namespaces": "10", "sys/kernel/unprivileged_userns_clone": "0"}, "kernel.unprivileged_userns_clone is 0"},
		{"apparmor", map[string]string{"sys/user/max_user_namespaces": "10", "sys/kernel/apparmor_restrict_unprivileged_userns": "1"}, "kernel.apparmor_restrict_unprivileged_userns is 1"},
		{"knobs that allow", map[string]string{"sys/user/max_user_namespaces": "10", "sys/kernel/unprivileged_userns_clone": "1", "sys/kernel/apparmor_restrict_unprivileged_userns": "0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckUserNamespaces(fakeProc(t, tc.files))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrNoUserNamespace) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want ErrNoUserNamespace saying %q", err, tc.want)
			}
		})
	}
}

func TestMapped(t *testing.T) {
	for _, tc := range []struct {
		uidMap string
		want   Range
	}{
		{"         0       1001          1\n         1     165536      65536\n", Range{Start: 1, Size: 65536}},
		{"         0       1001          1\n", Range{}},
		{"         0          0 4294967295\n", Range{Start: 1, Size: 4294967294}},
		{"         0       1001          1\n         1     100000       1000\n      1001     300000       1000\n", Range{Start: 1, Size: 2000}},
	} {
		got, err := Mapped(fakeProc(t, map[string]string{"self/uid_map": tc.uidMap}))
		if err != nil || got != tc.want {
			t.Errorf("Mapped(%q) = %v, %v; want %v", tc.uidMap, got, err, tc.want)
		}
	}
}

func TestSubordinate(t *testing.T) {
	etc := fakeProc(t, map[string]string{"subuid": "# comment\nalice:100000:65536\n4242:300000:1000\nbob:x:1\n"})
	if r, err := Subordinate(etc, 4242); err != nil || r != (Range{Start: 300000, Size: 1000}) {
		t.Errorf("by uid: %v %v", r, err)
	}
	if r, err := Subordinate(etc, 4243); err != nil || r.Size != 0 {
		t.Errorf("no range: %v %v", r, err)
	}
	if r, err := Subordinate(t.TempDir(), 4242); err != nil || r.Size != 0 {
		t.Errorf("no subuid file: %v %v", r, err)
	}
}

// The variables of a re-executed forge do not make a process in the host's
// user namespace rootless (it would take host ids for the user's own).
func TestActiveNeedsOwnNamespace(t *testing.T) {
	t.Setenv(envDone, "done")
	t.Setenv("_CONTAINERS_ROOTLESS_UID", "1000")
	if initUserNS() && Active() {
		t.Error("Active in the host's user namespace")
	}
}
