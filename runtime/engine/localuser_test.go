package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testutil"
)

// attackPy runs as another local user: it maps the subordinate range that
// useradd gave it with newuidmap/newgidmap (as podman would), becomes the
// owner of the bridge socket if that id is in its range, and tries to
// connect to the socket and to SIGKILL a sandbox process.
const attackPy = `
import ctypes, errno, json, os, pwd, signal, socket, subprocess, sys
sock_path, victim, tuid, tgid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
me = pwd.getpwuid(os.getuid()).pw_name
def sub(path):
    for line in open(path):
        f = line.strip().split(":")
        if len(f) == 3 and f[0] in (me, str(os.getuid())):
            return int(f[1]), int(f[2])
    sys.exit("no subordinate range of %s in %s" % (me, path))
us, uc = sub("/etc/subuid")
gs, gc = sub("/etc/subgid")
go_r, go_w = os.pipe()
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:
        print(json.dumps({"unshare": errno.errorcode[ctypes.get_errno()]})); os._exit(0)
    os.write(ready_w, b"x"); os.read(go_r, 1)
    inner = lambda t, s, c: t - s + 1 if s <= t < s + c else 0  # 0 is our own id
    iu, ig = inner(tuid, us, uc), inner(tgid, gs, gc)
    res = {"subuid": [us, uc], "became_owner": iu != 0}
    try:
        os.setgroups([])
    except OSError:
        pass
    os.setresgid(ig, ig, ig)
    os.setresuid(iu, iu, iu)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(sock_path)
        s.sendall(b'{"tool": "add", "arguments": {"a": 2, "b": 3}}\n')
        res["reply"] = s.recv(65536).decode(errors="replace")
        res["connect"] = "ok"
    except OSError as e:
        res["connect"] = errno.errorcode.get(e.errno, str(e))
    try:
        os.kill(victim, signal.SIGKILL)
        res["kill"] = "ok"
    except OSError as e:
        res["kill"] = errno.errorcode.get(e.errno, str(e))
    print(json.dumps(res), flush=True)
    os._exit(0)
os.read(ready_r, 1)
subprocess.run(["newuidmap", str(pid), "0", str(os.getuid()), "1", "1", str(us), str(uc)], check=True)
subprocess.run(["newgidmap", str(pid), "0", str(os.getgid()), "1", "1", str(gs), str(gc)], check=True)
os.write(go_w, b"x")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
`

// systemPython is the host's own Python, which any user can run (root's
// PATH may lead to a private install).
const systemPython = "/usr/bin/python3"

// localUser creates a user with useradd, which also gives it the next free
// subordinate uid and gid ranges (testutil.LocalAccount).
func localUser(t *testing.T) (name string, uid, gid int) {
	t.Helper()
	testutil.RequiresRoot(t)
	for _, tool := range []string{"newuidmap", "newgidmap", systemPython} {
		_, err := exec.LookPath(tool)
		testutil.Require(t, err == nil, tool+" missing (Debian packages uidmap, python3)")
	}
	return testutil.LocalAccount(t, "forgeatk")
}

// subRanges reads name:start:count lines.
func subRanges(t *testing.T, path string) map[string][2]uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][2]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(p) != 3 {
			continue
		}
		s, err1 := strconv.ParseUint(p[1], 10, 32)
		c, err2 := strconv.ParseUint(p[2], 10, 32)
		if err1 == nil && err2 == nil {
			out[p[0]] = [2]uint64{s, c}
		}
	}
	return out
}

// sandboxProcs maps each sandbox cgroup of this test process to the host
// pids in it, found the way anyone on the host can: /proc/PID/cgroup.
func sandboxProcs(t *testing.T) map[string][]int {
	t.Helper()
	mark := fmt.Sprintf("/forge/%d-", os.Getpid())
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, mark); i >= 0 && strings.Contains(line, "pids") {
				out[line[i:]] = append(out[line[i:]], pid)
			}
		}
	}
	return out
}

// statusIDs is the real uid and gid of a process.
func statusIDs(t *testing.T, pid int) (uid, gid uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		switch {
		case k == "Uid" && len(f) > 0:
			uid, _ = strconv.ParseUint(f[0], 10, 32)
		case k == "Gid" && len(f) > 0:
			gid, _ = strconv.ParseUint(f[0], 10, 32)
		}
	}
	return uid, gid
}

// bridgeSocket finds the host path of a sandbox's /run/forge/bridge.sock
// from its mountinfo, as any local user can read it.
func bridgeSocket(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == "/run/forge" {
			return filepath.Join(f[3], "bridge.sock")
		}
	}
	t.Fatalf("no /run/forge mount in pid %d's mountinfo", pid)
	return ""
}

