package sandbox

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The user's manager is asked at $DBUS_SESSION_BUS_ADDRESS first, then at
// the sockets in $XDG_RUNTIME_DIR that exist: systemd's private one
// (direct), then the user bus.
func TestUserBusAddresses(t *testing.T) {
	xdg := t.TempDir()
	os.MkdirAll(filepath.Join(xdg, "systemd"), 0o755)
	env := map[string]string{"XDG_RUNTIME_DIR": xdg}
	getenv := func(k string) string { return env[k] }
	if got := UserBusAddresses(getenv); len(got) != 0 {
		t.Errorf("no sockets: got %v, want none", got)
	}
	os.WriteFile(filepath.Join(xdg, "bus"), nil, 0o644) // not a socket
	for _, p := range []string{filepath.Join(xdg, "systemd", "private"), filepath.Join(xdg, "bus")} {
		os.Remove(p)
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	env["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=" + xdg + "/bus"
	want := []BusAddress{{Address: "unix:path=" + xdg + "/bus"}, {Address: "unix:path=" + xdg + "/systemd/private", Direct: true}}
	if diff := cmp.Diff(want, UserBusAddresses(getenv)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// fakeManager stands for the user's systemd manager over a fake cgroup
// tree: StartScope makes the scope's cgroup with the controllers and moves
// the process there, as systemd does (the real one is tested in the v2
// guest: test/rootless TestRootlessDelegatedCgroup/SystemdScope).
type fakeManager struct {
	proc, cg   string
	unit       string // the unit the process runs in ("": none)
	delegated  bool
	startErr   error
	started    []string
	controller string
}

func (f *fakeManager) UnitOf(_ context.Context, pid int) (string, bool, error) {
	if f.unit == "" {
		return "", false, errors.New("PID does not belong to any loaded unit")
	}
	return f.unit, f.delegated, nil
}

func (f *fakeManager) StartScope(_ context.Context, name, slice string, pid int) error {
	f.started = append(f.started, slice+"/"+name)
	if f.startErr != nil {
		return f.startErr
	}
	own := "/user@1000.service/" + slice + "/" + name
	mkCgroup(f.cg, own, f.controller)
	return os.WriteFile(filepath.Join(f.proc, "self", "cgroup"), []byte("0::"+own+"\n"), 0o644)
}

func (f *fakeManager) Close() {}

func mkCgroup(root, dir, controllers string) {
	os.MkdirAll(filepath.Join(root, dir), 0o755)
	for _, f := range []string{"cgroup.procs", "cgroup.subtree_control"} {
		os.WriteFile(filepath.Join(root, dir, f), nil, 0o644)
	}
	os.WriteFile(filepath.Join(root, dir, "cgroup.controllers"), []byte(controllers+"\n"), 0o644)
}

// Delegate keeps a delegated cgroup (found: a unit with Delegate=yes;
// inherited: no unit of the manager's), and asks for a scope when the
// cgroup is not delegated or is a unit's without Delegate=yes, never to
// leave a unit with Delegate=yes.
func TestDelegate(t *testing.T) {
	const all = "cpu memory pids"
	for _, tc := range []struct {
		name, own, controllers string
		noManager              bool
		unit                   string
		delegated              bool
		startErr               error
		want                   Delegation
		wantStarted            []string
		err                    string
	}{
		{name: "inherited, no manager", own: "/forge", controllers: all, noManager: true,
			want: Delegation{Root: "/forge", Move: true, Source: SourceInherited}},
		{name: "inherited, not the manager's", own: "/forge", controllers: all,
			want: Delegation{Root: "/forge", Move: true, Source: SourceInherited}},
		{name: "found", own: "/user@1000.service/app.slice/run-u7.scope", controllers: all, unit: "run-u7.scope", delegated: true,
			want: Delegation{Root: "/user@1000.service/app.slice/run-u7.scope", Move: true, Source: SourceScopeFound, Unit: "run-u7.scope", Bus: "fake"}},
		{name: "created: not delegated", own: "/session-1.scope", controllers: "memory pids",
			want:        Delegation{Root: "/user@1000.service/app.slice/forge-42.scope", Move: true, Source: SourceScopeCreated, Unit: "forge-42.scope", Bus: "fake"},
			wantStarted: []string{"app.slice/forge-42.scope"}},
		{name: "created: a unit without Delegate=yes", own: "/user@1000.service/app.slice/vte-spawn.scope", controllers: all, unit: "vte-spawn.scope",
			want:        Delegation{Root: "/user@1000.service/app.slice/forge-42.scope", Move: true, Source: SourceScopeCreated, Unit: "forge-42.scope", Bus: "fake"},
			wantStarted: []string{"app.slice/forge-42.scope"}},
		{name: "a unit with Delegate=yes, no cpu", own: "/user@1000.service/app.slice/forge.service", controllers: "memory pids", unit: "forge.service", delegated: true,
			err: "lacks the controllers cpu (its cgroup.controllers has \"memory pids\"); delegate them too (Delegate=memory pids cpu in the unit, or enable them in its parent's cgroup.subtree_control) (in the systemd unit forge.service"},
		{name: "no manager, not delegated", own: "/session-1.scope", controllers: "memory pids", noManager: true,
			err: "nor can forge ask systemd for a scope: no systemd user manager reachable"},
		{name: "scope refused", own: "/session-1.scope", controllers: "memory pids", startErr: errors.New("access denied"),
			wantStarted: []string{"app.slice/forge-42.scope"}, err: "made no scope: access denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			os.MkdirAll(filepath.Join(proc, "self"), 0o755)
			os.WriteFile(filepath.Join(proc, "self", "cgroup"), []byte("0::"+tc.own+"\n"), 0o644)
			os.WriteFile(filepath.Join(cg, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
			mkCgroup(cg, tc.own, tc.controllers)
			m := &fakeManager{proc: proc, cg: cg, unit: tc.unit, delegated: tc.delegated, startErr: tc.startErr, controller: all}
			d, err := delegate(context.Background(), proc, cg, 42, func(context.Context) (userManager, string, error) {
				if tc.noManager {
					return nil, "", ErrNoUserManager
				}
				return m, "fake", nil
			})
			if diff := cmp.Diff(tc.wantStarted, m.started); diff != "" {
				t.Errorf("scopes asked for (-want +got)\n%s", diff)
			}
			if tc.err != "" {
				if !errors.Is(err, ErrNoDelegation) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want ErrNoDelegation saying %q", d, err, tc.err)
				}
				return
			}
			if err != nil || d != tc.want {
				t.Fatalf("got %+v, %v; want %+v", d, err, tc.want)
			}
		})
	}
}
