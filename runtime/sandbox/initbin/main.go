//go:build forgeinit

// Command forge-init is the sandbox's init before it becomes the agent: only
// libcontainer's nsexec and Init, without the rest of forge. forge's own
// binary would otherwise run as that init, and start its Go runtime and the
// package initializers of everything it links (about 5 ms and as much CPU at
// every sandbox start) before libcontainer's Init gets to run.
//
// `make build` compiles it (-tags 'seccomp forgeinit') into
// runtime/sandbox/initbin/forge-init, which forge embeds; the runtime hands it
// to each sandbox's init process as a sealed memfd, and internal/hooks' slim
// constructor execs it before nsexec starts. See runtime/sandbox/slim_linux.go.
package main

import (
	"fmt"
	"os"

	// Its init runs libcontainer.Init when called as "forge-init init".
	_ "github.com/mcp-forge/forge/internal/hooks"
)

func main() {
	fmt.Fprintln(os.Stderr, "forge-init: runs only as a sandbox's init, started by forge")
	os.Exit(2)
}
