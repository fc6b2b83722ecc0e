package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// zygoteSkip are the tests of this package that are about containers
// alone (the agent's bytecode, the slim init, libcontainer's leftovers) or
// about zygote mode already.
const zygoteSkip = "^(TestAgentBytecode|TestAgentBytecodeUnusable|TestSlimInit|TestSlimInitUnusable|" +
	"TestLeftoversFindsLeakedLease|TestCleanupAgents|TestOrphansRemoved|TestZygote.*)$"

// TestZygoteMode runs this package's whole suite again with every sandbox a
// zygote child (the tests' setup picks the runtime by modeEnv).
func TestZygoteMode(t *testing.T) {
	if os.Getenv(modeEnv) != "" {
		return // the run below
	}
	args := []string{"-test.count=1", "-test.skip=" + zygoteSkip, "-test.v"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), modeEnv+"="+string(sandbox.ModeZygote))
	out, err := cmd.CombinedOutput()
	var passed []string
	for _, line := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- PASS: "); ok && !strings.Contains(name, "/") {
			passed = append(passed, strings.Fields(name)[0])
		}
	}
	if err != nil {
		t.Fatalf("the suite in zygote mode: %v\n%s", err, out)
	}
	if len(passed) < 15 {
		t.Fatalf("the suite in zygote mode passed only %d tests: %v\n%s", len(passed), passed, out)
	}
	t.Logf("zygote mode passed %d tests: %s", len(passed), strings.Join(passed, " "))
}

// zygoteRuntime is a zygote-mode runtime on the tests' state dir, closed
// when tb ends (after the sandboxes started since, which startZygote
// destroys first).
func zygoteRuntime(tb testing.TB, z sandbox.ZygoteOptions) *sandbox.Runtime {
	tb.Helper()
	testenv.RequireZygoteHelper(tb)
	rt, err := sandbox.NewRuntime(context.Background(), sandbox.Options{StateDir: testutil.StateDirPath(), Mode: sandbox.ModeZygote, Zygote: z})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		testenv.CheckNoZygoteFallback(tb, rt)
		rt.Close()
	})
	return rt
}

func startZygote(t testing.TB, rt *sandbox.Runtime, root string) *sandbox.Sandbox {
	t.Helper()
	sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return sb
}

func execOK(t testing.TB, sb *sandbox.Sandbox, code string) string {
	t.Helper()
	res, err := sb.Exec(context.Background(), code, sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if !res.Success {
		t.Fatalf("code failed: %+v", res.Error)
	}
	return strings.TrimSpace(res.Stdout)
}

func nsOf(t testing.TB, pid int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil {
			t.Fatal(err)
		}
		out[ns] = l
	}
	return out
}

func ppid(t testing.TB, pid int) int {
	t.Helper()
	for _, line := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("no PPid for %d", pid)
	return 0
}

// TestZygoteChildIsolation: two children of one template have namespaces,
// host uids and cgroups of their own; neither sees, signals or ptraces the
// other or the template.
func TestZygoteChildIsolation(t *testing.T) {
	rt, root := testenv.ZygoteRuntime(t)
	a, b := startZygote(t, rt, root), startZygote(t, rt, root)
	tpl := ppid(t, a.Pid()) // a's pid 1 ← the template
	if ppid(t, b.Pid()) != tpl {
		t.Fatalf("a and b are not children of one template")
	}
	na, nb, nt := nsOf(t, a.Pid()), nsOf(t, b.Pid()), nsOf(t, tpl)
	for ns := range na {
		if na[ns] == nb[ns] || na[ns] == nt[ns] {
			t.Errorf("namespace %s shared: a %s, b %s, template %s", ns, na[ns], nb[ns], nt[ns])
		}
	}
	if a.HostUID() == b.HostUID() || a.IDs().Overlaps(b.IDs()) {
		t.Errorf("children share host ids: %s and %s", a.IDs(), b.IDs())
	}
	for _, sb := range []*sandbox.Sandbox{a, b} {
		if uid, _ := procIDs(t, sb.Pid()); uid != sb.HostUID() {
			t.Errorf("sandbox %s: pid 1 runs as host uid %d, want %d", sb.ID(), uid, sb.HostUID())
		}
	}
	if own, _ := a.OwnsProcess(b.Pid()); own {
		t.Errorf("a owns b's init")
	}
	if own, _ := a.OwnsProcess(tpl); own {
		t.Errorf("a owns the template")
	}
	// Inside: only its own two processes, a cgroup root of its own, a fresh /proc.
	got := execOK(t, a, `import os
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), open('/proc/self/cgroup').read().count(':/\n'))`)
	if !strings.HasPrefix(got, "[1, 2") {
		t.Errorf("processes a sees: %s, want only its own (1, 2, ...)", got)
	}
	// Neither ptrace nor process_vm_readv of the template (pid 1 of a is its own reaper).
	got = execOK(t, a, `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, 1, 0, 0)
print(r, ctypes.get_errno())
try:
    os.kill(`+strconv.Itoa(tpl)+`, 0); print("template signalable")
except ProcessLookupError:
    print("no such process")
except PermissionError:
    print("refused")`)
	if !strings.HasPrefix(got, "-1 1\n") || strings.Contains(got, "signalable") {
		t.Errorf("ptrace/kill from a child: %q, want EPERM and no template", got)
	}
	// Nothing of the template's writable places is shared: what a writes, b does not see.
	execOK(t, a, `for d in ('/dev/shm', '/tmp', '/workspace', '/dev/mqueue'):
    open(d + '/from-a', 'w').write('x')`)
	if got := execOK(t, b, `import os
print([d for d in ('/dev/shm', '/tmp', '/workspace', '/dev/mqueue') if os.path.exists(d + '/from-a')])`); got != "[]" {
		t.Errorf("b sees a's files in %s", got)
	}
	// kill(-1) reaches every process a may signal: none of b's, none of the template's.
	_, _ = a.Exec(context.Background(), "import os, signal; os.kill(-1, signal.SIGKILL)", sandbox.ExecOptions{Timeout: 5 * time.Second})
	if got := execOK(t, b, "print(6*7)"); got != "42" {
		t.Errorf("b after a's kill(-1): %q", got)
	}
	c := startZygote(t, rt, root)
	if ppid(t, c.Pid()) != tpl {
		t.Errorf("a new child after a's kill(-1) came from another template")
	}
}

