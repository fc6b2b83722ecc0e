package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// forgeBinary is the built forge (make build), or FORGE_TEST_FORGE.
func forgeBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	if p := os.Getenv("FORGE_TEST_FORGE"); p != "" {
		bin = p
	}
	_, err := os.Stat(bin)
	testutil.Require(t, err == nil, bin+" missing: run make build")
	return bin
}

// cliRun runs `forge run CODE` as a whole process and returns its stdout.
func cliRun(t *testing.T, bin, state string, env []string, code string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, "--state-dir", state, "run", code)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("forge run %q: %v\n%s", code, err, stderr.String())
	}
	if strings.Contains(stderr.String(), "one-shot") {
		t.Fatalf("forge run %q fell back to one-shot: %s", code, stderr.String())
	}
	return string(out)
}

// runnerPID reads the runner's pid from its lock file; 0 when none is alive.
func runnerPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "lock"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	if _, err := os.Stat(filepath.Join(dir, "run.sock")); err != nil {
		return 0
	}
	return pid
}

// TestWarmRunner: the first forge run starts a warm runner of the user, in a
// 0700 directory with a 0600 socket; later runs are served by it (the same
// runner, each run a fresh sandbox), near bare python's time; a changed
// configuration gets a new runner; another local account can neither reach
// the socket nor be served through it when the modes are loosened; and the
// runner exits by itself after FORGE_RUN_WARM without a run.
func TestWarmRunner(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := forgeBinary(t)
	state := testutil.StateDir(t)
	dir := warmDir(state)
	stopWarm(dir)
	env := []string{warmEnv + "=4s"}
	if out := cliRun(t, bin, state, env, "print(1)"); out != "1\n" {
		t.Fatalf("first run: stdout %q, want 1", out)
	}
	t.Cleanup(func() { stopWarm(dir) })
	pid := runnerPID(t, dir)
	if pid == 0 {
		t.Fatalf("no warm runner in %s after the first forge run", dir)
	}
	for path, want := range map[string]os.FileMode{dir: os.ModeDir | 0o700, filepath.Join(dir, "run.sock"): os.ModeSocket | 0o600} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			t.Errorf("%s: mode %v uid %d, want %v uid %d", path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, want, os.Geteuid())
		}
	}

	// Later runs: the same runner, a fresh sandbox each (a variable of one
	// run is not in the next), a whole process near bare python.
	cliRun(t, bin, state, env, "leak = 1")
	if out := cliRun(t, bin, state, env, "print('leak' in globals())"); out != "False\n" {
		t.Errorf("a later run sees an earlier run's variable: %q", out)
	}
	var forgeLat, bareLat []time.Duration
	for range 10 {
		t0 := time.Now()
		cliRun(t, bin, state, env, "print(1)")
		forgeLat = append(forgeLat, time.Since(t0))
		t0 = time.Now()
		if err := exec.Command("/usr/bin/python3", "-c", "print(1)").Run(); err != nil {
			t.Fatal(err)
		}
		bareLat = append(bareLat, time.Since(t0))
	}
	slices.Sort(forgeLat)
	slices.Sort(bareLat)
	t.Logf("forge run p50 %v, bare python3 -c p50 %v (%.2f×)", forgeLat[5], bareLat[5], float64(forgeLat[5])/float64(bareLat[5]))
	if got := runnerPID(t, dir); got != pid {
		t.Fatalf("runner pid %d after later runs, want the first one's %d", got, pid)
	}

	// Another account: the directory is 0700, so it cannot connect; with the
	// modes loosened, the runner refuses it by its peer credentials.
	_, uid, gid := testutil.LocalAccount(t, "forgewarm")
	const probe = `import json, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(json.dumps({"connect": e.errno})); sys.exit()
s.sendall(json.dumps({"op": "run", "fingerprint": sys.argv[2], "code": "print(1)"}).encode() + b"\n")
data = b""
while True:
    b = s.recv(65536)
    if not b: break
    data += b
print(json.dumps({"reply": data.decode()}))`
	cfg, err := (&globals{stateDir: state}).loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	fp, err := fingerprint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "run.sock")
	if got := asOther(t, uid, gid, probe, sock, fp); got["connect"] != float64(syscall.EACCES) {
		t.Errorf("another account connecting to the runner: %v, want EACCES", got)
	}
	got := func() map[string]any {
		os.Chmod(dir, 0o755)
		os.Chmod(sock, 0o666)
		defer os.Chmod(dir, 0o700)
		defer os.Chmod(sock, 0o600)
		return asOther(t, uid, gid, probe, sock, fp)
	}()
	reply, _ := got["reply"].(string)
	if !strings.Contains(reply, "serves uid") || strings.Contains(reply, `"stdout"`) {
		t.Errorf("another account with the modes loosened got %v, want a refusal naming the uid", got)
	}

	// A changed configuration: the runner leaves, a new one serves.
	if out := cliRun(t, bin, state, append(env, "FORGE_EXECUTION_DEFAULT_TIMEOUT=29"), "print(2)"); out != "2\n" {
		t.Fatalf("run with a changed config: %q", out)
	}
	npid := runnerPID(t, dir)
	if npid == 0 || npid == pid {
		t.Errorf("after a config change the runner is pid %d, want a new one (was %d)", npid, pid)
	}

	// Idle: the runner exits on its own after FORGE_RUN_WARM.
	deadline := time.Now().Add(30 * time.Second)
	for runnerPID(t, dir) != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling for the exit, with a deadline
	}
	if runnerPID(t, dir) != 0 {
		t.Errorf("the warm runner is still there 30 s after its last run (FORGE_RUN_WARM=4s)")
	}
}

