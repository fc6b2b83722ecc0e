package cgroups

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups/fscommon"
	"golang.org/x/sys/unix"
)

// The cgroup file I/O on the path of every sandbox's start and end: by the
// file's plain path, with raw system calls. libcontainer's cgroups.OpenFile
// resolves each file with openat2(RESOLVE_BENEATH) from the cgroupfs root,
// which walks every component of the path in reference mode, and an
// os.File of a cgroup file is registered with the poller (cgroup files
// poll): per zygote child, 15 % of forge's CPU went to the path walks.

// WriteFile writes data to dir's cgroup file.
func WriteFile(dir, file, data string) error {
	path := filepath.Join(dir, file)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", data, path, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(data)); err != nil {
		return fmt.Errorf("writing %q to %s: %w", data, path, err)
	}
	return nil
}

// AddProcess moves pid into dir's cgroup. As libcontainer does, a write
// refused with EINVAL (the task is still being made) is tried again, up to
// 5 times, 30 ms apart.
func AddProcess(dir string, pid int) error {
	var err error
	for range 5 {
		if err = WriteFile(dir, "cgroup.procs", strconv.Itoa(pid)); !errors.Is(err, unix.EINVAL) {
			break
		}
		time.Sleep(30 * time.Millisecond)
	}
	return err
}

// readFile reads dir's cgroup file (they are small: at most 4 KiB is read).
func readFile(dir, file string) (string, error) {
	path := filepath.Join(dir, file)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	defer unix.Close(fd)
	var buf [4096]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return string(buf[:n]), nil
}

// readUint reads a file of one number, "max" being the largest (as
// fscommon.GetCgroupParamUint).
func readUint(dir, file string) (uint64, error) {
	s, err := readFile(dir, file)
	if err != nil {
		return 0, err
	}
	if s = strings.TrimSpace(s); s == "max" {
		return math.MaxUint64, nil
	}
	v, err := fscommon.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", filepath.Join(dir, file), err)
	}
	return v, nil
}

// readKey reads the number of key in a file of "key value" lines, 0 when
// the key is not there (as fscommon.GetValueByKey).
func readKey(dir, file, key string) (uint64, error) {
	s, err := readFile(dir, file)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := fscommon.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("reading %s of %s: %w", key, filepath.Join(dir, file), err)
			}
			return n, nil
		}
	}
	return 0, nil
}
