// Package rootless_test runs forge as an ordinary user that the test creates
// with useradd (which gives it a subordinate range in /etc/subuid and
// /etc/subgid): forge run, sessions hibernated by one forge serve and
// restored by the next, code mode, the sandbox invariants that hold rootless,
// and the refusal on a host without user namespaces.
package rootless_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// user is an ordinary account made for one test, with a home of its own
// and copies of what forge needs that it can read.
type user struct {
	name     string
	uid, gid int
	home     string
	sub      rootless.Range // from /etc/subuid
	forge    string         // a copy of bin/forge the user can run
	mcp      string         // a copy of bin/mcpserver
	layout   string         // a copy of the base image's OCI layout
	cgroup   *os.File       // when set, forge starts in this cgroup (v2)
}

func newUser(t *testing.T) *user {
	t.Helper()
	testutil.RequiresRoot(t)
	for _, tool := range []string{"useradd", "userdel", "newuidmap", "newgidmap"} {
		_, err := exec.LookPath(tool)
		testutil.Require(t, err == nil, tool+" missing (Debian packages passwd, uidmap)")
	}
	forgeBin := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	if p := os.Getenv("FORGE_TEST_FORGE"); p != "" { // the v2 guest has no checkout
		forgeBin = p
	}
	_, err := os.Stat(forgeBin)
	testutil.Require(t, err == nil, forgeBin+" missing: run make build")
	layout := testutil.BaseImageLayout(t, testenv.BaseImage)

	var b [3]byte
	rand.Read(b[:])
	u := &user{name: "forgerl" + hex.EncodeToString(b[:])}
	dir, err := os.MkdirTemp("", "forge-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	u.home = filepath.Join(dir, "home")
	if out, err := exec.Command("useradd", "--create-home", "--home-dir", u.home, "--shell", "/bin/sh", u.name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() {
		// The user's forge processes are gone (each test waits for its own);
		// its state dir holds files of its subordinate ids: root removes them.
		// userdel removes the user's subordinate ranges too, under
		// shadow's locks (other tests add users meanwhile).
		if out, err := exec.Command("userdel", "--force", u.name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", u.name, err, out)
		}
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), "\n"+u.name+":") || strings.HasPrefix(string(b), u.name+":") {
				t.Errorf("userdel left %s in %s", u.name, f)
			}
		}
		unmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	for _, id := range []*int{&u.uid, &u.gid} {
		flag := map[*int]string{&u.uid: "-u", &u.gid: "-g"}[id]
		out, err := exec.Command("id", flag, u.name).Output()
		if err != nil {
			t.Fatal(err)
		}
		*id, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	if u.sub, err = rootless.Subordinate("/etc", u.uid); err != nil || u.sub.Size == 0 {
		t.Fatalf("useradd gave %s no subordinate range: %v", u.name, err)
	}
	bin := filepath.Join(dir, "bin")
	u.forge, u.mcp, u.layout = filepath.Join(bin, "forge"), filepath.Join(bin, "mcpserver"), filepath.Join(dir, "image")
	for _, c := range [][]string{
		{"mkdir", "-p", bin},
		{"cp", forgeBin, u.forge},
		{"cp", testenv.MCPServer(t), u.mcp},
		{"cp", "-r", layout, u.layout},
		{"chmod", "-R", "a+rX", bin, u.layout},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	return u
}

// env is the user's own environment: no XDG variables, so forge's state
// lands in ~/.local/state/forge. forge run is one-shot here (no warm
// runner outliving the command; TestRootlessWarmRunner tests that).
func (u *user) env() []string {
	return []string{"HOME=" + u.home, "USER=" + u.name, "LOGNAME=" + u.name, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "FORGE_RUN_WARM=0"}
}

func (u *user) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, u.forge, args...)
	c.Dir, c.Env = u.home, u.env()
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}}
	if u.cgroup != nil {
		c.SysProcAttr.UseCgroupFD, c.SysProcAttr.CgroupFD = true, int(u.cgroup.Fd())
	}
	return c
}