// TestZygoteRNG: every generator a fork copies draws differently in two
// children: random, numpy's global state (imported by the template) and
// os.urandom.
func TestZygoteRNG(t *testing.T) {
	rt, _ := testenv.ZygoteRuntime(t)
	root := testenv.DataRootfs(t)
	draw := `import sys
warm = 'numpy' in sys.modules
import random, os, numpy
m = numpy.ones((300, 300))  # BLAS, whose threads the template stopped before forking
assert (m @ m).sum() == 300 ** 3
print(warm, random.random(), random.getrandbits(64), numpy.random.rand(), numpy.random.randint(1 << 30), os.urandom(8).hex())`
	a, b := startZygote(t, rt, root), startZygote(t, rt, root)
	da, db := strings.Fields(execOK(t, a, draw)), strings.Fields(execOK(t, b, draw))
	if da[0] != "True" {
		t.Fatalf("numpy was not imported by the template: the test proves nothing")
	}
	for i, name := range []string{"", "random.random", "random.getrandbits", "numpy.random.rand", "numpy.random.randint", "os.urandom"} {
		if i > 0 && da[i] == db[i] {
			t.Errorf("%s drew %s in both children", name, da[i])
		}
	}
}

// TestZygoteRecycle: a template is retired after its forks and a new one
// made; the retired one is gone once its last child is.
func TestZygoteRecycle(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Forks: 3, Slots: 2})
	var tpls []int
	for i := 0; i < 4; i++ {
		sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits})
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
		tpls = append(tpls, ppid(t, sb.Pid()))
		execOK(t, sb, "pass")
		if err := sb.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if tpls[0] != tpls[2] || tpls[2] == tpls[3] {
		t.Errorf("templates of the four children: %v, want the first three from one, the fourth from another", tpls)
	}
	if st := rt.ZygoteStats(); st.Templates != 2 || st.Retired != 1 || st.Forks != 4 {
		t.Errorf("stats %+v, want 2 templates, 1 retired, 4 forks", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", tpls[0])); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retired template %d still running", tpls[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestZygoteMostSlots: a template of the most slots the configuration
// takes (256) starts and forks. Its 257 host id blocks made a map of 257
// lines, over what the kernel takes in one write, so it failed with EINVAL
// until adjacent blocks were merged.
func TestZygoteMostSlots(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: 256, Templates: 1})
	sb := startZygote(t, rt, root)
	execOK(t, sb, "pass")
}

// TestZygoteFewerSlotsWhenShort: a host id range too short for a whole
// template still gets one, with the slots its free blocks hold, rather than
// failing the start ("all blocks in use"). Its own state dir, so that its
// six-block range is its geometry alone.
func TestZygoteFewerSlotsWhenShort(t *testing.T) {
	testenv.RequireZygoteHelper(t)
	_, root := testenv.Runtime(t)
	dir, err := os.MkdirTemp(testutil.StateDirPath(), "short-ids-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const block = 65536
	rt, err := sandbox.NewRuntime(context.Background(), sandbox.Options{StateDir: dir, Mode: sandbox.ModeZygote,
		Zygote:  sandbox.ZygoteOptions{Slots: 8, Templates: 1},
		IDRange: idmap.Range{Start: 0x7ff00000, Size: 6 * block}, IDBlockSize: block})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	var kids []*sandbox.Sandbox
	t.Cleanup(func() {
		for _, sb := range kids {
			sb.Destroy()
		}
	})
	for i := range 5 {
		sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits})
		if err != nil {
			t.Fatalf("child %d of a template of 5 slots (6 blocks, 8 slots asked): %v", i, err)
		}
		kids = append(kids, sb)
	}
	execOK(t, kids[4], "pass")
	if st := rt.ZygoteStats(); st.Templates != 1 || st.Forks != 5 {
		t.Errorf("stats %+v, want five children forked from one template", st)
	}
	if _, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits}); !errors.Is(err, idmap.ErrExhausted) {
		t.Errorf("a sixth child with every block held: %v, want %v", err, idmap.ErrExhausted)
	}
}