// TestOtherLocalUser: two live sessions run under host uids of their own,
// outside every subordinate range, and a second local user who maps the
// subordinate range useradd gave it (newuidmap) can neither connect to a
// session's bridge socket nor signal its processes. Before forge leased a
// block per sandbox, every sandbox ran as host uid 101000, inside the first
// range useradd hands out (100000-165535): the user became 101000, called
// the session's tools and killed it.
func TestOtherLocalUser(t *testing.T) {
	name, uid, gid := localUser(t)
	eng := toolsEngine(t, false)
	ctx := context.Background()
	for _, id := range []string{"victim", "other"} {
		res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: `add(a=1, b=1)["sum"]`, SessionID: id, MCPTools: []string{"add"}})
		if err != nil || !res.Success {
			t.Fatalf("session %s: %v %+v", id, err, res)
		}
	}
	subuid, subgid := subRanges(t, "/etc/subuid"), subRanges(t, "/etc/subgid")
	if _, ok := subuid[name]; !ok {
		t.Fatalf("useradd gave %s no subordinate uid range: %v", name, subuid)
	}

	procs := sandboxProcs(t)
	// In zygote mode the sessions are children of a template (its cgroup's
	// name ends in sandbox.TemplateIDSuffix), which holds host ids of its own and is attacked too.
	var templates []int
	for cg, pids := range procs {
		if strings.HasSuffix(cg, sandbox.TemplateIDSuffix) {
			templates = append(templates, pids[0])
		}
	}
	if len(procs)-len(templates) != 2 {
		t.Fatalf("found the processes of %d sandboxes and %d zygote templates, want 2 sandboxes: %v", len(procs)-len(templates), len(templates), procs)
	}
	seen := map[uint64]string{}
	var victim int
	for cg, pids := range procs {
		hu, hg := statusIDs(t, pids[0])
		for _, pid := range pids {
			if u, g := statusIDs(t, pid); u != hu || g != hg {
				t.Errorf("sandbox %s: pid %d runs as %d:%d, pid %d as %d:%d", cg, pid, u, g, pids[0], hu, hg)
			}
		}
		if other, dup := seen[hu]; dup {
			t.Errorf("sandboxes %s and %s share host uid %d", cg, other, hu)
		}
		seen[hu] = cg
		for owner, r := range subuid {
			if hu >= r[0] && hu < r[0]+r[1] {
				t.Errorf("sandbox %s runs as host uid %d, inside %s's subordinate range %d-%d", cg, hu, owner, r[0], r[0]+r[1]-1)
			}
		}
		for owner, r := range subgid {
			if hg >= r[0] && hg < r[0]+r[1] {
				t.Errorf("sandbox %s runs as host gid %d, inside %s's subordinate range %d-%d", cg, hg, owner, r[0], r[0]+r[1]-1)
			}
		}
		if !strings.HasSuffix(cg, sandbox.TemplateIDSuffix) {
			victim = pids[len(pids)-1]
		}
	}

	sock := bridgeSocket(t, victim)
	var st syscall.Stat_t
	if err := syscall.Stat(sock, &st); err != nil {
		t.Fatalf("bridge socket: %v", err)
	}
	dir, err := os.MkdirTemp("", "forge-attack-") // t.TempDir's parent is private
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	script := filepath.Join(dir, "attack.py")
	if err := os.WriteFile(script, []byte(attackPy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range append([]int{victim}, templates...) {
		res := attack(ctx, t, dir, script, sock, target, uid, gid, st)
		t.Logf("attacker %s (uid %d) against socket owned by %d:%d and pid %d: %v", name, uid, st.Uid, st.Gid, target, res)
		if res["became_owner"] == true {
			t.Errorf("%s could become the socket's owner %d with its subordinate range %v", name, st.Uid, res["subuid"])
		}
		if res["connect"] == "ok" {
			t.Errorf("%s connected to the session's bridge socket and got %q", name, res["reply"])
		}
		if res["kill"] == "ok" {
			t.Errorf("%s killed sandbox process %d", name, target)
		}
	}
	// Both sessions are untouched.
	for _, id := range []string{"victim", "other"} {
		res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: `add(a=2, b=2)["sum"]`, SessionID: id, MCPTools: []string{"add"}})
		if err != nil || !res.Success || fmt.Sprint(res.Result) != "4" || len(res.Notes) > 0 {
			t.Errorf("session %s after the attack: %v %+v", id, err, res)
		}
	}
}

// attack runs attackPy as the second local user against the bridge socket
// sock and the process target, and returns what it managed.
func attack(ctx context.Context, t *testing.T, dir, script, sock string, target, uid, gid int, st syscall.Stat_t) map[string]any {
	t.Helper()
	cmd := exec.CommandContext(ctx, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--init-groups",
		systemPython, "-I", script, sock, strconv.Itoa(target), fmt.Sprint(st.Uid), fmt.Sprint(st.Gid))
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("attacker: %v: %s%s", err, out, stderr.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("attacker output %q: %v", out, err)
	}
	return res
}
