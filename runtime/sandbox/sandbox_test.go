package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// modeEnv runs the suite against zygote mode (see TestZygoteMode).
const modeEnv = "FORGE_TEST_SANDBOX_MODE"

// setup is the runtime of the mode under test and the base image's rootfs.
func setup(t testing.TB) (*sandbox.Runtime, string) {
	t.Helper()
	if os.Getenv(modeEnv) == string(sandbox.ModeZygote) {
		return testenv.ZygoteRuntime(t)
	}
	return testenv.Runtime(t)
}

var defaultLimits = cgroups.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 64}

// start starts a sandbox of the base image, destroyed when the test ends.
func start(t testing.TB, cfg sandbox.Config) *sandbox.Sandbox {
	t.Helper()
	rt, root := setup(t)
	cfg.Rootfs = root
	sb, err := rt.Start(context.Background(), cfg)
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

// run executes code in a fresh sandbox and destroys it.
func run(t testing.TB, code string, timeout time.Duration, lim cgroups.Limits) *kernel.Result {
	t.Helper()
	rt, root := setup(t)
	ctx := context.Background()
	sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: lim})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	}()
	res, err := sb.Exec(ctx, code, sandbox.ExecOptions{Timeout: timeout})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	return res
}

func TestSemantics(t *testing.T) {
	tests := []struct {
		name  string
		code  string
		check func(*kernel.Result) error
	}{
		{"print", "print('hello')", func(r *kernel.Result) error {
			return want(r.Success && r.Stdout == "hello\n", "stdout %q success %v", r.Stdout, r.Success)
		}},
		{"expression", "1+1", func(r *kernel.Result) error {
			return want(fmt.Sprint(r.Result) == "2", "result %v", r.Result)
		}},
		{"dict is JSON", "{'a': [1, 2]}", func(r *kernel.Result) error {
			m, ok := r.Result.(map[string]any)
			return want(ok && fmt.Sprint(m["a"]) == "[1 2]", "result %#v", r.Result)
		}},
		{"object is repr", "class Foo: pass\nFoo()", func(r *kernel.Result) error {
			s, _ := r.Result.(string)
			return want(strings.Contains(s, "Foo object at"), "result %#v", r.Result)
		}},
		{"stdout and stderr apart", "import sys\nprint('out')\nprint('err', file=sys.stderr)", func(r *kernel.Result) error {
			return want(r.Stdout == "out\n" && r.Stderr == "err\n", "stdout %q stderr %q", r.Stdout, r.Stderr)
		}},
		{"child process output", "import os\nos.system('echo hi; echo oops >&2')", func(r *kernel.Result) error {
			return want(r.Stdout == "hi\n" && r.Stderr == "oops\n", "stdout %q stderr %q", r.Stdout, r.Stderr)
		}},
		{"syntax error", "x = 1\ny = = 2", func(r *kernel.Result) error {
			return want(!r.Success && r.Error != nil && r.Error.Type == "SyntaxError" && r.Error.Line == 2 && r.Error.Column > 0,
				"error %+v", r.Error)
		}},
		{"traceback line", "a = 1\nb = 0\na / b", func(r *kernel.Result) error {
			return want(r.Error != nil && r.Error.Type == "ZeroDivisionError" && strings.Contains(r.Error.Traceback, "line 3") &&
				!strings.Contains(r.Error.Traceback, "agent.py"), "error %+v", r.Error)
		}},
		{"output capped", "import sys\nsys.stdout.write('x' * (5 << 20))\nprint('after')", func(r *kernel.Result) error {
			return want(r.Truncated && len(r.Stdout) <= 1<<20+64 && len(r.Stdout) >= 1<<20-64, "truncated %v len %d", r.Truncated, len(r.Stdout))
		}},
		{"invalid utf-8", "import os\nos.write(1, b'ok \\xff\\xfe end')", func(r *kernel.Result) error {
			return want(r.Stdout == "ok \uFFFD\uFFFD end", "stdout %q", r.Stdout)
		}},
		{"uid 1000 no capabilities", "import os\nprint(os.getuid(), os.getgid())\nprint([l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapBnd', 'NoNewPrivs'))])", func(r *kernel.Result) error {
			ok := strings.HasPrefix(r.Stdout, "1000 1000\n") && strings.Contains(r.Stdout, "CapEff:\\t0000000000000000") &&
				strings.Contains(r.Stdout, "CapBnd:\\t0000000000000000") && strings.Contains(r.Stdout, "NoNewPrivs:\\t1")
			return want(ok, "stdout %q", r.Stdout)
		}},
		{"root is read-only", "open('/usr/evil', 'w')", func(r *kernel.Result) error {
			return want(r.Error != nil && strings.Contains(r.Error.Message, "Read-only file system"), "error %+v", r.Error)
		}},
		{"tmp and workspace writable", "import os\nopen('/tmp/a','w').write('x')\nopen('/workspace/b','w').write('y')\nos.getcwd()", func(r *kernel.Result) error {
			return want(r.Success && r.Result == "/workspace", "result %v error %+v", r.Result, r.Error)
		}},
		{"only loopback", "import os\nsorted(os.listdir('/sys/class/net'))", func(r *kernel.Result) error {
			return want(fmt.Sprint(r.Result) == "[lo]", "result %v error %+v", r.Result, r.Error)
		}},
		{"no network", "import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('1.1.1.1', 80))", func(r *kernel.Result) error {
			return want(r.Error != nil && strings.Contains(r.Error.Message, "unreachable"), "error %+v", r.Error)
		}},
		{"environment is fixed", "import os\nsorted(os.environ)", func(r *kernel.Result) error {
			return want(fmt.Sprint(r.Result) == "[HOME LANG MPLBACKEND PATH PYTHONDONTWRITEBYTECODE]", "env %v", r.Result)
		}},
		{"own hostname", "import socket\nsocket.gethostname()", func(r *kernel.Result) error {
			h, _ := os.Hostname()
			s, _ := r.Result.(string)
			return want(strings.HasPrefix(s, "sandbox-") && s != h, "hostname %v", r.Result)
		}},
		{"pid namespace", "import os\n[os.getpid(), len([p for p in os.listdir('/proc') if p.isdigit()])]", func(r *kernel.Result) error {
			// pid 1 is the agent's reaper, the agent itself pid 2: nothing of the host.
			v, _ := r.Result.([]any)
			return want(len(v) == 2 && num(v[1]) == 2 && num(v[0]) < 10, "pid, procs = %v", r.Result)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.code, 20*time.Second, defaultLimits)
			if err := tc.check(r); err != nil {
				t.Errorf("%v\nstderr: %s", err, r.Stderr)
			}
		})
	}
}

