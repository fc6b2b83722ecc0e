// Package testenv sets up real forge parts for tests: the shared test image
// store with the bootstrapped base image, a sandbox runtime, an engine. It
// needs root; in CI a missing requirement fails instead of skipping.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testutil"
)

// BaseImage and DataImage are the bootstrapped images tests use.
const (
	BaseImage = "forge/python:3.11"
	DataImage = "forge/python-data:3.13"
	// TrixieImage is the second Python: Debian 13's (make image-trixie).
	TrixieImage = "forge/python:3.13"
)

var shared struct {
	once  sync.Once
	err   error
	store *rootfs.Store
	fs    *rootfs.RootFS
	rt    *sandbox.Runtime
	zrt   *sandbox.Runtime // zygote mode, made on first use
	zerr  error
	zonce sync.Once
	// images are mounted on first use (imageRootfs): the data image, the second Python
	images map[string]*rootfs.RootFS
}

// ImportImages makes sure the shared test store holds the base image (and
// the data image when data is true). Import of a present image is a no-op.
func ImportImages(t testing.TB, store *rootfs.Store, data bool) {
	t.Helper()
	names := []string{BaseImage}
	if data {
		names = append(names, DataImage)
	}
	for _, n := range names {
		layout := testutil.BaseImageLayout(t, n)
		if _, err := store.Pull(context.Background(), "oci:"+layout); err != nil {
			t.Fatalf("importing %s: %v", n, err)
		}
	}
}

// Runtime returns a sandbox runtime and the shared read-only rootfs of the
// base image, shared by all tests of the process. Call Close from TestMain.
func Runtime(t testing.TB) (*sandbox.Runtime, string) {
	t.Helper()
	testutil.RequiresRoot(t)
	testutil.BaseImageLayout(t, BaseImage)
	shared.once.Do(func() {
		ctx := context.Background()
		state := testutil.StateDir(t)
		if shared.store, shared.err = rootfs.Open(ctx, rootfs.Options{StateDir: state}); shared.err != nil {
			return
		}
		ImportImages(t, shared.store, false)
		if shared.fs, shared.err = shared.store.Acquire(ctx, BaseImage); shared.err != nil {
			return
		}
		shared.rt, shared.err = sandbox.NewRuntime(ctx, sandbox.Options{StateDir: state})
	})
	if shared.err != nil {
		t.Fatalf("setting up the sandbox runtime: %v", shared.err)
	}
	return shared.rt, shared.fs.Path()
}

// ModeEnv set to a sandbox mode ("zygote" or "container") makes Engine's
// engines make their sandboxes in that mode instead of the default's
// (zygote): a package's tests run again in the other mode.
const ModeEnv = "FORGE_TEST_SANDBOX_MODE"

// Mode is the sandbox mode Engine's engines run in: ModeEnv's, else the
// built-in configuration's.
func Mode() sandbox.Mode {
	if m := os.Getenv(ModeEnv); m != "" {
		return sandbox.Mode(m)
	}
	return sandbox.Mode(profiles.Default().Sandbox.Mode)
}

// RunInMode re-runs the test binary's tests matching run with ModeEnv set
// to mode and fails t unless they all pass (at least min of them).
func RunInMode(t *testing.T, mode sandbox.Mode, run string, min int) {
	t.Helper()
	if os.Getenv(ModeEnv) != "" {
		return // this is the run
	}
	cmd := exec.Command(os.Args[0], "-test.count=1", "-test.v", "-test.run="+run)
	cmd.Env = append(os.Environ(), ModeEnv+"="+string(mode))
	out, err := cmd.CombinedOutput()
	var passed []string
	for _, line := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- PASS: "); ok && !strings.Contains(name, "/") {
			passed = append(passed, strings.Fields(name)[0])
		}
	}
	if err != nil {
		t.Fatalf("the tests in %s mode: %v\n%s", mode, err, out)
	}
	if len(passed) < min {
		t.Fatalf("in %s mode only %d tests passed (%v), want at least %d\n%s", mode, len(passed), passed, min, out)
	}
	t.Logf("%s mode passed %d tests: %s", mode, len(passed), strings.Join(passed, " "))
}

// HasZygoteHelper says whether this test binary embeds the zygote's C
// helper (zfork.so, built by `make build`), without which no template
// starts and every sandbox of a zygote-mode runtime is a container.
func HasZygoteHelper() bool { return kernel.ZFork() != nil }

