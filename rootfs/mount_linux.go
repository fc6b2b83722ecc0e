package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.podman.io/storage"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/proc"
)

// RootFS is a shared, read-only root file system of an image. All holders
// of one image in a process share one overlay mount; it is unmounted when
// the last one releases it.
type RootFS struct {
	store *Store
	mount *sharedMount
	once  sync.Once
}

// Path is the mount point: the root a sandbox bind-mounts read-only. It
// already contains every mount point a sandbox uses (/proc, /dev, /sys,
// /tmp, /workspace, /opt/forge/agent, /run/forge, /etc).
func (r *RootFS) Path() string { return r.mount.path }

// Image describes the image the root file system shows.
func (r *RootFS) Image() Image { return r.mount.image }

// Release drops this holder; the last one unmounts. Calling it twice is a
// no-op.
func (r *RootFS) Release() error {
	var err error
	r.once.Do(func() { err = r.store.release(r.mount) })
	return err
}

// Retain is another holder of the same mount, for a use that may outlast
// this one; it is released on its own. It is nil once this holder's mount
// is gone (released by every holder, or the store closed).
func (r *RootFS) Retain() *RootFS {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.mounts[r.mount.image.ID] != r.mount {
		return nil
	}
	r.mount.refs++
	return &RootFS{store: s, mount: r.mount}
}

// sharedMount is one overlay mount: lowerdir=skeleton:image.
type sharedMount struct {
	image Image
	path  string // run/<pid>/rootfs/<id>
	refs  int
}

// Acquire returns the shared read-only root file system of image name,
// mounting it if this process has not yet. Release it when done.
func (s *Store) Acquire(ctx context.Context, name string) (*RootFS, error) {
	img, err := s.Lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("rootfs: store is closed")
	}
	m := s.mounts[img.ID]
	if m == nil {
		if m, err = s.mountLocked(ctx, *img); err != nil {
			return nil, err
		}
		s.mounts[img.ID] = m
	}
	m.refs++
	return &RootFS{store: s, mount: m}, nil
}

// mountLocked mounts the image through the store and stacks the read-only
// overlay on it. Order matters for crash recovery (GC): the mount point
// exists before anything is mounted, and the images/<id> marker (one store
// mount count to give back) is written only after MountImage succeeded.
// s.mu must be held.
func (s *Store) mountLocked(ctx context.Context, img Image) (m *sharedMount, retErr error) {
	if s.traverseErr != nil {
		return nil, s.traverseErr
	}
	start := time.Now()
	path := filepath.Join(s.runDir, "rootfs", img.ID)
	marker := filepath.Join(s.runDir, "images", img.ID)
	err := s.withStateLock(ctx, func() error {
		// Under the lock, so Remove in another process cannot delete the
		// image between its check and our mount.
		if _, err := s.store.Image(img.ID); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrImageNotFound, img.ID, err)
		}
		if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		lower, err := s.store.MountImage(img.ID, nil, "")
		if err != nil {
			os.Remove(path)
			return fmt.Errorf("mounting image %s: %w", img.ID, err)
		}
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			s.store.UnmountImage(img.ID, false)
			os.Remove(path)
			return err
		}
		if err := mountOverlay(path, s.skelDir, lower); err != nil {
			s.store.UnmountImage(img.ID, false)
			os.Remove(marker)
			os.Remove(path)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Debug("shared rootfs mounted", "image", img.ID, "path", path, "elapsed", time.Since(start))
	return &sharedMount{image: img, path: path}, nil
}

// mountOverlay mounts a read-only overlay (no upperdir) of the skeleton
// over the image at path.
func mountOverlay(path, skel, image string) error {
	data := "lowerdir=" + skel + ":" + image
	err := unix.Mount("overlay", path, "overlay", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, data)
	if err != nil {
		return &os.PathError{Op: "mount overlay " + data, Path: path, Err: err}
	}
	return nil
}

func (s *Store) release(m *sharedMount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.refs--; m.refs > 0 || s.closed {
		return nil
	}
	delete(s.mounts, m.image.ID)
	return s.unmountLocked(m)
}

// unmountLocked undoes mountLocked. s.mu must be held.
func (s *Store) unmountLocked(m *sharedMount) error {
	id := m.image.ID
	err := unix.Unmount(m.path, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(m.path, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return &os.PathError{Op: "unmount", Path: m.path, Err: err}
	}
	var errs []error
	if _, err := s.store.UnmountImage(id, false); err != nil && !errors.Is(err, storage.ErrLayerNotMounted) {
		errs = append(errs, fmt.Errorf("unmounting image %s: %w", id, err))
	}
	errs = append(errs, os.Remove(filepath.Join(s.runDir, "images", id)), os.Remove(m.path))
	s.log.Debug("shared rootfs unmounted", "image", id)
	return errors.Join(errs...)
}

// withStateLock runs fn holding an exclusive flock on StateDir/run/lock,
// which serialises mounting, removing and GC across forge processes.
func (s *Store) withStateLock(ctx context.Context, fn func() error) error {
	f, err := os.OpenFile(filepath.Join(s.stateDir, "run", "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}

// searchableByOthers checks that every directory from / down to dir lets
// others traverse it (o+x): the sandbox's root is an unprivileged host uid.
func searchableByOthers(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("rootfs: %s (mode %v) is not searchable by the sandbox's unprivileged root; the state dir's parents need o+x (chmod o+x %s)", d, fi.Mode().Perm(), d)
		}
		if d == "/" {
			return nil
		}
	}
}

// owner is a run/<pid> directory of a forge process sharing the state dir.
type owner struct {
	pid   int
	dir   string
	alive bool
}

// otherOwners lists the run/<pid> directories of other processes.
func (s *Store) otherOwners() []owner {
	return ownersIn(filepath.Join(s.stateDir, "run"))
}

func ownersIn(parent string) []owner {
	entries, _ := os.ReadDir(parent)
	var owners []owner
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, "owner"))
		alive := false
		if err == nil {
			alive = ownerAlive(string(data))
		} else {
			// Not written yet (the owner is inside Open) or lost: trust the pid.
			alive = proc.Alive(pid)
		}
		owners = append(owners, owner{pid: pid, dir: dir, alive: alive})
	}
	return owners
}