// zygoteChildrenEnv sets how many children TestZygoteManyChildren makes
// (test/stress's long form: 10000).
const zygoteChildrenEnv = "FORGE_TEST_ZYGOTE_CHILDREN"

// TestZygoteManyChildren makes many children at concurrency 8, each running
// code, and checks that nothing is left: cgroups, host id leases,
// processes, live sandboxes.
func TestZygoteManyChildren(t *testing.T) {
	_, root := testenv.Runtime(t)
	n := 200
	if testing.Short() {
		n = 40
	}
	if v := os.Getenv(zygoteChildrenEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("%s=%q: %v", zygoteChildrenEnv, v, err)
		}
	}
	before, tplsBefore := liveLeases(t), templateCgroups()
	rt, err := sandbox.NewRuntime(context.Background(), sandbox.Options{StateDir: testutil.StateDirPath(),
		Mode: sandbox.ModeZygote, Zygote: sandbox.ZygoteOptions{Forks: 500, Slots: 8}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		ids   []string
		errs  []error
		work  = make(chan int)
		wg    sync.WaitGroup
		start = time.Now()
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits})
				if err == nil {
					var res string
					r, xerr := sb.Exec(context.Background(), fmt.Sprintf("print(%d)", i), sandbox.ExecOptions{Timeout: 30 * time.Second})
					if xerr == nil {
						res = strings.TrimSpace(r.Stdout)
					}
					if res != strconv.Itoa(i) {
						err = fmt.Errorf("child %d printed %q (%v)", i, res, xerr)
					}
					if _, serr := os.Stat(sandboxCgroupDir(sb.ID())); serr != nil && err == nil {
						err = fmt.Errorf("child %d has no cgroup where the leak check looks: %w", i, serr) // the check below would prove nothing
					}
					mu.Lock()
					ids = append(ids, sb.ID())
					mu.Unlock()
					if derr := sb.Destroy(); err == nil {
						err = derr
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d children at concurrency 8 in %s; stats %+v", n, time.Since(start), rt.ZygoteStats())
	if len(errs) > 0 {
		t.Fatalf("%d of %d children failed, first: %v", len(errs), n, errs[0])
	}
	if live := rt.Live(); live != 0 {
		t.Errorf("%d sandboxes live after all were destroyed", live)
	}
	if err := rt.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, id := range ids {
		if _, err := os.Stat(sandboxCgroupDir(id)); err == nil {
			t.Errorf("cgroup of child %s left", id)
		}
	}
	if after := liveLeases(t); len(after) > len(before) {
		t.Errorf("host id leases of this process: %d before, %d after: %v", len(before), len(after), after)
	}
	if tpls := templateCgroups(); len(tpls) > len(tplsBefore) {
		t.Errorf("template cgroups: %v before, %v after", tplsBefore, tpls)
	}
}

func liveLeases(t testing.TB) []string {
	t.Helper()
	leases, err := idmap.Leases(testutil.StateDirPath())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range leases {
		if l.Live && l.Pid == os.Getpid() {
			out = append(out, l.Range.String())
		}
	}
	return out
}

func templateCgroups() []string {
	m, _ := filepath.Glob(sandboxCgroupDir(fmt.Sprintf("%d-*-z", os.Getpid())))
	return m
}

// TestZygoteTemplateKilled: a template killed from outside takes its
// children with it (they report it) and the next sandbox comes from a new one.
func TestZygoteTemplateKilled(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: 2})
	a := startZygote(t, rt, root)
	tpl := ppid(t, a.Pid())
	if err := syscall.Kill(tpl, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Alive() {
		if time.Now().After(deadline) {
			t.Fatal("the child lives on after its template was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a.DeathReason() == "" {
		t.Errorf("no death reason for a child whose template was killed")
	}
	b := startZygote(t, rt, root)
	if got := execOK(t, b, "print(6*7)"); got != "42" {
		t.Errorf("b: %q", got)
	}
	if ppid(t, b.Pid()) == tpl {
		t.Errorf("b came from the killed template")
	}
}

// TestZygoteRetireByAge: a template past its age is retired and destroyed
// on its timer, with no fork to notice it.
func TestZygoteRetireByAge(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{MaxAge: 2 * time.Second, Slots: 2})
	sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	tpl := ppid(t, sb.Pid())
	execOK(t, sb, "pass")
	if err := sb.Destroy(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", tpl))
		st := rt.ZygoteStats()
		if os.IsNotExist(err) && st.Retired == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("template %d of age > 2s: stats %+v, process exists: %v; want it retired and gone", tpl, st, err == nil)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := rt.ZygoteStats(); st.Templates != 1 || st.Forks != 1 {
		t.Errorf("stats %+v, want 1 template and 1 fork", st)
	}
}

// TestZygoteTemplates: starts that find the image's template busy forking
// start a second one, and children then come from both; never a third.
// The second starts in the background with the rootfs pinned (Config.Pin),
// and lets go of it once started.
func TestZygoteTemplates(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: 8})
	var pins, unpins atomic.Int32
	pin := func() func() {
		pins.Add(1)
		return func() { unpins.Add(1) }
	}
	twoTemplates(t, rt, sandbox.Config{Rootfs: root, Limits: defaultLimits, Pin: pin})
	if st := rt.ZygoteStats(); st.Templates != 2 || st.Retired != 0 {
		t.Errorf("stats %+v, want 2 templates, none retired", st)
	}
	for deadline := time.Now().Add(5 * time.Second); unpins.Load() != pins.Load() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if p, u := pins.Load(), unpins.Load(); p != 1 || u != 1 {
		t.Errorf("the rootfs was pinned %d times and unpinned %d times, want once each (for the background start)", p, u)
	}
}