// zygoteHelperMissing is why a zygote test cannot test zygote mode.
const zygoteHelperMissing = "the test binary embeds no zygote helper (runtime/kernel/reaperbin/zfork.so): " +
	"build it with `make build` before go test; without it every sandbox falls back to a container"

// RequireZygoteHelper skips a test of zygote children (fails it in CI)
// when the test binary embeds no C helper.
func RequireZygoteHelper(t testing.TB) {
	t.Helper()
	testutil.Require(t, HasZygoteHelper(), zygoteHelperMissing)
}

// CheckNoZygoteFallback fails t if rt, a zygote-mode runtime, made some
// image's sandboxes containers because its template could not start: a
// zygote test must not pass through containers.
func CheckNoZygoteFallback(t testing.TB, rt *sandbox.Runtime) {
	t.Helper()
	if rt.Mode() == sandbox.ModeZygote {
		if st := rt.ZygoteStats(); st.UnavailableImages != 0 {
			t.Errorf("zygote mode: %d image(s) had no template and ran as containers (the warning in the log says why): %+v", st.UnavailableImages, st)
		}
	}
}

// ZygoteRuntime is Runtime in zygote mode (a second runtime on the same
// state dir and rootfs), so that one suite runs against both modes.
func ZygoteRuntime(t testing.TB) (*sandbox.Runtime, string) {
	t.Helper()
	RequireZygoteHelper(t)
	_, root := Runtime(t)
	shared.zonce.Do(func() {
		shared.zrt, shared.zerr = sandbox.NewRuntime(context.Background(), sandbox.Options{
			StateDir: testutil.StateDirPath(), Mode: sandbox.ModeZygote,
			Zygote: sandbox.ZygoteOptions{Warm: []string{"random", "numpy"}}})
	})
	if shared.zerr != nil {
		t.Fatalf("setting up the zygote-mode sandbox runtime: %v", shared.zerr)
	}
	t.Cleanup(func() { CheckNoZygoteFallback(t, shared.zrt) })
	return shared.zrt, root
}

// DataRootfs is the shared read-only rootfs of the data image (numpy,
// pandas), imported into the shared store when it is not there yet.
func DataRootfs(t testing.TB) string {
	t.Helper()
	return imageRootfs(t, DataImage)
}

// TrixieRootfs is the shared read-only rootfs of the second Python
// (TrixieImage, CPython 3.13), imported when it is not there yet.
func TrixieRootfs(t testing.TB) string {
	t.Helper()
	return imageRootfs(t, TrixieImage)
}

// imageRootfs mounts image once per process (Close releases it).
func imageRootfs(t testing.TB, image string) string {
	t.Helper()
	Runtime(t)
	if shared.images == nil {
		shared.images = map[string]*rootfs.RootFS{}
	}
	if shared.images[image] == nil {
		if _, err := shared.store.Pull(context.Background(), "oci:"+testutil.BaseImageLayout(t, image)); err != nil {
			t.Fatalf("importing %s: %v", image, err)
		}
		fs, err := shared.store.Acquire(context.Background(), image)
		if err != nil {
			t.Fatalf("mounting %s: %v", image, err)
		}
		shared.images[image] = fs
	}
	return shared.images[image].Path()
}

// BaseImageID is the id of the base image mounted by Runtime (which must have
// been called), for sandbox configs that name their image.
func BaseImageID() string { return shared.fs.Image().ID }

// Close releases what Runtime set up and reports anything this process left
// behind: live sandboxes, libcontainer state, cgroups.
func Close() error {
	if shared.rt == nil {
		return nil
	}
	if shared.zrt != nil {
		shared.zrt.Close() // its templates are checked below with the rest
	}
	err := Leftovers(shared.rt, testutil.StateDirPath())
	shared.rt.Close()
	shared.fs.Release()
	for _, fs := range shared.images {
		fs.Release()
	}
	shared.store.Close()
	if merr := MountsLeft(testutil.StateDirPath()); merr != nil && err == nil {
		err = merr
	}
	return err
}

// A LeakCheck lists what the forge process pid left behind that belongs to
// it alone (under the state dir, or host-wide like cgroups), one line per
// thing. Leftovers and LeftoversOf run every check in LeakChecks: a part of
// forge that gains a per-process resource (uid-range leases, say) appends a
// check for it here, and every test that checks for leaks covers it.
type LeakCheck func(state string, pid int) []string