// num reads a JSON number of a result.
func num(v any) int64 {
	n, ok := v.(json.Number)
	if !ok {
		return -1 << 62
	}
	i, _ := n.Int64()
	return i
}

func want(ok bool, format string, a ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf("got "+format, a...)
}

// TestSyscallsBlocked tries the dangerous syscalls from inside a real sandbox.
func TestSyscallsBlocked(t *testing.T) {
	code := `
import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
def try_(name, *args):
    r = libc.syscall(*args)
    e = ctypes.get_errno()
    return [name, r, errno.errorcode.get(e, e)]
out = [
  try_("mount", 165, b"none", b"/tmp", b"tmpfs", 0, None),
  try_("unshare", 272, 0x10000000),
  try_("keyctl", 250, 0, 0, 0, 0, 0),
  try_("bpf", 321, 0, 0, 0),
  try_("ptrace", 101, 0, 0, 0, 0),
  try_("personality", 135, 0x0040000),
  try_("getpid", 39),
]
out`
	r := run(t, code, 20*time.Second, defaultLimits)
	if !r.Success {
		t.Fatalf("error %+v", r.Error)
	}
	rows, _ := r.Result.([]any)
	if len(rows) != 7 {
		t.Fatalf("result %v", r.Result)
	}
	for _, row := range rows {
		f := row.([]any)
		name, ret := f[0].(string), fmt.Sprint(f[1])
		if name == "getpid" {
			if ret == "-1" {
				t.Errorf("getpid failed: %v", f)
			}
			continue
		}
		if ret != "-1" || (f[2] != "EPERM" && f[2] != "ENOSYS" && f[2] != "EACCES") {
			t.Errorf("%s returned %v (errno %v), want -1 with EPERM", name, ret, f[2])
		}
	}
}