// TestZygoteTemplatesGone: when every template of the image is gone at
// once and the next start comes before their exits are seen (here: each
// stopped, its control socket closed), the start retires each and forks
// from a new one. (A pool's sandboxes killed from outside, under load.)
func TestZygoteTemplatesGone(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: 8})
	cfg := sandbox.Config{Rootfs: root, Limits: defaultLimits}
	pids := twoTemplates(t, rt, cfg)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer syscall.Kill(pid, syscall.SIGKILL)
	}
	rt.CloseTemplateSockets()
	sb, err := rt.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a start right after both templates were gone: %v (stats %+v)", err, rt.ZygoteStats())
	}
	defer sb.Destroy()
	if p := ppid(t, sb.Pid()); slices.Contains(pids, p) {
		t.Errorf("the child's parent %d is a template that was gone", p)
	}
	execOK(t, sb, "print(1)")
}

// twoTemplates starts sandboxes of cfg at concurrency 4 until children came
// from two templates, and returns the templates' host pids.
func twoTemplates(t *testing.T, rt *sandbox.Runtime, cfg sandbox.Config) []int {
	t.Helper()
	var mu sync.Mutex
	parents := map[int]bool{}
	for deadline := time.Now().Add(60 * time.Second); ; {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := rt.Start(context.Background(), cfg)
				if err != nil {
					t.Error(err)
					return
				}
				defer sb.Destroy()
				p := ppid(t, sb.Pid())
				mu.Lock()
				parents[p] = true
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		mu.Lock()
		n := len(parents)
		mu.Unlock()
		if n >= 2 {
			return slices.Collect(maps.Keys(parents))
		}
		if time.Now().After(deadline) {
			t.Fatalf("children of %d template(s) after 60 s of starts at concurrency 4 (stats %+v), want 2", n, rt.ZygoteStats())
		}
	}
}

// childState is what a zygote child's setup left, read from inside: its
// pid 1 and the agent's credentials and seccomp, the mounts, the masked
// and read-only /proc, the limits, hostname, loopback, cgroup namespace,
// working directory, descriptors and environment.
const childState = `import os, resource, socket, fcntl, struct
def status(pid):
    keep = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "NSpid")
    return {k: v.split() for k, _, v in (l.partition(":") for l in open("/proc/%s/status" % pid)) if k in keep}
out = {"pid1": status(1), "agent": status("self"), "pid1_exe": os.readlink("/proc/1/exe")}
mounts = {}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    sep = f.index("-")
    mounts[f[4]] = (f[5].split(",")[0], f[sep + 1], ",".join(o for o in f[sep + 3].split(",") if not o.startswith(("inode64", "uid=", "gid="))))
out["mounts"] = sorted((k, v) for k, v in mounts.items() if k.startswith(("/proc", "/tmp", "/workspace", "/dev/shm", "/dev/mqueue", "/dev/pts", "/run")))
out["root"] = mounts["/"][0]
try:
    open("/proc/sys/kernel/hostname", "w").write("x"); out["proc_sys"] = "writable"
except OSError as e:
    out["proc_sys"] = e.errno
out["rlimits"] = [resource.getrlimit(getattr(resource, r)) for r in ("RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_DATA")]
out["user"] = sorted((n, open("/proc/sys/user/" + n).read().strip()) for n in os.listdir("/proc/sys/user"))
out["hostname"] = socket.gethostname()[:8]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
out["lo"] = struct.unpack("16sh22x", fcntl.ioctl(s, 0x8913, struct.pack("16sh22x", b"lo", 0)))[1]
s.close()
out["cgroup"] = open("/proc/self/cgroup").read().count(":/\n")
out["cgroup_ns_root"] = all(l.endswith(":/") for l in open("/proc/self/cgroup").read().splitlines())
out["cwd"] = os.getcwd()
out["env"] = sorted(os.environ.items())
out["fds"] = sorted(int(f) for f in os.listdir("/proc/self/fd"))
out["umask"] = os.umask(0o22)
import threading, signal, time
r = []
t = threading.Thread(target=lambda: r.append(signal.pthread_kill(threading.main_thread().ident, 0)))
t.start(); t.join()
out["pthread_kill_main"] = r
out["main_cpu_clock"] = time.clock_gettime(time.pthread_getcpuclockid(threading.main_thread().ident)) > 0
import ctypes
head, size = ctypes.c_void_p(), ctypes.c_size_t()
nr = {"x86_64": 274, "aarch64": 100}[os.uname().machine]  # get_robust_list
rc = ctypes.CDLL(None, use_errno=True).syscall(nr, 0, ctypes.byref(head), ctypes.byref(size))
out["robust_list"] = (rc, bool(head.value), size.value)
libc = ctypes.CDLL(None, use_errno=True)
try:  # glibc's rseq area (2.35+): registering it again fails with EBUSY where it is registered
    off, rsize = ctypes.c_long.in_dll(libc, "__rseq_offset").value, ctypes.c_uint.in_dll(libc, "__rseq_size").value
except ValueError:
    off = rsize = 0
if rsize:
    libc.pthread_self.restype = ctypes.c_void_p
    m = os.uname().machine
    rc = libc.syscall({"x86_64": 334, "aarch64": 293}[m], ctypes.c_void_p(libc.pthread_self() + off), 32, 0,
                      {"x86_64": 0x53053053, "aarch64": 0xd428bc00}[m])
    out["rseq"] = (rc, ctypes.get_errno())
print(repr(out))`