// LeakChecks are run by Leftovers and LeftoversOf.
var LeakChecks = []LeakCheck{containerStateLeft, cgroupsLeft, processesLeft, bridgeDirsLeft, leasesLeft}

func prefixOf(pid int) string { return fmt.Sprint(pid) + "-" }

// containerStateLeft: libcontainer state dirs of pid's sandboxes.
func containerStateLeft(state string, pid int) []string {
	var left []string
	ents, _ := os.ReadDir(filepath.Join(state, "containers"))
	for _, d := range ents {
		if strings.HasPrefix(d.Name(), prefixOf(pid)) {
			left = append(left, "libcontainer state "+d.Name())
		}
	}
	return left
}

// leasesLeft: host id blocks pid still holds as live (runtime/idmap).
func leasesLeft(state string, pid int) []string {
	leases, err := idmap.Leases(state)
	if err != nil {
		return []string{"reading host id leases: " + err.Error()}
	}
	var left []string
	for _, l := range leases {
		if l.Pid == pid {
			left = append(left, "host id lease "+l.Range.String())
		}
	}
	return left
}

// bridgeDirsLeft: code-mode bridge dirs of pid's sandboxes.
func bridgeDirsLeft(state string, pid int) []string {
	var left []string
	m, _ := filepath.Glob(filepath.Join(state, "bridge", prefixOf(pid)+"*"))
	for _, p := range m {
		left = append(left, "bridge dir "+p)
	}
	return left
}

// cgroupsLeft: cgroups of pid's sandboxes, in every hierarchy.
func cgroupsLeft(_ string, pid int) []string {
	var left []string
	for _, pat := range []string{"/sys/fs/cgroup/*/forge/" + prefixOf(pid) + "*", "/sys/fs/cgroup/forge/" + prefixOf(pid) + "*"} {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			left = append(left, "cgroup "+p)
		}
	}
	return left
}

// processesLeft: processes still in one of pid's sandbox cgroups. Zombies
// do not count: the init of a sandbox whose forge process was killed is
// reparented to the host's PID 1, which reaps it in its own time.
func processesLeft(_ string, pid int) []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "/forge/"+prefixOf(pid)) || zombie(filepath.Dir(p)) {
			continue
		}
		left = append(left, "process "+filepath.Base(filepath.Dir(p)))
	}
	return left
}

func zombie(proc string) bool {
	b, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return true // gone meanwhile
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// Leftovers reports sandboxes of rt that are still live, and what the
// LeakChecks find of this process. Mounts are not checked: the image store is
// shared within a process (see MountsLeft).
func Leftovers(rt *sandbox.Runtime, state string) error {
	var problems []string
	if rt != nil {
		if n := rt.Live(); n != 0 {
			problems = append(problems, fmt.Sprintf("%d sandboxes still live", n))
		}
	}
	for _, c := range LeakChecks {
		problems = append(problems, c(state, os.Getpid())...)
	}
	return leftError(problems)
}

// LeftoversOf reports what the LeakChecks find of forge process pid, plus
// its image mounts and run dir: for a process that has ended (a killed
// forge serve, once another forge process started on the state dir) or
// closed everything.
func LeftoversOf(state string, pid int) error {
	var problems []string
	for _, c := range LeakChecks {
		problems = append(problems, c(state, pid)...)
	}
	if err := mountsOf(state, pid); err != nil {
		problems = append(problems, err.Error())
	}
	if pid != os.Getpid() {
		if _, err := os.Stat(filepath.Join(state, "run", fmt.Sprint(pid))); err == nil {
			problems = append(problems, "run dir "+filepath.Join(state, "run", fmt.Sprint(pid)))
		}
	}
	return leftError(problems)
}

func leftError(problems []string) error {
	if len(problems) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(problems, "; "))
	}
	return nil
}

// MountsLeft reports mounts of this process's image store still present.
func MountsLeft(state string) error { return mountsOf(state, os.Getpid()) }

// mountsOf reports mounts under pid's run dir of the image store (forge
// shares the host's mount namespace, so they show in ours).
func mountsOf(state string, pid int) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	mine := filepath.Join(state, "run", fmt.Sprint(pid)) + "/"
	var left []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], mine) {
			left = append(left, f[4])
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("mounts left: %v", left)
	}
	return nil
}