// run runs forge as the user and returns stdout; a failure is fatal.
func (u *user) run(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := u.try(args...)
	if err != nil {
		t.Fatalf("forge %s as %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), u.name, err, out, errOut)
	}
	return out
}

// try runs forge as the user: stdout, stderr and how it exited.
func (u *user) try(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout())
	defer cancel()
	c := u.cmd(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	return out.String(), errb.String(), err
}

func (u *user) importImage(t *testing.T) {
	t.Helper()
	t0 := time.Now()
	u.run(t, "image", "import", "oci:"+u.layout)
	t.Logf("image import as %s: %s", u.name, time.Since(t0).Round(time.Second))
}

// commandTimeout bounds each forge command: 3 min, or
// FORGE_TEST_ROOTLESS_TIMEOUT (the v2 guest under TCG is 15-30 x slower).
func commandTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("FORGE_TEST_ROOTLESS_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Minute
}

// invariantsPy reports what the sandbox is: its uid, whether / is
// writable, the network interfaces, seccomp and no_new_privs, the
// effective capabilities and whether a connection leaves the sandbox.
const invariantsPy = `
import json, os, socket
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
r = {"uid": os.getuid(), "seccomp": st["Seccomp"].strip(), "nnp": st["NoNewPrivs"].strip(), "capeff": st["CapEff"].strip(),
     "ifaces": sorted(os.listdir("/sys/class/net"))}
try:
    open("/forge-probe", "w"); r["root_writable"] = True
except OSError:
    r["root_writable"] = False
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2); r["net"] = True
except OSError:
    r["net"] = False
open("/workspace/w", "w").write("ok")
print(json.dumps(r))
`

func checkInvariants(t *testing.T, out string) { checkInvariantsAs(t, out, false) }

// checkInvariantsAs checks invariantsPy's report; ownUID is a sandbox of a
// user without a subordinate range, whose one mapped id is 0 inside.
func checkInvariantsAs(t *testing.T, out string, ownUID bool) {
	t.Helper()
	var r struct {
		UID          int      `json:"uid"`
		Seccomp      string   `json:"seccomp"`
		NNP          string   `json:"nnp"`
		CapEff       string   `json:"capeff"`
		Ifaces       []string `json:"ifaces"`
		RootWritable bool     `json:"root_writable"`
		Net          bool     `json:"net"`
	}
	line := strings.TrimSpace(out)
	if i := strings.LastIndex(line, "\n"); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("invariants output %q: %v", out, err)
	}
	switch {
	case r.UID == 0 && !ownUID:
		t.Errorf("code runs as uid 0 inside")
	case r.UID != 0 && ownUID:
		t.Errorf("code runs as uid %d inside, want 0 (the one id mapped)", r.UID)
	case r.Seccomp != "2":
		t.Errorf("seccomp mode %q, want 2 (filter)", r.Seccomp)
	case r.NNP != "1":
		t.Errorf("no_new_privs %q, want 1", r.NNP)
	case strings.Trim(r.CapEff, "0") != "":
		t.Errorf("effective capabilities %s, want none", r.CapEff)
	case r.RootWritable:
		t.Errorf("the root filesystem is writable")
	case r.Net || len(r.Ifaces) != 1 || r.Ifaces[0] != "lo":
		t.Errorf("network: connected %v, interfaces %v; want only lo", r.Net, r.Ifaces)
	}
}

func TestRootlessRun(t *testing.T) {
	u := newUser(t)
	u.importImage(t)
	checkInvariants(t, u.run(t, "run", invariantsPy))
	// Limits hold as rlimits: a process that wants more memory than the
	// sandbox has gets MemoryError, and a fork bomb stops at the pids limit.
	out := u.run(t, "run", "--memory", "128m", `
try:
    b = bytearray(512 << 20); print("allocated")
except MemoryError:
    print("memory-error")`)
	if !strings.Contains(out, "memory-error") {
		t.Errorf("512 MiB in a 128 MiB sandbox: %q", out)
	}
	out = u.run(t, "run", fork200Py)
	if !strings.Contains(out, "refused after") {
		t.Errorf("200 forks with execution.max_pids 128: %q", out)
	}
	// doctor exits 3: CPU, pause and the parent cgroup do not hold here.
	doctor, _, _ := u.try("doctor", "--json")
	for _, want := range []string{`"rootless: uid ` + strconv.Itoa(u.uid), "RLIMIT_NPROC", `"limit cpu (rootless)","found":false`} {
		if !strings.Contains(doctor, want) {
			t.Errorf("doctor does not say %s:\n%s", want, doctor)
		}
	}
}

func TestRootlessSessionsAndCodeMode(t *testing.T) {
	u := newUser(t)
	u.importImage(t)
	cfg := filepath.Join(u.home, "forge.yaml")
	conf := fmt.Sprintf("pool:\n  enabled: true\n  size: 1\nmcp_tools:\n  test:\n    command: %s\n", u.mcp)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	const id = "rootless"
	c, stop := u.serve(t, cfg)
	res := call(t, c, "execute_python", map[string]any{"code": "x = add(a=20, b=21)['sum']\nx", "session_id": id, "mcp_tools": []string{"add"}})
	if fmt.Sprint(res["result"]) != "41" {
		t.Fatalf("code mode in a session: %v", res)
	}
	res = call(t, c, "execute_python", map[string]any{"code": invariantsPy, "session_id": id})
	checkInvariants(t, fmt.Sprint(res["stdout"]))
	// The sandbox's processes run under the user's own subordinate ids on
	// the host: neither root nor the user itself.
	ids := sandboxUIDs(t, u)
	if len(ids) == 0 {
		t.Fatalf("no process with a host uid in %s (%s's subordinate range)", u.sub, u.name)
	}
	stop() // shutdown hibernates the session
	c, stop = u.serve(t, cfg)
	defer stop()
	list := call(t, c, "list_sessions", map[string]any{})
	if !strings.Contains(fmt.Sprint(list), "hibernated") {
		t.Errorf("after a restart the session is not hibernated: %v", list)
	}
	res = call(t, c, "execute_python", map[string]any{"code": "add(a=x, b=1)['sum'], open('/workspace/w').read()", "session_id": id, "mcp_tools": []string{"add"}})
	if fmt.Sprint(res["result"]) != "(42, 'ok')" {
		t.Errorf("restored session: %v", res)
	}
}

