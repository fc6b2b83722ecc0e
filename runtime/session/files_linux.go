package session

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// copyOut copies a frozen sandbox's directory tree (seen through
// /proc/PID/root) to dst on the host. Nothing is followed: symlinks are
// copied as links, other special files are skipped. The sandbox must be
// paused so nothing inside can swap a path while it is read; limit caps
// the bytes copied (a file that would pass it is refused before any of it
// is copied).
func copyOut(src, dst string, limit int64) error {
	var total int64
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch t := d.Type(); {
		case t.IsDir():
			return os.MkdirAll(target, 0o700)
		case t&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case t.IsRegular():
			n, err := copyFile(p, target, 0o600, -1, limit-total)
			total += n
			if errors.Is(err, ErrTooLarge) {
				return fmt.Errorf("%w: the files add up to more than %d bytes (volumes.session_quota)", ErrTooLarge, limit)
			}
			return err
		}
		return nil
	})
}

// copyIn copies a saved tree into a frozen sandbox's fresh, empty
// directory dst (a path through /proc/PID/root). Entries are created with
// the sandbox user's host uid as filesystem uid: a file system mounted in
// the sandbox's user namespace cannot hold files of unmapped owners, and
// nothing made here is root's.
func copyIn(src, dst string, uid int) error {
	root, err := os.OpenFile(dst, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer root.Close()
	dirfd := int(root.Fd())
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		switch t := d.Type(); {
		case t.IsDir():
			return asUser(uid, func() error { return unix.Mkdirat(dirfd, rel, 0o755) })
		case t&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return asUser(uid, func() error { return unix.Symlinkat(link, dirfd, rel) })
		case t.IsRegular():
			return copyInFile(p, dirfd, rel, uid)
		}
		return nil
	})
}

// copyInFile creates rel under dirfd as uid and fills it from src.
func copyInFile(src string, dirfd int, rel string, uid int) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	var fd int
	err = asUser(uid, func() error {
		var err error
		fd, err = unix.Openat(dirfd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		return err
	})
	if err != nil {
		return fmt.Errorf("creating %q: %w", rel, err)
	}
	out := os.NewFile(uintptr(fd), rel)
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// asUser runs f on a locked OS thread whose filesystem uid and gid are uid.
// If the thread cannot be switched back to root it is not unlocked, so Go
// retires it instead of reusing it.
func asUser(uid int, f func() error) error {
	runtime.LockOSThread()
	unix.Setfsgid(uid)
	unix.Setfsuid(uid)
	err := f()
	unix.Setfsuid(0)
	unix.Setfsgid(0)
	if prev, _ := unix.SetfsuidRetUid(-1); prev == 0 {
		runtime.UnlockOSThread()
	}
	return err
}

// openRegular opens a file of the sandbox for reading: never through a
// symlink (O_NOFOLLOW), never blocking (O_NONBLOCK: a FIFO opens at once and
// a read of it returns nothing), and only if the opened fd is a regular file
// of at most limit bytes (limit < 0: any size). Anything else is a
// *FileError of ErrNotRegular or ErrTooLarge.
func openRegular(path string, limit int64) (*os.File, int64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, 0, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		f.Close()
		return nil, 0, &FileError{Path: path, Kind: fileKind(st.Mode), Err: ErrNotRegular}
	case limit >= 0 && st.Size > limit:
		f.Close()
		return nil, 0, &FileError{Path: path, Size: st.Size, Limit: limit, Err: ErrTooLarge}
	}
	return f, st.Size, nil
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	}
	return "not a regular file"
}

// copyFile copies one regular file of a sandbox (openRegular) to a new
// file dst; limit < 0 means unlimited. It never copies more than limit
// bytes, even of a file that grows while it is read.
func copyFile(src, dst string, mode os.FileMode, uid int, limit int64) (int64, error) {
	in, _, err := openRegular(src, limit)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode)
	if err != nil {
		return 0, err
	}
	var r io.Reader = in
	if limit >= 0 {
		r = io.LimitReader(in, limit+1)
	}
	n, err := io.Copy(out, r)
	if err == nil && limit >= 0 && n > limit {
		err = &FileError{Path: src, Size: n, Limit: limit, Err: ErrTooLarge}
	}
	if uid >= 0 && err == nil {
		err = out.Chown(uid, uid)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return n, err
}