// TestZygoteHelper: every child is made by the template's C helper
// (zfork.c, the one way a child is made), and its setup, read from inside,
// is the sandbox's: credentials and no capabilities in pid 1 (the static
// reaper) and the agent, no_new_privs, seccomp, a read-only root, /tmp and
// /workspace size-capped, nosuid and nodev, the masked and read-only
// /proc, rlimits and user.* limits, its own hostname, loopback up, its own
// cgroup namespace, only the agent's descriptors, and a tid, robust list
// and rseq area of the agent's own (pthread_kill, the CPU clock of its
// main thread). The second child, which the template's request loop in C
// forked from a fast request (ZygoteStats.FastForks) and had cloned ahead
// (a spare, SpareForks), is set up the same. A request of another shape
// drops the spare: the next spare, and its child, are of that shape.
func TestZygoteHelper(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: 4, Templates: 1})
	sb := startZygote(t, rt, root)
	first := execOK(t, sb, childState)
	if st := rt.ZygoteStats(); st.Templates != 1 || st.Forks != 1 || st.FastForks != 0 || st.Fallbacks != 0 {
		t.Errorf("stats %+v, want one template, one fork, no fast fork, no fallback", st)
	}
	for _, want := range []string{"'CapBnd': ['0000000000000000']", "'CapEff': ['0000000000000000']", "'CapPrm': ['0000000000000000']",
		"'CapAmb': ['0000000000000000']", "'NoNewPrivs': ['1']", "'Seccomp': ['2']", "'Uid': ['1000', '1000', '1000', '1000']",
		"'Gid': ['1000', '1000', '1000', '1000']", "'Groups': []", "'pid1_exe': '/opt/forge/agent/reaper'",
		"'proc_sys': 30", "'cwd': '/workspace'", "('/proc/keys', ('rw'", "('/proc/acpi', ('ro', 'tmpfs'",
		"('/tmp', ('rw', 'tmpfs', 'rw,size=65536k,nr_inodes=65536,mode=755')", "('/workspace', ('rw', 'tmpfs'",
		"('/proc', ('rw', 'proc'", "'root': 'ro'",
		"'rlimits': [(1024, 1024), (0, 0)", "('/proc/sys', ('ro'", "'lo': 73", "'max_user_namespaces', '0'",
		"'hostname': 'sandbox-'", "'cgroup_ns_root': True", "'NSpid': ['1']", "'NSpid': ['2']",
		"'pthread_kill_main': [None]", "'main_cpu_clock': True", "'robust_list': (0, True, 24)", "'rseq': (-1, 16)"} {
		if !strings.Contains(first, want) {
			t.Errorf("a child of the C helper: no %s in %s", want, first)
		}
	}
	sb2 := startZygote(t, rt, root)
	second := execOK(t, sb2, childState)
	if h, id := execOK(t, sb2, "import socket; print(socket.gethostname())"), sb2.ID(); h != "sandbox-"+id[len(id)-6:] {
		t.Errorf("the second child's hostname is %q, want its own (sandbox %s)", h, id)
	}
	if st := rt.ZygoteStats(); st.Forks != 2 || st.FastForks != 1 || st.SpareForks != 1 {
		t.Errorf("a second child of the same request shape: stats %+v, want a fast fork, from a spare", st)
	}
	if second != first {
		t.Errorf("the second child (a spare's) differs from the first:\nfirst:  %s\nsecond: %s", first, second)
	}
	// Another shape (a larger /tmp), twice: Python forks the first, a spare of the new shape the second.
	for i := range 2 {
		sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits, TmpSize: 96 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Destroy() })
		if got := execOK(t, sb, "import os; s = os.statvfs('/tmp'); print(s.f_blocks * s.f_frsize)"); got != "100663296" {
			t.Errorf("child %d of a new shape: /tmp is %s bytes, want 100663296", i+1, got)
		}
	}
	if st := rt.ZygoteStats(); st.Forks != 4 || st.FastForks != 2 || st.SpareForks != 2 {
		t.Errorf("two children of a new shape: stats %+v, want 2 fast forks, each from a spare", st)
	}
}

