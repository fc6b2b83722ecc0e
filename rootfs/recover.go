package rootfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"go.podman.io/storage"

	"github.com/mcp-forge/forge/internal/proc"
)

// Report says what GC repaired.
type Report struct {
	// DeadProcesses are the pids of crashed forge processes cleaned up.
	DeadProcesses []int `json:"dead_processes"`
	// Unmounted are the stale mount points detached.
	Unmounted []string `json:"unmounted"`
	// ImageMounts is how many store mount counts were given back.
	ImageMounts int `json:"image_mounts"`
	// TempBytes is the size of leftover temp blobs removed.
	TempBytes int64 `json:"temp_bytes"`
	// Images are the half-imported images removed.
	Images []string `json:"images"`
	// Scratch are the build containers of dead processes removed.
	Scratch []string `json:"scratch,omitempty"`
}

// GC removes what crashed forge processes left in the state dir: their
// shared mounts (overlays, and the image mounts under them, given back
// through the store so its mount counts stay right), their run and temp
// directories, and images they were importing. Open runs it.
func (s *Store) GC(ctx context.Context) (Report, error) {
	var rep Report
	err := s.withStateLock(ctx, func() error {
		var errs []error
		for _, o := range s.otherOwners() {
			if o.alive {
				continue
			}
			rep.DeadProcesses = append(rep.DeadProcesses, o.pid)
			errs = append(errs, s.cleanRunDir(o.dir, &rep))
		}
		for _, o := range ownersIn(filepath.Join(s.stateDir, "tmp")) {
			if !o.alive {
				rep.TempBytes += dirSize(o.dir)
				errs = append(errs, os.RemoveAll(o.dir))
			}
		}
		errs = append(errs, s.removeAbandonedScratch(&rep))
		errs = append(errs, s.removeAbandonedImports(&rep))
		return errors.Join(errs...)
	})
	if len(rep.DeadProcesses) > 0 || rep.TempBytes > 0 || len(rep.Images) > 0 || len(rep.Scratch) > 0 {
		s.log.Info("cleaned up after crashed forge processes", "pids", rep.DeadProcesses,
			"unmounted", len(rep.Unmounted), "temp_bytes", rep.TempBytes, "images", rep.Images, "scratch", rep.Scratch)
	}
	return rep, err
}

// cleanRunDir unmounts everything under a dead process's run dir, gives
// back its image mounts, and removes the dir.
func (s *Store) cleanRunDir(dir string, rep *Report) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if err := unmountUnder(dir); err != nil {
		return err
	}
	rep.Unmounted = append(rep.Unmounted, mps...)
	markers, _ := os.ReadDir(filepath.Join(dir, "images"))
	var errs []error
	for _, m := range markers {
		_, err := s.store.UnmountImage(m.Name(), false)
		switch {
		case err == nil:
			rep.ImageMounts++
		case errors.Is(err, storage.ErrLayerNotMounted), errors.Is(err, storage.ErrImageUnknown),
			errors.Is(err, storage.ErrLayerUnknown):
		default:
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// removeAbandonedImports deletes images that still carry only the
// placeholder name of an importer that is gone, and then layers no image
// uses, unless another live forge process might be importing right now.
func (s *Store) removeAbandonedImports(rep *Report) error {
	imgs, err := s.store.Images()
	if err != nil {
		return err
	}
	for _, img := range imgs {
		for _, n := range img.Names {
			if pid := placeholderPid(n); pid > 0 && pid != os.Getpid() && !proc.Alive(pid) {
				if isPlaceholderOnly(img.Names) {
					if _, err := s.store.DeleteImage(img.ID, true); err == nil {
						rep.Images = append(rep.Images, img.ID)
					}
				} else {
					s.store.RemoveNames(img.ID, []string{n})
				}
				break
			}
		}
	}
	for _, o := range s.otherOwners() {
		if o.alive {
			return nil
		}
	}
	s.mu.Lock()
	busy := s.importing > 0
	s.mu.Unlock()
	if !busy {
		s.rollback("", map[string]bool{})
	}
	return nil
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
