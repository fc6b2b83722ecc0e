package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/testenv"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

func TestZygoteSmoke(t *testing.T) {
	rt, root := testenv.ZygoteRuntime(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		sb, err := rt.Start(ctx, sandbox.Config{Rootfs: root, Limits: defaultLimits})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Logf("start %v", time.Since(t0))
		res, err := sb.Exec(ctx, "import os; print(os.getpid(), os.getuid(), open('/proc/self/cgroup').read(), os.listdir('/proc')[:50])", sandbox.ExecOptions{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		t.Logf("%+v", res)
		if err := sb.Destroy(); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
	}
}
