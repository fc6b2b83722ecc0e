package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
)

// The helper process of TestOrphansRemoved: starts a sandbox, reports its
// id, and waits to be killed with -9.
func init() {
	if os.Getenv("FORGE_TEST_ORPHAN_HELPER") != "1" {
		return
	}
	t := &testing.T{}
	rt, root := testenv.Runtime(t)
	sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("ID", sb.ID())
	time.Sleep(time.Minute)
	os.Exit(0)
}

func TestOrphansRemoved(t *testing.T) {
	rt, _ := setup(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FORGE_TEST_ORPHAN_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	line := strings.TrimSpace(string(buf[:n]))
	if !strings.HasPrefix(line, "ID ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q", line)
	}
	id := strings.TrimPrefix(line, "ID ")
	cmd.Process.Kill() // kill -9: the sandbox, its cgroup and state stay behind
	cmd.Wait()
	state := filepath.Join(os.Getenv("FORGE_TEST_STATE_DIR"), "containers", id)
	if os.Getenv("FORGE_TEST_STATE_DIR") == "" {
		state = filepath.Join("/var/lib/forge-test/containers", id)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("expected the orphan's state at %s: %v", state, err)
	}
	rep, err := rt.Cleanup(context.Background())
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if !contains(rep.Sandboxes, id) {
		t.Errorf("Cleanup removed %v, want %s among them", rep.Sandboxes, id)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("orphan state still there: %v", err)
	}
	// The helper's shared image mount is the store's to recover.
	testenv.StoreGC(t)
	helperRun := filepath.Join(filepath.Dir(filepath.Dir(state)), "run", fmt.Sprint(cmd.Process.Pid)) + "/"
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), helperRun) {
		t.Errorf("mounts of the killed forge process left under %s", helperRun)
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/forge/" + id)
	if len(cgs) > 0 {
		t.Errorf("orphan cgroups left: %v", cgs)
	}
	if pids, _ := exec.Command("pgrep", "-f", "/opt/forge/agent/agent.py").Output(); len(pids) > 0 {
		// Other tests' sandboxes may be live; make sure none is the orphan's.
		for _, p := range strings.Fields(string(pids)) {
			cg, _ := os.ReadFile("/proc/" + p + "/cgroup")
			if strings.Contains(string(cg), id) {
				t.Errorf("orphan process %s still running", p)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
