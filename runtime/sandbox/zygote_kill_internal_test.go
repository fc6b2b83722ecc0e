package sandbox

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const zkillEnv = "FORGE_TEST_ZYGOTE_KILL_UNKNOWN"

// TestZygoteKillUnknownPid: a child whose host pids are not known yet (a
// fork that failed before they were found, then destroyed) is killed
// without kill(0), which would SIGKILL the caller's whole process group:
// forge itself. Run in a process group of its own, so the old code kills
// only that run (seen in the v2 guest: the test binary was "Killed").
func TestZygoteKillUnknownPid(t *testing.T) {
	if os.Getenv(zkillEnv) != "" {
		k := &zchild{}
		k.s = &Sandbox{child: k, rt: &Runtime{}}
		_ = k.kill(unix.SIGINT)
		_ = k.kill(unix.SIGKILL)
		os.Stdout.WriteString("survived\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestZygoteKillUnknownPid$", "-test.count=1")
	cmd.Env = append(os.Environ(), zkillEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "survived") {
		t.Fatalf("killing a zygote child whose pids are not known killed its caller's process group: %v\n%s", err, out)
	}
}
