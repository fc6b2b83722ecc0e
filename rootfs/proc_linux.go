package rootfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// mountPoints must exist in every shared rootfs: libcontainer would
// otherwise try to create them on a read-only tree.
var mountPoints = []string{"proc", "dev", "sys", "tmp", "workspace", "opt/forge/agent", "run/forge", "etc"}

// processStartTime returns field 22 of /proc/PID/stat (start time in clock
// ticks since boot), which tells a live owner from a reused pid.
func processStartTime(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// comm (field 2) may contain spaces and parentheses: skip past the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return fields[19], nil // field 22 overall; fields[0] is field 3
}

// ownerID identifies this process across pid reuse: "PID STARTTIME".
func ownerID(pid int) (string, error) {
	st, err := processStartTime(pid)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(pid) + " " + st, nil
}

// ownerAlive reports whether the process recorded in an owner file
// ("PID STARTTIME") still runs.
func ownerAlive(owner string) bool {
	pidStr, start, ok := strings.Cut(strings.TrimSpace(owner), " ")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil {
		return false
	}
	st, err := processStartTime(pid)
	return err == nil && st == start
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	var mps []string
	for _, m := range infos {
		mps = append(mps, m.Mountpoint)
	}
	sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
	return mps, nil
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mps {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, &os.PathError{Op: "unmount", Path: mp, Err: err})
		}
	}
	return errors.Join(errs...)
}
