package rootless_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testutil"
)

// These run inside TestRootlessDelegatedCgroup, with its user, image
// import and delegated cgroup dir (an import under TCG takes minutes).

// delegatedSession: one forge serve of the user in the delegated cgroup,
// with parent limits, a CPU quota of a quarter CPU and no pool, so the
// session's sandbox is the one sandbox cgroup in dir/forge (beside its
// zygote template's). The parent limits are
// on dir/forge; the sandbox's cgroup has the quota and is throttled while
// the code keeps a CPU busy; between calls it is frozen (cgroup.events),
// and the next call finds its variables. Without each (a forge that does
// not write the parent's memory.max and pids.max, the sandbox's cpu.max, or
// freeze it) the subtest of it fails.
func delegatedSession(t *testing.T, u *user, dir string) {
	cfg := filepath.Join(u.home, "delegated.yaml")
	const conf = "pool:\n  enabled: false\nexecution:\n  default_cpus: 0.25\nlimits:\n  memory: 3g\n  pids: 777\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c, stop := u.serve(t, cfg)
	defer stop()
	const busy = "import time\nn = 0\nt0 = time.time()\nwhile time.time() - t0 < 1.5:\n    n += 1\nx = 41\nn > 0"
	res := call(t, c, "execute_python", map[string]any{"code": busy, "session_id": "cg", "timeout": 120})
	if fmt.Sprint(res["result"]) != "true" {
		t.Fatalf("the busy call: %v", res)
	}
	sb := sandboxCgroup(t, filepath.Join(dir, "forge"))

	t.Run("ParentLimits", func(t *testing.T) {
		for file, want := range map[string]string{"memory.max": strconv.Itoa(3 << 30), "pids.max": "777"} {
			if got := readCgroup(t, filepath.Join(dir, "forge", file)); got != want {
				t.Errorf("%s/forge/%s: got %s, want %s (limits in the config)", dir, file, got, want)
			}
		}
	})
	t.Run("CPUQuota", func(t *testing.T) {
		if got := readCgroup(t, filepath.Join(sb, "cpu.max")); got != "25000 100000" {
			t.Errorf("the sandbox's cpu.max: got %q, want %q (execution.default_cpus 0.25)", got, "25000 100000")
		}
		stat := readCgroup(t, filepath.Join(sb, "cpu.stat"))
		if n := cgroupKey(stat, "nr_throttled"); n == 0 {
			t.Errorf("1.5 s of a busy loop at a quarter CPU was never throttled; cpu.stat:\n%s", stat)
		}
	})
	t.Run("Pause", func(t *testing.T) {
		// Frozen moments after the answer (runtime/session settle.go), not before it.
		frozen := func() bool { return cgroupKey(readCgroup(t, filepath.Join(sb, "cgroup.events")), "frozen") == 1 }
		testutil.Eventually(t, 2*time.Second, "the session's sandbox frozen between calls (cgroup.events)", frozen)
		res := call(t, c, "execute_python", map[string]any{"code": "x + 1", "session_id": "cg"})
		if fmt.Sprint(res["result"]) != "42" {
			t.Errorf("the resumed session: %v", res)
		}
		if got := sandboxCgroup(t, filepath.Join(dir, "forge")); got != sb {
			t.Errorf("the session's sandbox changed: %s, then %s", sb, got)
		}
		testutil.Eventually(t, 2*time.Second, "the session's sandbox frozen after its second call (cgroup.events)", frozen)
	})
}

// sandboxCgroup is the one sandbox cgroup in parent.
func sandboxCgroup(t *testing.T, parent string) string {
	t.Helper()
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range ents {
		// Beside a zygote template's (zygote mode is the default).
		if e.IsDir() && !strings.HasSuffix(e.Name(), sandbox.TemplateIDSuffix) {
			dirs = append(dirs, filepath.Join(parent, e.Name()))
		}
	}
	if len(dirs) != 1 {
		t.Fatalf("%s holds the sandbox cgroups %v, want the session's sandbox's alone", parent, dirs)
	}
	return dirs[0]
}

