package sandbox

import (
	"embed"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The sandbox's init process is this binary re-executed ("forge init"):
// libcontainer's nsexec joins the namespaces, then its Init sets up the
// container and execs the agent. forge links a great deal besides
// libcontainer, and Go runs every package initializer before Init, which
// cost about 5 ms (wall and CPU) of every sandbox start. So forge embeds a
// small binary with only libcontainer's init (initbin/main.go, built by
// `make build`) and hands it to each init process as a sealed memfd; the
// constructor in internal/hooks execs it before nsexec runs. Without the
// embedded binary (a plain `go build`) or where a memfd cannot be executed,
// forge itself stays the init, as libcontainer intends.

//go:embed initbin
var initFS embed.FS

// SlimInit is the embedded init binary, or nil when forge was built without it.
func SlimInit() []byte {
	b, err := initFS.ReadFile("initbin/forge-init")
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// slimInitFile puts the embedded init into a sealed, executable memfd named
// "forge-init" (the name internal/hooks looks for). The seals make it
// immutable for every process that receives it.
func slimInitFile() (*os.File, error) {
	bin := SlimInit()
	if bin == nil {
		return nil, nil
	}
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate("forge-init", flags|unix.MFD_EXEC)
	if err == unix.EINVAL { // kernels before 6.3 know no MFD_EXEC: memfds are executable
		fd, err = unix.MemfdCreate("forge-init", flags)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd for the sandbox init: %w", err)
	}
	f := os.NewFile(uintptr(fd), "forge-init")
	if _, err := f.Write(bin); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the sandbox init: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("sealing the sandbox init: %w", err)
	}
	return f, nil
}

// One memfd per process serves every runtime. Filling it (4.8 MB) takes a
// few milliseconds, so it is made in the background: sandboxes that start
// before it is ready use forge itself as their init.
var slim struct {
	once sync.Once
	done chan struct{}
	f    *os.File
	err  error
}

// prepareSlimInit starts making the memfd, once per process.
func prepareSlimInit(log *slog.Logger) {
	slim.once.Do(func() {
		slim.done = make(chan struct{})
		go func() {
			defer close(slim.done)
			slim.f, slim.err = slimInitFile()
			if slim.err != nil {
				log.Warn("sandboxes start with forge itself as their init", "err", slim.err)
			}
		}()
	})
}

// readySlimInit returns the memfd when it is ready, else nil.
func readySlimInit() *os.File {
	select {
	case <-slim.done:
		return slim.f
	default:
		return nil
	}
}

// waitSlimInit waits until the memfd is made (or failed).
func waitSlimInit() { <-slim.done }
