// Command forge is an MCP server that runs untrusted Python in sandboxes
// built directly on libcontainer. See README.md.
package main

import (
	"fmt"
	"os"

	// Answers a stdio client's initialize while the rest initializes.
	_ "github.com/mcp-forge/forge/cmd/forge/internal/early/configured"

	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/internal/startgc"
)

func main() {
	// The collector was off while packages initialized; serve turns it back
	// on after its first reply (or startgc's bound), everything else now.
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		startgc.Restore()
	}
	// Re-exec hooks first: libcontainer's init ran from hooks' init already
	// when this process is a container's init; storage re-execs here.
	if hooks.Reexec() {
		return
	}
	// The warm runner re-executes this binary; inside the rootless
	// namespace /proc/self/exe no longer names it, so remember it here.
	rememberExecutable()
	// An ordinary user's run served by a warm runner needs no namespace.
	if code, ok := fastRun(os.Args[1:]); ok {
		os.Exit(code)
	}
	// An ordinary user's forge runs as root of a user namespace of its
	// own; Enter re-executes it there and does not return.
	if err := rootless.Enter(); err != nil {
		fmt.Fprintln(os.Stderr, "forge:", err)
		os.Exit(exitInfra)
	}
	os.Exit(Main(os.Args[1:]))
}