// Engine starts an engine on the shared test state dir with the base image
// (and the data image if data), configured by mutate. It is closed when the
// test ends, and the test fails if the engine left anything behind.
func Engine(t testing.TB, data bool, mutate func(*profiles.Config)) *engine.Engine {
	t.Helper()
	return EngineWith(t, data, mutate, engine.Options{})
}

// EngineWith is Engine with more options (an audit log, for one); opts'
// Config is made as Engine makes it.
func EngineWith(t testing.TB, data bool, mutate func(*profiles.Config), opts engine.Options) *engine.Engine {
	t.Helper()
	testutil.RequiresRoot(t)
	cfg := profiles.Default()
	cfg.StateDir = testutil.StateDir(t)
	cfg.Pool.Enabled = false
	cfg.Sandbox.Mode = string(Mode())
	if mutate != nil {
		mutate(cfg)
	}
	if cfg.Sandbox.Mode == string(sandbox.ModeZygote) && !HasZygoteHelper() {
		if testutil.InCI() {
			t.Fatalf("required in CI but unavailable: %s", zygoteHelperMissing)
		}
		t.Logf("zygote mode: %s", zygoteHelperMissing)
	}
	opts.Config = cfg
	eng, err := engine.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	ImportImages(t, eng.Store(), data)
	t.Cleanup(func() {
		if HasZygoteHelper() {
			CheckNoZygoteFallback(t, eng.Runtime())
		}
		if err := eng.Close(5 * time.Second); err != nil {
			t.Errorf("engine.Close: %v", err)
		}
		if err := Leftovers(eng.Runtime(), cfg.StateDir); err != nil {
			t.Errorf("after engine.Close: %v", err)
		}
	})
	return eng
}

var mcpServer struct {
	once sync.Once
	path string
	err  error
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// MCPServer returns the path of testdata/mcpserver (a small stdio MCP
// server with tools add, echo, fail, crash, env_probe, …). The Makefile
// builds it into bin/mcpserver before the tests and names it in
// FORGE_TEST_MCPSERVER, so the tests need no Go toolchain at run time; only
// when no built binary is there (or it is older than its source) is it
// built here, once per test binary.
func MCPServer(t testing.TB) string {
	t.Helper()
	mcpServer.once.Do(func() {
		mcpServer.path, mcpServer.err = findMCPServer()
	})
	if mcpServer.err != nil {
		t.Fatal(mcpServer.err)
	}
	return mcpServer.path
}

func findMCPServer() (string, error) {
	if p := os.Getenv("FORGE_TEST_MCPSERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("FORGE_TEST_MCPSERVER: %w (make test builds it)", err)
		}
		return p, nil
	}
	built := filepath.Join(RepoRoot(), "bin", "mcpserver")
	bst, berr := os.Stat(built)
	src, serr := os.Stat(filepath.Join(RepoRoot(), "testdata", "mcpserver", "main.go"))
	_, noGo := exec.LookPath("go")
	switch {
	case berr == nil && (serr != nil || !bst.ModTime().Before(src.ModTime())):
		return built, nil
	case berr == nil && noGo != nil:
		return built, nil // older than its source, but nothing can rebuild it
	case noGo != nil:
		return "", fmt.Errorf("no %s and no go toolchain to build testdata/mcpserver: run make bin/mcpserver, or set FORGE_TEST_MCPSERVER", built)
	}
	dir, err := os.MkdirTemp("", "forge-mcpserver-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "mcpserver")
	cmd := exec.Command("go", "build", "-o", path, "./testdata/mcpserver")
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building testdata/mcpserver: %v\n%s", err, out)
	}
	return path, nil
}

// Main is the TestMain of packages whose tests start sandboxes: the re-exec
// hooks first (the test binary is the containers' init), then the tests,
// then Close, failing the run if anything was left behind. cleanup, if not
// nil, runs before the exit.
func Main(m *testing.M, cleanup func()) {
	if hooks.Reexec() {
		return
	}
	code := m.Run()
	if err := Close(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		code = 1
	}
	if cleanup != nil {
		cleanup()
	}
	os.Exit(code)
}

// StoreGC runs the shared image store's recovery (what a crashed forge
// process left: mounts, temp blobs).
func StoreGC(t testing.TB) {
	t.Helper()
	Runtime(t)
	if _, err := shared.store.GC(context.Background()); err != nil {
		t.Errorf("store GC: %v", err)
	}
}
