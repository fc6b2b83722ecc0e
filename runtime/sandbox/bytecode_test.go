package sandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

func fakeImageID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// agentCmdline is the agent's command line as the sandbox sees it.
func agentCmdline(t *testing.T, sb *sandbox.Sandbox) string {
	t.Helper()
	r, err := sb.Exec(context.Background(), "' '.join(open('/proc/self/cmdline').read().split('\\0')).strip()",
		sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || r.Error != nil {
		t.Fatalf("exec: %v %+v", err, r)
	}
	s, _ := r.Result.(string)
	return s
}

// A sandbox of a known image runs the agent from bytecode the image's Python
// compiled once, and behaves exactly as from source.
func TestAgentBytecode(t *testing.T) {
	rt, root := setup(t)
	id := fakeImageID(t)
	pyc := filepath.Join(rt.AgentDir(), "agent-"+id+".pyc")
	t.Cleanup(func() { os.Remove(pyc) })

	sb := start(t, sandbox.Config{Rootfs: root, Limits: defaultLimits, ImageID: id})
	if got, want := agentCmdline(t, sb), "python3 -I -B /opt/forge/agent/agent-"+id+".pyc"; got != want {
		t.Errorf("agent command line %q, want %q", got, want)
	}
	st, err := os.Stat(pyc)
	if err != nil {
		t.Fatalf("no bytecode installed: %v", err)
	}
	if st.Mode().Perm() != 0o444 {
		t.Errorf("bytecode mode %v, want 0444", st.Mode().Perm())
	}
	b, _ := os.ReadFile(pyc)
	if len(b) < 16 || !bytes.Equal(b[2:4], []byte("\r\n")) {
		t.Errorf("installed file is not a .pyc: %q", b[:min(len(b), 16)])
	}
	ctx := context.Background()
	r, err := sb.Exec(ctx, "import sys\nx = 1\nsorted(m for m in ('json', 're', 'enum', 'ast', 'linecache') if m in sys.modules)", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || r.Error != nil {
		t.Fatalf("exec: %v %+v", err, r)
	}
	if mods, _ := r.Result.([]any); len(mods) != 0 {
		t.Errorf("the agent imported %v at start", mods)
	}
	r, err = sb.Exec(ctx, "def f():\n    return 1 / 0\nf()", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || r.Error == nil || r.Error.Type != "ZeroDivisionError" ||
		!strings.Contains(r.Error.Traceback, "return 1 / 0") || strings.Contains(r.Error.Traceback, "agent") {
		t.Errorf("traceback from the bytecode agent: %v %+v", err, r.Error)
	}

	// Without an image id the agent runs from source, as before.
	plain := start(t, sandbox.Config{Rootfs: root, Limits: defaultLimits})
	if got, want := agentCmdline(t, plain), "python3 -I -B "+kernel.AgentPath; got != want {
		t.Errorf("agent command line %q, want %q", got, want)
	}
}

// Bytecode the image's Python refuses is removed and the sandbox starts from
// source instead: a bad .pyc costs one failed start, never a failed request.
func TestAgentBytecodeUnusable(t *testing.T) {
	rt, root := freshRuntime(t)
	id := fakeImageID(t)
	pyc := filepath.Join(rt.AgentDir(), "agent-"+id+".pyc")
	if err := os.WriteFile(pyc, []byte("\x00\x00\r\nnot bytecode at all"), 0o444); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(pyc) })
	for i := 0; i < 2; i++ {
		sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits, ImageID: id})
		if err != nil {
			t.Fatalf("start %d with unusable bytecode: %v", i, err)
		}
		got := agentCmdline(t, sb)
		if err := sb.Destroy(); err != nil {
			t.Fatal(err)
		}
		if want := "python3 -I -B " + kernel.AgentPath; got != want {
			t.Errorf("start %d: agent command line %q, want %q", i, got, want)
		}
		if _, err := os.Stat(pyc); !os.IsNotExist(err) {
			t.Errorf("start %d: unusable bytecode still installed (%v)", i, err)
		}
	}
}

// freshRuntime is a runtime of its own on a state dir of its own, for tests
// that change what the runtime remembers or remove its agent directory and
// bytecode: in the shared state dir those are shared by every test process
// of the same build, whose sandboxes would fail to start meanwhile.
func freshRuntime(t *testing.T) (*sandbox.Runtime, string) {
	t.Helper()
	_, root := setup(t)
	rt, err := sandbox.NewRuntime(context.Background(), sandbox.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt, root
}