func TestHostMarkerUnreachable(t *testing.T) {
	_, root := setup(t)
	marker := filepath.Join(t.TempDir(), "forge-marker-secret")
	if err := os.WriteFile(marker, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf(`import os
found = []
for top in ['/', '/tmp', '/workspace', '/proc/1/root']:
    for d, _, files in os.walk(top):
        if d.startswith(('/proc', '/sys')) and top != '/proc/1/root':
            continue
        if 'forge-marker-secret' in files:
            found.append(d)
print(os.path.exists(%q), found)`, marker)
	r := run(t, code, 60*time.Second, defaultLimits)
	if r.Stdout != "False []\n" {
		t.Errorf("marker visible from inside: stdout %q error %+v (rootfs %s)", r.Stdout, r.Error, root)
	}
}

func TestTimeout(t *testing.T) {
	start := time.Now()
	r := run(t, "while True: pass", 2*time.Second, defaultLimits)
	if el := time.Since(start); el > 3*time.Second+500*time.Millisecond {
		t.Errorf("took %s, want about 2s", el)
	}
	if !r.TimedOut || r.Success || r.Error == nil || r.Error.Type != "TimeoutError" {
		t.Errorf("timed_out %v success %v error %+v", r.TimedOut, r.Success, r.Error)
	}
}

func TestOOMKilled(t *testing.T) {
	r := run(t, "x = []\nwhile True: x.append(bytearray(8 << 20))", 30*time.Second, cgroups.Limits{MemoryBytes: 128 << 20, CPUs: 1, Pids: 64})
	if !r.OOMKilled || r.Success || r.ExitCode != 137 {
		t.Errorf("oom_killed %v success %v exit %d error %+v", r.OOMKilled, r.Success, r.ExitCode, r.Error)
	}
	if r.MemoryPeakBytes < 100<<20 {
		t.Errorf("memory_peak_bytes %d, want near the 128m limit", r.MemoryPeakBytes)
	}
}

func TestForkBombContained(t *testing.T) {
	code := `import os, time
n = 0
err = None
try:
    for _ in range(10000):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    err = e.errno
[n, err]`
	start := time.Now()
	r := run(t, code, 20*time.Second, cgroups.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 32})
	res, _ := r.Result.([]any)
	if len(res) != 2 || num(res[0]) >= 32 || res[1] == nil {
		t.Errorf("forks %v, want stopped below pids.max=32 with an errno; error %+v", r.Result, r.Error)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("fork bomb run took %s", el)
	}
}

func TestMemoryPeakAndTime(t *testing.T) {
	r := run(t, "b = bytearray(50 << 20)\nlen(b)", 20*time.Second, defaultLimits)
	if r.MemoryPeakBytes < 50<<20 || r.ExecutionTimeMS <= 0 {
		t.Errorf("memory_peak_bytes %d execution_time_ms %v", r.MemoryPeakBytes, r.ExecutionTimeMS)
	}
}

func TestPauseResumeAndLimits(t *testing.T) {
	ctx := context.Background()
	sb := start(t, sandbox.Config{Limits: defaultLimits})
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := sb.SetLimits(cgroups.Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 16}); err != nil {
		t.Fatal(err)
	}
	r, err := sb.Exec(ctx, "x = bytearray(100 << 20)", sandbox.ExecOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OOMKilled {
		t.Errorf("a 100m allocation under a 64m limit set after start: oom_killed %v error %+v", r.OOMKilled, r.Error)
	}
}