// TestZygoteWriteSet: a template's first child gives it its write set (the
// pages its agent wrote on its way to hello, ZygoteStats.WriteSets), and a
// spare cloned after that writes those pages ahead, so that its agent
// reaches hello with under half the page faults of the first child's.
func TestZygoteWriteSet(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: 4, Templates: 1})
	faults := func(sb *sandbox.Sandbox) int { // the agent's minor faults (/proc/<pid>/stat, field 10)
		t.Helper()
		kids := strings.Fields(readFile(fmt.Sprintf("/proc/%d/task/%d/children", sb.Pid(), sb.Pid())))
		if len(kids) != 1 {
			t.Fatalf("sandbox %s: pid 1 has children %v, want the agent alone", sb.ID(), kids)
		}
		stat := readFile("/proc/" + kids[0] + "/stat")
		f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
		n, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("agent %s: stat %q", kids[0], stat)
		}
		return n
	}
	sb := startZygote(t, rt, root)
	first := faults(sb)
	if st := rt.ZygoteStats(); st.WriteSets != 1 || st.WriteSetPages < 50 {
		t.Fatalf("after the first child: stats %+v, want one write set of 50 pages or more", st)
	}
	tpl, children := ppid(t, sb.Pid()), map[int]bool{sb.Pid(): true}
	var got []int
	for range 3 { // the first spare may have been cloned before the write set came
		// A template clones its spare once idle for 1 ms; the spare writes
		// the write set ahead, then waits for its request in recvmsg.
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("template %d's spare waiting for its request", tpl), func() bool {
			return spareWaiting(tpl, children)
		})
		child := startZygote(t, rt, root)
		children[child.Pid()] = true
		got = append(got, faults(child))
	}
	if st := rt.ZygoteStats(); st.SpareForks != 3 {
		t.Fatalf("stats %+v, want 3 children from spares", st)
	}
	if last := got[len(got)-1]; last*2 > first {
		t.Errorf("an agent of a spare made after the write set faulted %d times on its way to hello (all: %v), the first child's %d: want under half", last, got, first)
	}
	t.Logf("faults to hello: first child %d, the next three %v; %+v", first, got, rt.ZygoteStats())
}

// spareWaiting reports whether template tpl has a child that is none of
// the sandboxes in children (its spare) and that waits in recvmsg for the
// request it will serve, done with what it does ahead (zfork.c's
// spare_start).
func spareWaiting(tpl int, children map[int]bool) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", tpl))
	for _, f := range tasks {
		for _, kid := range strings.Fields(readFile(f)) {
			pid, err := strconv.Atoi(kid)
			if err != nil || children[pid] {
				continue
			}
			sc := strings.Fields(readFile(fmt.Sprintf("/proc/%d/syscall", pid)))
			if len(sc) > 0 && sc[0] == strconv.Itoa(syscall.SYS_RECVMSG) {
				return true
			}
		}
	}
	return false
}

