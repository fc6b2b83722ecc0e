package sandbox_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// TestZygoteWithoutHelper: the C helper (zfork.so) is the one way a
// template makes a child. In a forge built without it (plain go build) the
// template does not start: it says why and what to do, the image's
// sandboxes start as containers instead (ZygoteStats.Fallbacks), the
// warning is logged once for the image, not per sandbox, and no template
// is tried again.
func TestZygoteWithoutHelper(t *testing.T) {
	_, root := testenv.Runtime(t)
	logs := &testutil.LogBuffer{}
	opts := sandbox.Options{StateDir: testutil.StateDirPath(), Mode: sandbox.ModeZygote,
		Zygote: sandbox.ZygoteOptions{Slots: 2, Templates: 1},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	sandbox.WithoutZygoteHelper(&opts)
	rt, err := sandbox.NewRuntime(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	if _, err := os.Stat(filepath.Join(rt.AgentDir(), kernel.ZForkFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the agent directory %s has %s (%v), want none, as a forge built without it", rt.AgentDir(), kernel.ZForkFileName, err)
	}
	for i := range 3 {
		sb := startZygote(t, rt, root)
		if got := execOK(t, sb, "print(6 * 7)"); got != "42" {
			t.Fatalf("sandbox %d printed %q, want 42", i, got)
		}
		if p := ppid(t, sb.Pid()); p != os.Getpid() {
			t.Errorf("sandbox %d: its pid 1's parent is %d, want forge (%d): a container, not a template's child", i, p, os.Getpid())
		}
	}
	// A sandbox meant to fork from a binds template (a hosted tool call)
	// starts as a container too, with its binds in a bridge directory made
	// for it (Config.NewBridgeDir).
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "tools.py"), []byte("X = 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o755); err != nil {
		t.Fatal(err)
	}
	var made string
	sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits,
		Binds: []sandbox.Bind{{Source: src, Name: "tools"}}, TemplateBinds: true,
		NewBridgeDir: func() (string, error) {
			made = filepath.Join(t.TempDir(), "bridge")
			return made, os.Mkdir(made, 0o711)
		}})
	if err != nil {
		t.Fatalf("Start of a binds sandbox without the helper: %v", err)
	}
	t.Cleanup(func() { sb.Destroy() })
	if made == "" || sb.BridgeDir() != made {
		t.Errorf("bridge directory %q, want the one NewBridgeDir made (%q)", sb.BridgeDir(), made)
	}
	if got := execOK(t, sb, "print(open('/run/forge/tools/tools.py').read().strip())"); got != "X = 42" {
		t.Errorf("the bind read %q, want its file", got)
	}
	if st := rt.ZygoteStats(); st.Templates != 0 || st.Forks != 0 || st.Fallbacks != 4 || st.UnavailableImages != 1 {
		t.Errorf("stats %+v, want no template, no fork, 4 fallbacks, 1 image unavailable", st)
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, `msg="zygote mode unavailable for this image`) {
		t.Errorf("the fallback was logged %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{"forge was built without the zygote helper", "zfork.so", "build forge with `make build`",
		sandbox.ErrZygoteUnavailable.Error()} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not say %q:\n%s", want, out)
		}
	}
}