func readCgroup(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// cgroupKey is the value of key in a flat-keyed cgroup file (-1: absent).
func cgroupKey(s, key string) int64 {
	for l := range strings.SplitSeq(s, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return -1
}

// systemdScope: a real systemd user manager (systemd --user, with
// dbus-user-session's bus) of the user, in dir/user@UID.service, delegated
// to the user as user@.service is. forge starts in dir/session, a cgroup
// of root's, as a login session's scope is: not delegated. It asks the
// manager for a scope over systemd's private socket and over the user bus,
// and its sandboxes get cgroup limits there (an OOM kill); started by
// systemd-run --user --scope -p Delegate=yes, it finds the unit it runs in.
// dir, which holds both, is the user's, so the manager may move forge
// out of dir/session itself (on a host the system manager makes that move
// for it, AttachProcessesToUnit; this guest has no system manager).
// forge before it asked systemd for scopes got rlimits in dir/session.
func systemdScope(t *testing.T, u *user, dir string) {
	const systemd = "/lib/systemd/systemd"
	_, err := os.Stat(systemd)
	testutil.Require(t, err == nil, "systemd missing (the v2 guest installs Debian's systemd and dbus-user-session)")
	run, err := exec.LookPath("systemd-run")
	testutil.Require(t, err == nil, "systemd-run missing")

	uid := strconv.Itoa(u.uid)
	mgr, session := filepath.Join(dir, "user@"+uid+".service"), filepath.Join(dir, "session")
	for _, d := range []string{mgr, session} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{mgr, mgr + "/cgroup.procs", mgr + "/cgroup.subtree_control", mgr + "/cgroup.threads"} {
		if err := os.Chown(p, u.uid, u.gid); err != nil {
			t.Fatal(err)
		}
	}
	xdg := "/run/user/" + uid
	if err := os.MkdirAll(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(xdg, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_RUNTIME_DIR=" + xdg}
	// A user manager refuses to start on a host that systemd did not boot
	// (sd_booted: /run/systemd/system); the guest's init is a shell script.
	if _, err := os.Stat("/run/systemd/system"); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll("/run/systemd/system", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/run/systemd/system") })
	}

	cg, err := os.Open(mgr)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	sd := exec.Command(systemd, "--user")
	sd.Dir, sd.Env = u.home, append(u.env(), env...)
	sd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}},
		UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	sdLog := testutil.LogBuffer{Max: 1 << 20}
	sd.Stdout, sd.Stderr = &sdLog, &sdLog
	if err := sd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sd.Wait() }()
	t.Cleanup(func() {
		sd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			sd.Process.Kill()
			<-exited
		}
		// What the manager started and left, the bus daemon say.
		os.WriteFile(filepath.Join(mgr, "cgroup.kill"), []byte("1"), 0o644)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if b, _ := os.ReadFile(filepath.Join(mgr, "cgroup.events")); cgroupKey(string(b), "populated") == 0 {
				break
			}
		}
		os.RemoveAll(xdg)
		if t.Failed() {
			t.Logf("systemd --user:\n%s", sdLog.String())
		}
	})
	for _, s := range []string{xdg + "/systemd/private", xdg + "/bus"} {
		waitSocket(t, s, exited, &sdLog)
	}

	u.startIn(t, session)
	for _, tc := range []struct {
		name string
		env  []string
		bus  string
	}{
		{"private socket", env, "unix:path=" + xdg + "/systemd/private"},
		{"user bus", append(env, "DBUS_SESSION_BUS_ADDRESS=unix:path="+xdg+"/bus"), "unix:path=" + xdg + "/bus"},
	} {
		t.Run("created over the "+tc.name, func(t *testing.T) {
			doctor, _, _ := u.tryEnv(tc.env, "doctor", "--json")
			for _, want := range []string{`"limits source (rootless)","found":true,"detail":"systemd scope created: forge-`, "(at " + tc.bus + ")", `"limit cpu (rootless)","found":true`} {
				if !strings.Contains(doctor, want) {
					t.Errorf("doctor started in a cgroup not delegated, with a systemd user manager, does not say %s:\n%s", want, doctor)
				}
			}
		})
	}
	t.Run("limits in the created scope", func(t *testing.T) {
		out, errOut, _ := u.tryEnv(env, "run", "--json", "--memory", "64m", "b = b'x' * (256 << 20)\nprint(len(b))")
		var r runResult
		if err := json.Unmarshal([]byte(out), &r); err != nil || !r.OOMKilled {
			t.Errorf("256 MiB in a 64 MiB sandbox in forge's scope: not OOM-killed (%v):\n%s\n%s", err, out, errOut)
		}
	})
	t.Run("found", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout())
		defer cancel()
		c := u.cmd(ctx)
		c.Path, c.Args = run, []string{run, "--user", "--scope", "--quiet", "-p", "Delegate=yes", "--", u.forge, "doctor", "--json"}
		c.Env = append(c.Env, env...)
		var out, errOut bytes.Buffer
		c.Stdout, c.Stderr = &out, &errOut
		c.Run()
		want := `"limits source (rootless)","found":true,"detail":"systemd unit found: run-`
		if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), ".scope has Delegate=yes") {
			t.Errorf("doctor under systemd-run --user --scope -p Delegate=yes does not say %s:\n%s\n%s", want, out.String(), errOut.String())
		}
	})
}

// waitSocket waits until the manager listens at p.
func waitSocket(t *testing.T, p string, exited <-chan error, log *testutil.LogBuffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if st, err := os.Stat(p); err == nil && st.Mode().Type() == os.ModeSocket {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("systemd --user exited (%v) before it listened at %s:\n%s", err, p, log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd --user did not listen at %s within 2 min:\n%s", p, log.String())
		}
	}
}

// tryEnv is try with more environment variables.
func (u *user) tryEnv(env []string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout())
	defer cancel()
	c := u.cmd(ctx, args...)
	c.Env = append(c.Env, env...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	return out.String(), errb.String(), err
}
