// Package stress is forge's stress and fault suite: many executions at
// once with nothing left behind, and the faults a long-running server meets
// (forge killed, a pooled sandbox killed, a downstream MCP server crashing,
// full disks, an image removed while in use). It runs the real engine
// (test/testenv) and, where a process is needed, the built bin/forge.
//
// make test runs the short form; make stress runs FORGE_STRESS_RUNS
// executions (10,000) in the load test.
package stress

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m, removeDedicated) }

// shortRuns is the load test's size when FORGE_STRESS_RUNS is unset: a few
// seconds here, so CI runs it on every change.
const shortRuns = 300

// stressRuns is the number of executions of the load test.
func stressRuns(t *testing.T) int {
	t.Helper()
	v := os.Getenv("FORGE_STRESS_RUNS")
	if v == "" {
		return shortRuns
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("FORGE_STRESS_RUNS=%q: want a positive number of executions", v)
	}
	return n
}

// dedicated is a state dir of this test binary alone, with the base image
// imported: for tests that mount over parts of it, remove its image or
// need every orphan in it to be theirs, which the shared one cannot give.
var dedicated struct {
	once sync.Once
	dir  string
	err  error
}

func dedicatedStateDir(t *testing.T) string {
	t.Helper()
	testutil.RequiresRoot(t)
	layout := testutil.BaseImageLayout(t, testenv.BaseImage)
	dedicated.once.Do(func() {
		base := filepath.Dir(testutil.StateDirPath())
		if dedicated.dir, dedicated.err = os.MkdirTemp(base, "forge-stress-"); dedicated.err != nil {
			return
		}
		ctx := context.Background()
		store, err := rootfs.Open(ctx, rootfs.Options{StateDir: dedicated.dir})
		if err != nil {
			dedicated.err = err
			return
		}
		defer store.Close()
		if _, err := store.Pull(ctx, "oci:"+layout); err != nil {
			dedicated.err = fmt.Errorf("importing %s: %w", testenv.BaseImage, err)
		}
	})
	if dedicated.err != nil {
		t.Fatalf("dedicated state dir: %v", dedicated.err)
	}
	return dedicated.dir
}

// removeDedicated deletes the dedicated state dir, unmounting what the
// image store left mounted in it (nothing, when all went well).
func removeDedicated() {
	if dedicated.dir == "" {
		return
	}
	for _, mp := range mountsUnder(dedicated.dir) {
		_ = unix.Unmount(mp, unix.MNT_DETACH)
	}
	os.RemoveAll(dedicated.dir)
}

// mountsUnder lists mount points below dir, deepest first.
func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append([]string{f[4]}, out...)
		}
	}
	return out
}

// engineAt starts an engine on state (the base image must be there),
// configured by mutate, logging into the returned buffer. Unless the test
// closed it itself (closeEngine), it is closed when the test ends; either
// way the test fails if the engine left anything behind.
func engineAt(t *testing.T, state string, mutate func(*profiles.Config)) (*engine.Engine, *testutil.LogBuffer) {
	t.Helper()
	cfg := profiles.Default()
	cfg.StateDir = state
	cfg.Pool.Enabled = false
	if mutate != nil {
		mutate(cfg)
	}
	logs := &testutil.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	eng, err := engine.New(context.Background(), engine.Options{Config: cfg, Logger: log})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	t.Cleanup(func() {
		if err := closeEngine(eng); err != nil {
			t.Errorf("engine.Close: %v", err)
		}
		if err := testenv.Leftovers(eng.Runtime(), state); err != nil {
			t.Errorf("after engine.Close: %v", err)
		}
	})
	return eng, logs
}

var closed sync.Map // *engine.Engine → error of its Close

// closeEngine closes eng once and returns that Close's error.
func closeEngine(eng *engine.Engine) error {
	if _, loaded := closed.Load(eng); loaded {
		return nil // reported by the first caller
	}
	err := eng.Close(5 * time.Second)
	closed.Store(eng, err)
	return err
}