// TestDestroyPaused: a paused sandbox, with a process of its own besides
// the agent, dies whole when destroyed (a frozen task takes a SIGKILL only
// once thawed), and leaves neither a process nor its cgroup.
func TestDestroyPaused(t *testing.T) {
	rt, root := setup(t)
	ctx := context.Background()
	sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: defaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sb.Exec(ctx, "import subprocess\nsubprocess.Popen(['sleep', '600']).pid", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || r.Error != nil {
		t.Fatalf("starting a background process: %v %+v", err, r)
	}
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	pid, dir := sb.Pid(), sandboxCgroupDir(sb.ID())
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the paused sandbox has no cgroup at %s: %v", dir, err)
	}
	if err := sb.Destroy(); err != nil {
		t.Fatalf("Destroy of a paused sandbox: %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !os.IsNotExist(err) {
		t.Errorf("the paused sandbox's pid 1 (%d) is left after Destroy (%v)", pid, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the paused sandbox's cgroup %s is left after Destroy (%v)", dir, err)
	}
}

// TestStopFreezing: at forge's stop signal every paused sandbox is thawed
// and later pauses leave sandboxes running, so that a kill of forge right
// after (kubectl delete --force: SIGKILL 2 s after SIGTERM) finds no
// frozen task, which on cgroup v1 cannot die and would hang forge's exit as
// a container's pid 1. The sandbox stays usable: Resume and Exec work.
func TestStopFreezing(t *testing.T) {
	rt, root := setup(t)
	ctx := context.Background()
	sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: defaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy() })
	r, err := sb.Exec(ctx, "import subprocess\nsubprocess.Popen(['sleep', '600']).pid", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || r.Error != nil {
		t.Fatalf("starting a background process: %v %+v", err, r)
	}
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	if frozen(t, sb) != true {
		t.Fatal("a paused sandbox's cgroup is not frozen: the test tests nothing")
	}
	rt.StopFreezing()
	if frozen(t, sb) {
		t.Fatal("after StopFreezing the paused sandbox's cgroup is still frozen")
	}
	if err := sb.Resume(); err != nil {
		t.Fatalf("Resume after StopFreezing: %v", err)
	}
	if err := sb.Pause(); err != nil {
		t.Fatalf("Pause after StopFreezing: %v", err)
	}
	if frozen(t, sb) {
		t.Fatal("a Pause after StopFreezing froze the sandbox")
	}
	if err := sb.Resume(); err != nil {
		t.Fatal(err)
	}
	if r, err := sb.Exec(ctx, "1 + 1", sandbox.ExecOptions{Timeout: 10 * time.Second}); err != nil || r.Error != nil || num(r.Result) != 2 {
		t.Fatalf("a call after StopFreezing: %v %+v", err, r)
	}
}

// frozen reads whether sb's cgroup is frozen (freezer.state on v1,
// cgroup.freeze on v2).
func frozen(t *testing.T, sb *sandbox.Sandbox) bool {
	t.Helper()
	if unified() {
		b, err := os.ReadFile(sandboxCgroupDir(sb.ID()) + "/cgroup.freeze")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b)) == "1"
	}
	b, err := os.ReadFile("/sys/fs/cgroup/freezer/forge/" + sb.ID() + "/freezer.state")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b)) != "THAWED"
}

