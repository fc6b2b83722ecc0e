package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/bridge"
	"github.com/mcp-forge/forge/test/testutil"
)

var testServer struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// mcpServer builds testdata/mcpserver once per test binary.
func mcpServer(t testing.TB) string {
	t.Helper()
	testServer.once.Do(func() {
		if testServer.dir, testServer.err = os.MkdirTemp("", "forge-mcpserver-"); testServer.err != nil {
			return
		}
		testServer.path = filepath.Join(testServer.dir, "mcpserver")
		cmd := exec.Command("go", "build", "-o", testServer.path, "./testdata/mcpserver")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			testServer.err = &buildError{err, string(out)}
		}
	})
	if testServer.err != nil {
		t.Fatalf("building testdata/mcpserver: %v", testServer.err)
	}
	return testServer.path
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var npmOnce sync.Once

// memoryServer returns the config of @modelcontextprotocol/server-memory,
// installed from the pinned lockfile with npm ci when it is missing.
func memoryServer(t testing.TB) bridge.ServerConfig {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "testdata", "npm-memory")
	entry := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-memory", "dist", "index.js")
	_, nodeErr := exec.LookPath("node")
	testutil.Require(t, nodeErr == nil, "test needs node (Node.js 18+)")
	npmOnce.Do(func() {
		if _, err := os.Stat(entry); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--prefix", dir, "--ignore-scripts", "--no-audit", "--no-fund")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("npm ci: %v\n%s", err, out)
		}
	})
	_, err := os.Stat(entry)
	testutil.Require(t, err == nil, "server-memory not installed (npm ci --prefix testdata/npm-memory failed)")
	return bridge.ServerConfig{
		Command: "node",
		Args:    []string{entry},
		Env:     map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "memory.jsonl")},
	}
}

// hostSandbox stands in for a sandbox in the host-side tests of the
// protocol: its "processes" are those in the test's own cgroup running as
// the test's user (the Python children the tests start), checked with the
// same /proc read a real sandbox does.
type hostSandbox struct{ id, dir string }

func (h hostSandbox) ID() string        { return h.id }
func (h hostSandbox) BridgeDir() string { return h.dir }
func (h hostSandbox) HostUID() int      { return os.Getuid() }
func (h hostSandbox) HostGID() int      { return os.Getgid() }

func (h hostSandbox) OwnsProcess(pid int) (bool, error) {
	mine, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return false, err
	}
	theirs, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return err == nil && bytes.Equal(mine, theirs), err
}

// recorder is an Auditor that keeps the events.
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *recorder) Log(ev audit.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) find(event string) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, ev := range r.events {
		if ev.Event == event {
			out = append(out, ev)
		}
	}
	return out
}

// newBridge starts a bridge over servers; Close runs at cleanup.
func newBridge(t testing.TB, servers map[string]bridge.ServerConfig, aud bridge.Auditor) *bridge.Bridge {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bridge.New(ctx, bridge.Options{Servers: servers, Audit: aud})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// grant grants names on a socket in a fresh directory; Close at cleanup.
func grant(t testing.TB, b *bridge.Bridge, names ...string) *bridge.Grant {
	t.Helper()
	dir, err := os.MkdirTemp("", "fb-") // short: sun_path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	g, err := b.Grant(context.Background(), hostSandbox{"sb-test", dir}, names)
	if err != nil {
		t.Fatalf("Grant(%v): %v", names, err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Grant.Close: %v", err)
		}
	})
	return g
}

// python runs the grant's prelude, then code, in a host python3 -I, the way
// the engine runs them in a sandbox: same namespace, prelude first.
func python(t testing.TB, g *bridge.Grant, code string) string {
	t.Helper()
	prelude, err := g.PreludeAt(g.SocketPath())
	if err != nil {
		t.Fatalf("PreludeAt: %v", err)
	}
	return runPython(t, prelude, code)
}

func runPython(t testing.TB, prelude, code string) string {
	t.Helper()
	_, err := exec.LookPath("python3")
	testutil.Require(t, err == nil, "test needs python3")
	dir := t.TempDir()
	for name, src := range map[string]string{"prelude.py": prelude, "code.py": code} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "main.py")
	script := "import sys\nd = sys.argv[1]\n" +
		"exec(compile(open(d + '/prelude.py').read(), '<prelude>', 'exec'))\n" +
		"exec(compile(open(d + '/code.py').read(), '<code>', 'exec'))\n"
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "-I", file, dir)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}
