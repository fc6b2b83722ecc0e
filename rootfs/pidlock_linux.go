package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// lockPid takes the exclusive flock StateDir/run/<pid>.lock that this
// process holds for as long as its Store is open, waiting while ctx lasts
// for another holder to exit.
//
// A process's run/<pid> and tmp/<pid> dirs are named by its pid, which is
// unique on one host but not across pid namespaces sharing a state dir: in
// Kubernetes every forge is pid 1 of its container, and a pod deleted with
// --grace-period=0 --force is replaced while the old forge still runs on the
// same volume. Without this lock the new forge shared run/1 with the old
// one, whose exit removed it under the new one (sandboxes then failed with
// "mkdir .../run/1/rootfs/...: no such file or directory"). A flock, unlike
// a pid, is seen across namespaces, and the kernel drops it when its holder
// dies, however it dies.
func lockPid(ctx context.Context, stateDir string, log interface{ Info(string, ...any) }) (*os.File, error) {
	dir := filepath.Join(stateDir, "run")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, strconv.Itoa(os.Getpid())+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	waiting := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !waiting {
			waiting = true
			log.Info("another forge process with this pid (in another pid namespace) uses the state dir: waiting for it to exit", "lock", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("rootfs: %s is held by another forge process with pid %d in another pid namespace on this state dir: %w", path, os.Getpid(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
