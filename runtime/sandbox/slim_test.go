package sandbox_test

import (
	"context"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testutil"
)

// With the slim init embedded (make build), each init process gets it as a
// memfd and execs it before nsexec: the memfd is then close-on-exec, so the
// agent finds no stray descriptor. Were the constructor missing or failing,
// the memfd would reach the agent (see TestSlimInitUnusable).
func TestSlimInit(t *testing.T) {
	testutil.Require(t, sandbox.SlimInit() != nil, "the slim init (runtime/sandbox/initbin/forge-init, built by make build)")
	setup(t)
	sandbox.WaitSlimInit()
	sb := start(t, sandbox.Config{Limits: defaultLimits})
	if n := sb.Hello().StrayFDs; n != 0 {
		t.Errorf("agent found %d stray descriptors, want 0", n)
	}
	if got := agentCmdline(t, sb); got == "" {
		t.Error("sandbox from the slim init does not run code")
	}
}

// A "forge-init" memfd that is not an executable leaves forge itself as the
// init: the sandbox still starts, and the agent closes the descriptor it
// should not have got, and says so.
func TestSlimInitUnusable(t *testing.T) {
	rt, root := freshRuntime(t)
	fd, err := unix.MemfdCreate("forge-init", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "forge-init")
	defer f.Close()
	if _, err := f.WriteString("#!/nonexistent\nnot an executable\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	rt.SetInitFile(f)
	sb, err := rt.Start(context.Background(), sandbox.Config{Rootfs: root, Limits: defaultLimits})
	if err != nil {
		t.Fatalf("start with an unusable slim init: %v", err)
	}
	defer sb.Destroy()
	if n := sb.Hello().StrayFDs; n != 1 {
		t.Errorf("agent found %d stray descriptors, want the memfd", n)
	}
	if got := agentCmdline(t, sb); got == "" {
		t.Error("sandbox does not run code")
	}
}
