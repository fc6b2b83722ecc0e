package bridge_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/bridge"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
)

func TestMain(m *testing.M) {
	testenv.Main(m, func() {
		if testServer.dir != "" {
			os.RemoveAll(testServer.dir)
		}
	})
}

// TestSandbox is code mode end to end, minus the engine: a pre-started
// sandbox with its own bridge directory, a grant made afterwards (as for a
// warm sandbox taken from the pool), the prelude run as an ordinary exec,
// then user code that calls the tools from uid 1000 in a user namespace
// (the sandbox's own host uid) without network, across two executions.
func TestSandbox(t *testing.T) {
	rt, root := testenv.Runtime(t)
	ctx := context.Background()
	// The sandbox user must be able to traverse the directory; it is
	// mounted read-only, so it cannot write there.
	dir := filepath.Join(t.TempDir(), "bridge")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, BridgeDir: dir,
		Limits: cgroups.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 64}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	}()

	servers := testServers(t, bridge.ServerConfig{MaxCalls: 5})
	servers["memory"] = memoryServer(t)
	b, err := bridge.New(ctx, bridge.Options{Servers: servers})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	g, err := b.Grant(ctx, sb, []string{"add", "echo", "fail", "env_probe", "create_entities", "read_graph"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	exec := func(code string) string {
		t.Helper()
		res, err := sb.Exec(ctx, code, sandbox.ExecOptions{Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if !res.Success {
			t.Fatalf("code failed: %+v\nstdout: %s", res.Error, res.Stdout)
		}
		return strings.TrimSpace(res.Stdout)
	}
	exec(g.Prelude())
	out := exec(`
import os, json, socket, mcp_tools
print(os.getuid(), add(2, 3)["sum"], echo("hi"))
try:
    fail("nope")
except mcp_tools.ToolError as e:
    print("raised", e)
print("secret visible:", "FORGE_TEST_SECRET" in os.environ, "server has it:", env_probe()["set"])
s = socket.socket(socket.AF_UNIX)
s.connect("/run/forge/bridge.sock")
s.sendall(b'{"tool":"big","arguments":{"bytes":1}}\n')
print(json.loads(s.makefile().readline())["error"]["kind"])
`)
	want := "1000 5 hi\nraised nope\nsecret visible: False server has it: True\nnot_granted"
	if out != want {
		t.Errorf("first execution: got\n%s\nwant\n%s", out, want)
	}
	// The next execution of the session: the namespace keeps the functions,
	// the call count starts again.
	g.Reset()
	out = exec(`
print(sum(add(i, i)["sum"] for i in range(5)))
create_entities(entities=[{"name": n, "entityType": "city", "observations": ["pop %d" % p]}
                          for n, p in [("oslo", 700), ("bergen", 290)]])
g = read_graph()
print(sum(int(o.split()[1]) for e in g["entities"] for o in e["observations"]))
`)
	if out != "20\n990" {
		t.Errorf("second execution: got %q", out)
	}
}

// TestOutsiderRefused: a process outside the sandbox that has the socket's
// owner uid (which only root could give it) connects to a live grant; the
// peer check (SO_PEERCRED, the pid's cgroup) closes the connection without
// an answer and audits it as critical, while the sandbox's own calls go on.
func TestOutsiderRefused(t *testing.T) {
	rt, root := testenv.Runtime(t)
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fb-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, BridgeDir: dir,
		Limits: cgroups.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 64}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer sb.Destroy()
	rec := &recorder{}
	b := newBridge(t, testServers(t, bridge.ServerConfig{}), rec)
	g, err := b.Grant(ctx, sb, []string{"add"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-I", "-c", `
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
try:
    s.sendall(b'{"tool": "add", "arguments": {"a": 2, "b": 3}}\n')
    reply = s.recv(65536)
except OSError as e:
    reply = repr(e).encode()
print(os.getpid(), os.getuid(), repr(reply))
`, g.SocketPath())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(sb.HostUID()), Gid: uint32(sb.HostGID())}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("outsider: %v: %s", err, out)
	}
	f := strings.SplitN(strings.TrimSpace(string(out)), " ", 3)
	if len(f) != 3 || f[1] != fmt.Sprint(sb.HostUID()) {
		t.Fatalf("outsider printed %q", out)
	}
	if f[2] != "b''" && !strings.Contains(f[2], "Reset") && !strings.Contains(f[2], "Broken pipe") {
		t.Errorf("outsider got an answer: %s", f[2])
	}
	evs := rec.find(audit.EventSecurityViolation)
	if len(evs) != 1 {
		t.Fatalf("security violations audited: %+v, want 1", evs)
	}
	ev := evs[0]
	if ev.Severity != audit.SeverityCritical || ev.SandboxID != sb.ID() || fmt.Sprint(ev.Fields["peer_pid"]) != f[0] ||
		fmt.Sprint(ev.Fields["peer_uid"]) != f[1] || !strings.Contains(ev.Reason, "cgroup") {
		t.Errorf("audit event %+v, want critical, sandbox %s, peer pid %s uid %s, naming the cgroup", ev, sb.ID(), f[0], f[1])
	}
	if calls := rec.find(audit.EventToolCall); len(calls) != 0 {
		t.Errorf("tool calls made for the outsider: %+v", calls)
	}
	// The sandbox itself is still served.
	if res, err := sb.Exec(ctx, g.Prelude(), sandbox.ExecOptions{Timeout: 20 * time.Second}); err != nil || !res.Success {
		t.Fatalf("prelude: %v %+v", err, res)
	}
	res, err := sb.Exec(ctx, "print(add(2, 3)['sum'])", sandbox.ExecOptions{Timeout: 20 * time.Second})
	if err != nil || !res.Success || strings.TrimSpace(res.Stdout) != "5" {
		t.Errorf("the sandbox's own call: %v %+v", err, res)
	}
}