// asOther runs a python3 script as another account and decodes its JSON.
func asOther(t *testing.T, uid, gid int, script string, args ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	argv := append([]string{"--reuid", fmt.Sprint(uid), "--regid", fmt.Sprint(gid), "--clear-groups", "/usr/bin/python3", "-c", script}, args...)
	cmd := exec.CommandContext(ctx, "setpriv", argv...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("script as uid %d: %v\n%s", uid, err, out)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("script output %q: %v", out, err)
	}
	return res
}

// TestBenchProbes runs forge bench's probes and CLI rows with small counts,
// so they cannot rot: every forge row succeeds and says what its runs got.
func TestBenchProbes(t *testing.T) {
	testutil.RequiresRoot(t)
	var out, errb bytes.Buffer
	code := run([]string{"--state-dir", testutil.StateDir(t), "bench", "--json", "--only", "probes",
		"--probe-runs", "4", "--fork-runs", "6"}, strings.NewReader(""), &out, &errb)
	if code != 0 {
		t.Fatalf("forge bench --only probes: exit %d\n%s", code, errb.String())
	}
	var x extras
	if err := json.Unmarshal(out.Bytes(), &x); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out.String())
	}
	var gets []string
	for _, r := range x.Probes {
		gets = append(gets, r.Probe+"/"+r.Gets)
		if r.Gets != "bare python" && (r.Failures != 0 || r.WallMS <= 0 || r.PerRunMS <= 0) {
			t.Errorf("probe row %+v: want no failures and a wall time", r)
		}
		if r.Gets == "pool checkout" && r.PoolHitPct == nil {
			t.Errorf("pool row %+v has no pool hit share", r)
		}
	}
	want := []string{"forkd/bare python", "forkd/fresh sandbox", "forkd/pool checkout",
		"fork x 6/bare python", "fork x 6/fresh sandbox", "fork x 6/pool checkout"}
	if !slices.Equal(gets, want) {
		t.Errorf("probe rows %v, want %v", gets, want)
	}
}

// BenchmarkCLIRun times whole `forge run 'print(1)'` processes one after
// another (the warm runner started before the timer), and bare
// python3 -c 'print(1)' beside them: x-bare is the ratio of their medians.
func BenchmarkCLIRun(b *testing.B) {
	bin := os.Getenv("FORGE_TEST_FORGE")
	if bin == "" {
		bin = filepath.Join(testenv.RepoRoot(), "bin", "forge")
	}
	state := testutil.StateDir(b)
	defer stopWarm(warmDir(state))
	run := func(name string, args ...string) time.Duration {
		t0 := time.Now()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", name, err, out)
		}
		return time.Since(t0)
	}
	run(bin, "--state-dir", state, "run", "print(1)")
	var forge, bare []time.Duration
	b.ResetTimer()
	for b.Loop() {
		forge = append(forge, run(bin, "--state-dir", state, "run", "print(1)"))
		b.StopTimer()
		bare = append(bare, run("/usr/bin/python3", "-c", "print(1)"))
		b.StartTimer()
	}
	slices.Sort(forge)
	slices.Sort(bare)
	b.ReportMetric(float64(forge[len(forge)/2].Microseconds())/1000, "forge-p50-ms")
	b.ReportMetric(float64(bare[len(bare)/2].Microseconds())/1000, "bare-p50-ms")
	b.ReportMetric(float64(forge[len(forge)/2])/float64(bare[len(bare)/2]), "x-bare")
}