// memStat reads the keys of a v1 memory.stat (or v2 memory.stat) file.
func memStat(dir string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(readFile(dir+"/memory.stat"), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			out[f[0]], _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return out
}

// memCurrent is a memory cgroup's charge: memory.usage_in_bytes on v1,
// memory.current on v2.
func memCurrent(dir string) int64 {
	f := "/memory.usage_in_bytes"
	if unified() {
		f = "/memory.current"
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(readFile(dir+f)), 10, 64)
	return n
}

// TestZygoteTemplateSurvivesManyLiveChildren: each live child of a
// template is charged in the template's own memory cgroup (its clone's
// kernel objects, the pages its spare wrote ahead, before the host moves it
// into its own cgroup), so a template limited to a sandbox's small memory
// was OOM-killed once enough children lived, and every one of them died
// with it. The template's limit is the sandboxes' plus
// ZygoteChildCharge per slot: with 64m sandboxes and 60 live children, the
// template lives and every child answers. It logs the charge per child.
func TestZygoteTemplateSurvivesManyLiveChildren(t *testing.T) {
	if unified() {
		t.Log("cgroup v2: the charges are the same; measured here on v1")
	}
	_, root := testenv.Runtime(t)
	const n = 60
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: n + 2, Templates: 1})
	lim := cgroups.Limits{MemoryBytes: 64 << 20, CPUs: 1, Pids: 64}
	var kids []*sandbox.Sandbox
	defer func() {
		for _, sb := range kids {
			sb.Destroy()
		}
	}()
	var tplMem string
	var base int64
	tpl := 0
	for i := range n {
		sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: lim})
		if err != nil {
			t.Fatalf("child %d: %v (stats %+v)", i, err, rt.ZygoteStats())
		}
		kids = append(kids, sb)
		if i == 0 {
			tpl = ppid(t, sb.Pid())
			tplMem = hostCgroup(t, tpl, "memory")
			base = memCurrent(tplMem)
		}
	}
	if st := rt.ZygoteStats(); !processAlive(tpl) || st.Templates != 1 {
		t.Fatalf("the template died while %d children were started (OOM kills in its cgroup: %s; stats %+v; first child: %q)",
			n, oomKills(tplMem), st, kids[0].DeathReason())
	}
	used, st := memCurrent(tplMem), memStat(tplMem)
	per := (used - base) / (n - 1)
	t.Logf("template cgroup with %d live children: %d KiB (%d KiB with one), %d KiB per child; stat: rss %d KiB, cache %d KiB, kernel %d KiB; limit %s",
		n, used>>10, base>>10, per>>10, st["rss"]>>10, st["cache"]>>10, (used-st["rss"]-st["cache"])>>10,
		strings.TrimSpace(readFile(tplMem+"/memory.limit_in_bytes")))
	if per > sandbox.ZygoteChildCharge {
		t.Errorf("each live child is charged %d KiB in its template's cgroup, over ZygoteChildCharge (%d KiB): the limit is too small",
			per>>10, sandbox.ZygoteChildCharge>>10)
	}
	for i, sb := range kids {
		res, err := sb.Exec(context.Background(), "print(7*6)", sandbox.ExecOptions{Timeout: 10 * time.Second})
		if err != nil || !res.Success || strings.TrimSpace(res.Stdout) != "42" {
			var why any = err
			if res != nil {
				why = res.Error
			}
			t.Fatalf("child %d of %d after all started: %v (template alive: %v, its OOM kills: %s)", i, n, why,
				processAlive(tpl), oomKills(tplMem))
		}
	}
	if got := oomKills(tplMem); got != "0" {
		t.Errorf("the template's cgroup counted %s OOM kills, want 0", got)
	}
}

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// oomKills is a memory cgroup's OOM kill count.
func oomKills(dir string) string {
	file := "/memory.oom_control"
	if unified() {
		file = "/memory.events"
	}
	for _, line := range strings.Split(readFile(dir+file), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return v
		}
	}
	return "?"
}

// TestZygoteTemplateDiedReported: when a template dies with children
// alive (killed here; an OOM kill in its cgroup is the same), a child's
// next call says that its template died and why, not that a signal came
// from outside; so does DeathReason, a session's lost_reason.
func TestZygoteTemplateDiedReported(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: 4})
	a := startZygote(t, rt, root)
	execOK(t, a, "x = 1")
	tpl := ppid(t, a.Pid())
	if err := syscall.Kill(tpl, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); a.Alive(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child lives on after its template was killed")
		}
	}
	res, err := a.Exec(context.Background(), "print(x)", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if res.Error == nil || res.Error.Type != sandbox.ErrTypeTemplateDied ||
		!strings.Contains(res.Error.Message, "zygote template died") || !strings.Contains(res.Error.Message, "SIGKILL") {
		t.Errorf("the next call's error: %+v, want type %s saying its zygote template died of SIGKILL", res.Error, sandbox.ErrTypeTemplateDied)
	}
	if why := a.DeathReason(); !strings.Contains(why, "zygote template died") {
		t.Errorf("DeathReason %q, want it to say the zygote template died", why)
	}
}

// scanMemory is Python that reads the agent's writable memory (every rw
// mapping of /proc/self/maps, with ctypes: the sandbox's /proc/self/mem is
// root's) and prints, as JSON, the sandbox hostnames other than its own
// and the sandbox ids (forge's pid, "-", 12 hex digits) found there. The
// code itself holds neither pattern's match: they are built from pieces.
func scanMemory(forgePid int) string {
	return fmt.Sprintf(`
import ctypes, json, re, socket
host = re.compile(b"sand" + b"box" + b"-([0-9a-f]{6})(?![0-9a-f])")
ident = re.compile(b"(?<![0-9])" + b"%d" + b"-[0-9a-f]{12}(?![0-9a-f])")
own = socket.gethostname().encode()
hosts, ids, scanned = set(), set(), 0
with open("/proc/self/maps") as f:
    maps = [l.split() for l in f]
for m in maps:
    if not m[1].startswith("rw"):
        continue
    lo, hi = (int(x, 16) for x in m[0].split("-"))
    data = ctypes.string_at(lo, hi - lo)
    scanned += len(data)
    hosts.update(x.group(0) for x in host.finditer(data) if x.group(0) != own)
    ids.update(x.group(0) for x in ident.finditer(data))
    del data
assert scanned > 1 << 20, scanned
print(json.dumps({"hosts": sorted(h.decode() for h in hosts), "ids": sorted(i.decode() for i in ids)}))
`, forgePid)
}

