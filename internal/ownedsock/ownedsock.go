// Package ownedsock makes the unix sockets forge serves to one sandbox
// (runtime/bridge's and runtime/egress's): owned by the sandbox user's host
// uid with mode 0600 from the moment they appear under their name.
package ownedsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
)

// Listen binds the socket under a temporary name, sets its owner and mode,
// then renames it into place, so the sandbox never sees a socket with the
// wrong permissions. dir is the sandbox's bridge directory, mounted read-only
// into the sandbox, which therefore cannot plant anything in it.
func Listen(dir, path string, uid, gid int) (_ *net.UnixListener, retErr error) {
	if fi, err := os.Lstat(dir); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	if len(path) >= 108 { // sizeof(sun_path)
		return nil, fmt.Errorf("socket path %s is too long for a unix socket", path)
	}
	if err := Remove(path); err != nil {
		return nil, err
	}
	tmp := path + ".new"
	if err := Remove(tmp); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	defer func() {
		if retErr != nil {
			ln.Close()
			_ = Remove(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o600); err != nil {
		return nil, err
	}
	if err := os.Lchown(tmp, uid, gid); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	return ln, nil
}

// Remove removes path if it is a socket; anything else there is an
// error rather than something to delete.
func Remove(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	return os.Remove(path)
}
