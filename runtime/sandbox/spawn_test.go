package sandbox_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/mcp-forge/forge/runtime/sandbox"
)

func TestSpawn(t *testing.T) {
	sb := start(t, sandbox.Config{Limits: defaultLimits})
	if os.Getenv(modeEnv) == string(sandbox.ModeZygote) {
		// A child runs its agent only: Spawn refuses, never crashes.
		if _, err := sb.Spawn([]string{"true"}, nil); !errors.Is(err, sandbox.ErrInvalidConfig) {
			t.Fatalf("Spawn in a zygote child: %v, want ErrInvalidConfig", err)
		}
		return
	}
	p, err := sb.Spawn([]string{"python3", "-c", "import os, sys\nfor line in sys.stdin:\n    print(line.strip().upper(), os.getuid(), flush=True)"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(p.Stdin, "hello")
	line, err := bufio.NewReader(p.Stdout).ReadString('\n')
	if err != nil || line != "HELLO 1000\n" {
		t.Fatalf("got %q, %v", line, err)
	}
	p.Stdin.Close()
	<-p.Done()
}
