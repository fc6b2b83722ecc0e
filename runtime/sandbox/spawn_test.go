package sandbox_test

import (
	"bufio"
	"fmt"
	"testing"

	"github.com/mcp-forge/forge/runtime/sandbox"
)

func TestSpawn(t *testing.T) {
	sb := start(t, sandbox.Config{Limits: defaultLimits})
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