// TestZygoteSiblingMemoryScrubbed: a child is a copy of its template's
// memory, which served every earlier child's fork request. No child finds
// another sandbox's hostname in its own memory (the template wipes each
// request's hostname and raw message, in Python and in zfork.c, once the
// child is forked), nor any sandbox id, which names forge's host pid (the
// template is sent a request number instead). Requests of two shapes
// alternate, so that Python (a request of a new shape) and the request
// loop in C (fast forks, spares) each serve several.
func TestZygoteSiblingMemoryScrubbed(t *testing.T) {
	_, root := testenv.Runtime(t)
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Slots: 8, Templates: 1})
	var kids []*sandbox.Sandbox
	for i := range 6 {
		cfg := sandbox.Config{Rootfs: root, Limits: defaultLimits}
		if i/2%2 == 1 {
			cfg.TmpSize = 96 << 20 // another shape: served by Python, then fast
		}
		sb, err := rt.Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Cleanup(func() { _ = sb.Destroy() })
		kids = append(kids, sb)
	}
	if st := rt.ZygoteStats(); st.Forks != 6 || st.FastForks < 2 || st.FastForks > 4 {
		t.Errorf("stats %+v, want 6 forks, of them 2-4 fast (Python served each change of shape)", st)
	}
	tpl := ppid(t, kids[0].Pid())
	for i, sb := range kids {
		if p := ppid(t, sb.Pid()); p != tpl {
			t.Fatalf("child %d has parent %d, want the one template %d", i, p, tpl)
		}
		got := execOK(t, sb, scanMemory(os.Getpid()))
		if got != `{"hosts": [], "ids": []}` {
			t.Errorf("child %d (of %d, stats %+v) finds in its own memory %s: other sandboxes' hostnames, or sandbox ids with forge's pid %d",
				i, len(kids), rt.ZygoteStats(), got, os.Getpid())
		}
	}
}

// TestZygoteImmortalHeap: a template whose Python has immortal objects
// (3.12 and later) makes its heap immortal before it forks, so that its
// children write no reference count of what they share with it; one of
// 3.11 leaves it as it is. The children work as ever: they collect, reload
// a module the template imported, and let objects of their own die.
func TestZygoteImmortalHeap(t *testing.T) {
	rt, base := testenv.ZygoteRuntime(t)
	trixie := testenv.TrixieRootfs(t)
	const probe = `import sys, gc, random, importlib, json
shared = sys.getrefcount(random), sys.getrefcount(random.random), sys.getrefcount(json)
class Mine:
    died = False
    def __del__(self):
        Mine.died = True
m = Mine(); m.me = m; del m
gc.collect()
importlib.reload(random)
print(sys.version_info[1], *shared, Mine.died, sys.getrefcount(Mine) < 100)`
	for _, c := range []struct {
		root     string
		minor    string
		immortal bool
	}{{trixie, "13", true}, {base, "11", false}} {
		out := strings.Fields(execOK(t, startZygote(t, rt, c.root), probe))
		if len(out) != 6 || out[0] != c.minor {
			t.Fatalf("Python 3.%s child printed %q", c.minor, out)
		}
		for i, name := range []string{"random", "random.random", "json"} {
			n, err := strconv.ParseUint(out[1+i], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got := n == 1<<32-1; got != c.immortal {
				t.Errorf("Python 3.%s: %s's reference count in a child is %d: immortal %v, want %v", c.minor, name, n, got, c.immortal)
			}
		}
		if out[4] != "True" || out[5] != "True" {
			t.Errorf("Python 3.%s: a child's own cycle was not collected (%s) or its class is not counted (%s)", c.minor, out[4], out[5])
		}
	}
}

// TestZygoteExercise: a template that imported pandas ran its exercise
// (zygote.py's EXERCISES) before forking, so a child finds pandas'
// DataFrame.describe already specialized by the adaptive interpreter
// (instructions dis does not know by name) before it ever calls it.
func TestZygoteExercise(t *testing.T) {
	rt := zygoteRuntime(t, sandbox.ZygoteOptions{Warm: []string{"numpy", "pandas"}})
	sb := startZygote(t, rt, testenv.DataRootfs(t))
	out := strings.Fields(execOK(t, sb, `import sys, dis
warm = 'pandas' in sys.modules
import pandas
print(warm, sum(1 for i in dis.get_instructions(pandas.DataFrame.describe, adaptive=True) if i.opname not in dis.opmap))`))
	if len(out) != 2 || out[0] != "True" {
		t.Fatalf("child printed %q: pandas was not imported by the template, the test proves nothing", out)
	}
	if n, _ := strconv.Atoi(out[1]); n == 0 {
		t.Errorf("DataFrame.describe has no specialized instruction in a fresh child: the template did not exercise pandas")
	}
}