func TestWorkspaceFiles(t *testing.T) {
	ctx := context.Background()
	sb := start(t, sandbox.Config{Limits: defaultLimits})
	c := sb.Client()
	if err := c.WriteFile(ctx, "data/in.csv", []byte("a,b\n1,2\n")); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	r, err := sb.Exec(ctx, "import os\nos.symlink('/etc/passwd', '/workspace/link')\nos.symlink('/etc', '/workspace/dirlink')\nopen('data/in.csv').read()", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || r.Result != "a,b\n1,2\n" {
		t.Fatalf("reading the written file inside: %v %+v", err, r)
	}
	got, err := c.ReadFile(ctx, "data/in.csv", 1<<20)
	if err != nil || string(got) != "a,b\n1,2\n" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	for _, bad := range []string{"/etc/passwd", "../etc/passwd", "data/../../etc/passwd", "link", "dirlink/passwd", ""} {
		if _, err := c.ReadFile(ctx, bad, 1<<20); !errors.Is(err, kernel.ErrRequest) {
			t.Errorf("ReadFile(%q) = %v, want a refusal", bad, err)
		}
		if err := c.WriteFile(ctx, bad, []byte("x")); !errors.Is(err, kernel.ErrRequest) {
			t.Errorf("WriteFile(%q) = %v, want a refusal", bad, err)
		}
	}
	if _, err := c.ReadFile(ctx, "data/in.csv", 3); err == nil {
		t.Error("ReadFile over max_bytes succeeded")
	}
	files, err := c.ListFiles(ctx)
	if err != nil || len(files) != 3 {
		t.Errorf("ListFiles = %+v, %v", files, err)
	}
}

func TestWorkspaceQuota(t *testing.T) {
	ctx := context.Background()
	sb := start(t, sandbox.Config{Limits: defaultLimits, WorkspaceSize: 8 << 20})
	r, err := sb.Exec(ctx, "import errno\ntry:\n    open('/workspace/big','wb').write(b'x' * (16 << 20))\nexcept OSError as e:\n    err = errno.errorcode[e.errno]\nerr", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || r.Result != "ENOSPC" {
		t.Fatalf("writing past the quota: %v result %v error %+v", err, r.Result, r.Error)
	}
	r, _ = sb.Exec(ctx, "print('still alive')", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if r.Stdout != "still alive\n" {
		t.Errorf("after ENOSPC: %+v", r)
	}
}

func TestWorkspaceInodesCapped(t *testing.T) {
	r := run(t, `import errno
n = 0
try:
    for n in range(200000):
        open(f'/workspace/f{n}', 'w').close()
except OSError as e:
    err = errno.errorcode[e.errno]
[n, err]`, 60*time.Second, defaultLimits)
	v, _ := r.Result.([]any)
	if len(v) != 2 || num(v[0]) > 70000 || v[1] != "ENOSPC" {
		t.Errorf("creating 200000 files: %v error %+v", r.Result, r.Error)
	}
}

func TestStaticReaperIsPid1(t *testing.T) {
	testutil.Require(t, kernel.Reaper() != nil, "forge built without the static reaper (make build compiles it)")
	// Pid 1 execs the reaper while the agent already serves (a zygote child
	// gets there in a few ms, before the exec may have finished): poll.
	r := run(t, `import time
for _ in range(300):
    c = open('/proc/1/cmdline').read().split('\0')[0]
    if c == '/opt/forge/agent/reaper':
        break
    time.sleep(0.01)
c`, 10*time.Second, defaultLimits)
	if r.Result != "/opt/forge/agent/reaper" {
		t.Errorf("pid 1 is %v, want the static reaper", r.Result)
	}
	// Orphans are reaped: a background child's zombie does not stay. Poll
	// (5 s at most) until the sleep is gone: a zombie the reaper left stays.
	r = run(t, `import os, time
def stats():
    out = []
    for p in os.listdir('/proc'):
        try:
            out.append(open(f'/proc/{p}/stat').read() if p.isdigit() else '')
        except FileNotFoundError:
            pass
    return [s for s in out if s]
os.system('sleep 0.1 &')
deadline = time.monotonic() + 5
while any(' (sleep) ' in s for s in stats()) and time.monotonic() < deadline:
    time.sleep(0.01)
[s.split()[2] for s in stats()]`, 10*time.Second, defaultLimits)
	if strings.Contains(fmt.Sprint(r.Result), "Z") {
		t.Errorf("process states %v: a zombie was not reaped", r.Result)
	}
}
