// Package hooks holds the re-exec entry points that every forge binary, and
// every test binary that starts sandboxes or unpacks layers, must run before
// anything else: libcontainer's container init (its nsenter constructor runs
// before the Go runtime; Init runs from this package's init) and
// containers/storage's reexec handlers.
package hooks

import (
	"os"

	// Device rules of cgroup v1/v2; without it the cgroup manager refuses
	// configs that list devices.
	_ "github.com/opencontainers/cgroups/devices"
	"github.com/opencontainers/runc/libcontainer"
	// nsexec: joins the namespaces of a new container before Go starts.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	"go.podman.io/storage/pkg/reexec"
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		// The container's init: never returns.
		libcontainer.Init()
	}
}

// Reexec runs a containers/storage re-exec handler when this process was
// started as one; main (and TestMain) must return at once when it says true.
func Reexec() bool { return reexec.Init() }