// serve starts forge serve over stdio as the user, as an MCP client would
// (stderr kept, not closed early); stop closes its stdin, which shuts it
// down (sessions hibernate), and waits for it to exit.
func (u *user) serve(t *testing.T, cfg string) (*client.Client, func()) {
	t.Helper()
	cmd := u.cmd(context.Background(), "--config", cfg, "serve")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := testutil.LogBuffer{Max: 1 << 20}
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := client.NewClient(transport.NewIO(stdout, stdin, io.NopCloser(strings.NewReader(""))))
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("forge serve as %s: %v; stderr:\n%s", u.name, err, stderr.String())
			}
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			t.Errorf("forge serve did not exit a minute after its stdin closed; stderr:\n%s", stderr.String())
		}
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "rootless-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		stop()
		t.Fatalf("initialize: %v; stderr:\n%s", err, stderr.String())
	}
	return c, stop
}

func call(t *testing.T, c *client.Client, name string, args map[string]any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	if json.Unmarshal(b, &m) != nil || m == nil {
		m = map[string]any{"content": res.Content}
	}
	if res.IsError {
		t.Fatalf("%s %v: %v", name, args, m)
	}
	return m
}

// sandboxUIDs are the host uids of processes inside the user's subordinate
// range (the sandboxes' users).
func sandboxUIDs(t *testing.T, u *user) []int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
				id, _ := strconv.Atoi(f[1])
				if id >= int(u.sub.Start) && id < int(u.sub.Start+u.sub.Size) {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// unmountUnder detaches any mount left below dir (none when forge exited
// cleanly: its mounts lived in its own mount namespace).
func unmountUnder(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
}

// TestRootlessWithoutSubordinateRange: a user with no range in /etc/subuid
// gets sandboxes that all map only its own uid, with every other invariant,
// and doctor says what that weakens.
func TestRootlessWithoutSubordinateRange(t *testing.T) {
	u := newUser(t)
	// usermod takes shadow's locks: other tests add users at the same time.
	r := func(file string) string {
		b, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Split(l, ":"); len(f) == 3 && f[0] == u.name {
				start, _ := strconv.Atoi(f[1])
				n, _ := strconv.Atoi(f[2])
				return fmt.Sprintf("%d-%d", start, start+n-1)
			}
		}
		t.Fatalf("%s has no range in %s", u.name, file)
		return ""
	}
	if out, err := exec.Command("usermod", "--del-subuids", r("/etc/subuid"), "--del-subgids", r("/etc/subgid"), u.name).CombinedOutput(); err != nil {
		t.Fatalf("usermod --del-subuids: %v: %s", err, out)
	}
	u.importImage(t)
	checkInvariantsAs(t, u.run(t, "run", invariantsPy), true)
	doctor, _, _ := u.try("doctor", "--json")
	if !strings.Contains(doctor, `"sandbox ids (rootless)","found":false`) || !strings.Contains(doctor, "every sandbox runs as your own uid") {
		t.Errorf("doctor does not say what a missing range weakens:\n%s", doctor)
	}
	zygoteFallback(t, u)
}

// TestRootlessRefusedWithoutUserNamespaces runs the user's forge in a child
// user namespace whose user.max_user_namespaces is 0: it must refuse with
// the reason and the setting, exit 3, and start nothing.
func TestRootlessRefusedWithoutUserNamespaces(t *testing.T) {
	u := newUser(t)
	n := uint32(max(u.uid, u.gid) + 1)
	script := fmt.Sprintf("echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --reuid %d --regid %d --clear-groups -- %s run 'print(1)'", u.uid, u.gid, u.forge)
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir, cmd.Env = u.home, u.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: int(n)}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: int(n)}},
		GidMappingsEnableSetgroups: true}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("forge run without user namespaces: %v (want exit 3): %s", err, out)
	}
	for _, want := range []string{"rootless forge needs user namespaces", "user.max_user_namespaces is 0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q: %s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(u.home, ".local", "state", "forge")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused forge made its state dir: %v", err)
	}
}

// fork200Py forks up to 200 sleeping children and prints how many it got
// when a fork is refused (execution.max_pids below 200).
const fork200Py = `
import os
n = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            import time; time.sleep(30); os._exit(0)
        n += 1
except OSError as e:
    print("refused after", n, e.errno)`
