package rootfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/opencontainers/go-digest"
	imgspecs "github.com/opencontainers/image-spec/specs-go"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/storage"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/proc"
)

// Scratch is a writable container layer on an image: a build installs into
// it, then Commit turns it into a new image, or Discard drops it. Nothing of
// it outlives the process that made it (GC removes a dead process's).
type Scratch struct {
	store   *Store
	id      string // the storage container's
	base    Image
	path    string   // where the layer is mounted: the image with the layer on top
	bind    string   // path, a bind of the store's mount under the run dir
	created []string // mount points Scratch added, removed again before Commit
	done    bool
}

// scratchPrefix names build containers; the pid after it lets GC tell a
// dead builder's container from a live one.
const scratchPrefix = "forge-build-"

// NewScratch creates a writable layer on image and mounts it. The mount
// points every sandbox needs are created in it (the layer is not stacked
// on the skeleton that shared roots use) and removed again at Commit.
func (s *Store) NewScratch(ctx context.Context, image string) (_ *Scratch, retErr error) {
	img, err := s.Lookup(ctx, image)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, 6)
	rand.Read(nonce)
	name := scratchPrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(nonce)
	c, err := s.store.CreateContainer("", []string{name}, img.ID, "", "", nil)
	if err != nil {
		return nil, fmt.Errorf("creating a writable layer on image %s: %w", img.ID[:12], err)
	}
	w := &Scratch{store: s, id: c.ID, base: *img}
	defer func() {
		if retErr != nil {
			w.Discard()
		}
	}()
	merged, err := s.store.Mount(c.ID, "")
	if err != nil {
		return nil, fmt.Errorf("mounting the writable layer of %s: %w", name, err)
	}
	// The store's own mount point is not reachable for the sandbox's root
	// (its parents are 0700); bind it where the shared roots are.
	w.bind = filepath.Join(s.runDir, "rootfs", name)
	if err := os.Mkdir(w.bind, 0o755); err != nil {
		return nil, err
	}
	if err := unix.Mount(merged, w.bind, "", unix.MS_BIND, ""); err != nil {
		os.Remove(w.bind)
		w.bind = ""
		return nil, &os.PathError{Op: "bind " + merged, Path: w.bind, Err: err}
	}
	w.path = w.bind
	if err := w.addMountPoints(); err != nil {
		return nil, err
	}
	s.log.Debug("scratch layer created", "container", name, "image", img.ID, "path", w.path)
	return w, nil
}

// addMountPoints creates, inside the layer, the mount points the image
// lacks; libcontainer could not (the root's directories belong to host
// root, which the sandbox's root is not).
func (w *Scratch) addMountPoints() error {
	for _, d := range mountPoints {
		if err := w.mkdirAll("/"+d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// MkdirAll creates dir (an absolute path inside the image) and its missing
// parents, resolving symlinks of the image inside the layer, never on the
// host. It returns the host path. Directories it creates that are not
// below keep are removed again at Commit.
func (w *Scratch) MkdirAll(dir string) (string, error) {
	if err := w.mkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return securejoin.SecureJoin(w.path, dir)
}

func (w *Scratch) mkdirAll(dir string, mode os.FileMode) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("rootfs: %q is not an absolute path", dir)
	}
	cur := "/"
	for _, part := range strings.Split(strings.Trim(filepath.Clean(dir), "/"), "/") {
		cur = filepath.Join(cur, part)
		host, err := securejoin.SecureJoin(w.path, cur)
		if err != nil {
			return err
		}
		fi, err := os.Lstat(host)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("rootfs: %s in image %s is not a directory", cur, w.base.ID[:12])
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Mkdir(host, mode); err != nil {
			return err
		}
		w.created = append(w.created, host)
	}
	return nil
}

// Touch creates an empty file at path (inside the image) to mount a file
// on; it is removed again at Commit.
func (w *Scratch) Touch(path string) error {
	if err := w.mkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	host, err := securejoin.SecureJoin(w.path, path)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(host, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	w.created = append(w.created, host)
	return f.Close()
}

// Path is the host path of the layer's root (the image with the layer on top).
func (w *Scratch) Path() string { return w.path }

// Base is the image the layer sits on.
func (w *Scratch) Base() Image { return w.base }

// Keep marks host paths that MkdirAll created as part of the result: they
// stay at Commit.
func (w *Scratch) Keep(hostPath string) {
	var out []string
	for _, c := range w.created {
		if c != hostPath && !strings.HasPrefix(hostPath, c+"/") {
			out = append(out, c)
		}
	}
	w.created = out
}

// CommitOptions describe the image Commit makes.
type CommitOptions struct {
	// Name is the new image's name (e.g. forge/custom:NAME); an image that
	// had it loses it.
	Name   string
	Labels map[string]string
	// MaxSize caps the layer (uncompressed bytes); 0 = no cap.
	MaxSize int64
	// Comment goes into the image's history.
	Comment string
}

// Commit turns the layer into an image on top of the base and discards the
// scratch container. Nothing of a failed Commit stays in the store.
func (w *Scratch) Commit(ctx context.Context, opts CommitOptions) (_ *Image, retErr error) {
	if w.done {
		return nil, errors.New("rootfs: scratch layer already committed or discarded")
	}
	defer w.Discard()
	s := w.store
	for i := len(w.created) - 1; i >= 0; i-- {
		os.Remove(w.created[i]) // empty mount points only; a non-empty one stays
	}
	c, err := s.store.Container(w.id)
	if err != nil {
		return nil, err
	}
	if err := w.unbind(); err != nil {
		return nil, err
	}
	if _, err := s.store.Unmount(w.id, true); err != nil {
		return nil, fmt.Errorf("unmounting the writable layer: %w", err)
	}
	// Diff holds the layer lock until its reader is closed and PutLayer
	// needs it: copy the diff to a temp file first.
	tmp, size, err := w.diffToFile(c.LayerID, opts.MaxSize)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	base, err := s.store.Image(w.base.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: base image %s: %w", ErrImageNotFound, w.base.ID[:12], err)
	}
	layer, _, err := s.store.PutLayer("", base.TopLayer, nil, "", false, nil, tmp)
	if err != nil {
		return nil, fmt.Errorf("storing the layer: %w", err)
	}
	defer func() {
		if retErr != nil {
			s.store.DeleteLayer(layer.ID)
		}
	}()
	if layer.UncompressedSize > 0 {
		size = layer.UncompressedSize
	}
	bigData, mdigest, err := w.imageBlobs(base, layer, size, opts)
	if err != nil {
		return nil, err
	}
	var img *storage.Image
	err = s.withStateLock(ctx, func() error {
		old, _, lerr := s.lookup(opts.Name)
		img, err = s.store.CreateImage("", nil, layer.ID, "", &storage.ImageOptions{
			CreationDate: time.Now().UTC(), Digest: mdigest, BigData: bigData})
		if err != nil {
			return fmt.Errorf("creating image %s: %w", opts.Name, err)
		}
		if lerr == nil && old.ID != img.ID {
			if err := s.takeNameLocked(old, opts.Name); err != nil {
				s.store.DeleteImage(img.ID, true)
				return err
			}
		}
		if err := s.store.AddNames(img.ID, []string{opts.Name}); err != nil {
			s.store.DeleteImage(img.ID, true)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	img, err = s.store.Image(img.ID)
	if err != nil {
		return nil, err
	}
	out := s.describe(img)
	s.log.Debug("scratch layer committed", "image", img.ID, "name", opts.Name, "size", size)
	return &out, nil
}

// SetName gives image id the name, taking it from the image that had it.
func (s *Store) SetName(ctx context.Context, id, name string) error {
	return s.withStateLock(ctx, func() error {
		if old, _, err := s.lookup(name); err == nil && old.ID != id {
			if err := s.takeNameLocked(old, name); err != nil {
				return err
			}
		}
		return s.store.AddNames(id, []string{name})
	})
}

// takeNameLocked removes name from old; an image left without names is
// deleted unless a sandbox uses it (forge gc removes it later). The state
// lock must be held.
func (s *Store) takeNameLocked(old *storage.Image, name string) error {
	if err := s.store.RemoveNames(old.ID, []string{name}); err != nil {
		return err
	}
	if len(old.Names) == 1 && len(s.usersOf(old.ID)) == 0 {
		if _, err := s.store.DeleteImage(old.ID, true); err != nil {
			s.log.Warn("removing an image that lost its last name", "image", old.ID, "err", err)
		}
		s.mu.Lock()
		delete(s.labels, old.ID)
		s.mu.Unlock()
	}
	return nil
}

// TooLargeError is a layer over CommitOptions.MaxSize.
type TooLargeError struct{ Size, Max int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the new layer is over %d bytes, the maximum image size", e.Max)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// diffToFile writes the layer's diff (an uncompressed tar) to a temp file,
// stopping at max bytes.
func (w *Scratch) diffToFile(layerID string, max int64) (_ *os.File, _ int64, retErr error) {
	s := w.store
	rc, err := s.store.Diff("", layerID, &storage.DiffOptions{Compression: nil})
	if err != nil {
		return nil, 0, fmt.Errorf("reading the layer's changes: %w", err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(s.tmpDir, "layer-*.tar")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var src io.Reader = rc
	if max > 0 {
		src = io.LimitReader(rc, max+1)
	}
	n, err := io.Copy(tmp, src)
	if err != nil {
		return nil, 0, fmt.Errorf("copying the layer's changes: %w", err)
	}
	if max > 0 && n > max {
		return nil, 0, &TooLargeError{Size: n, Max: max}
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	return tmp, n, nil
}

// imageBlobs makes the new image's config (the base's, with the layer's
// diff id, the labels and a history entry) and its OCI manifest.
func (w *Scratch) imageBlobs(base *storage.Image, layer *storage.Layer, size int64, opts CommitOptions) ([]storage.ImageBigDataOption, digest.Digest, error) {
	s := w.store
	mblob, err := s.store.ImageBigData(base.ID, storage.ImageDigestBigDataKey)
	if err != nil {
		return nil, "", fmt.Errorf("reading the base image's manifest: %w", err)
	}
	m, err := manifest.FromBlob(mblob, manifest.GuessMIMEType(mblob))
	if err != nil {
		return nil, "", fmt.Errorf("parsing the base image's manifest: %w", err)
	}
	cblob, err := s.store.ImageBigData(base.ID, m.ConfigInfo().Digest.String())
	if err != nil {
		return nil, "", fmt.Errorf("reading the base image's config: %w", err)
	}
	var cfg imgspecv1.Image
	if err := json.Unmarshal(cblob, &cfg); err != nil {
		return nil, "", fmt.Errorf("parsing the base image's config: %w", err)
	}
	now := time.Now().UTC()
	cfg.Created = &now
	cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, layer.UncompressedDigest)
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	for k, v := range opts.Labels {
		cfg.Config.Labels[k] = v
	}
	cfg.History = append(cfg.History, imgspecv1.History{Created: &now, CreatedBy: "forge", Comment: opts.Comment})
	cblob, err = json.Marshal(cfg)
	if err != nil {
		return nil, "", err
	}
	cdigest := digest.FromBytes(cblob)
	man := imgspecv1.Manifest{
		Versioned: imgspecs.Versioned{SchemaVersion: 2},
		MediaType: imgspecv1.MediaTypeImageManifest,
		Config:    imgspecv1.Descriptor{MediaType: imgspecv1.MediaTypeImageConfig, Digest: cdigest, Size: int64(len(cblob))},
	}
	for _, l := range m.LayerInfos() {
		man.Layers = append(man.Layers, imgspecv1.Descriptor{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size})
	}
	man.Layers = append(man.Layers, imgspecv1.Descriptor{MediaType: imgspecv1.MediaTypeImageLayer, Digest: layer.UncompressedDigest, Size: size})
	mblob, err = json.Marshal(man)
	if err != nil {
		return nil, "", err
	}
	mdigest := digest.FromBytes(mblob)
	return []storage.ImageBigDataOption{
		{Key: cdigest.String(), Data: cblob, Digest: cdigest},
		{Key: storage.ImageDigestBigDataKey, Data: mblob, Digest: mdigest},
		{Key: storage.ImageDigestBigDataKey + "-" + mdigest.String(), Data: mblob, Digest: mdigest},
	}, mdigest, nil
}

// Discard unmounts and deletes the scratch container with its layer. Safe
// to call more than once, and after Commit.
func (w *Scratch) Discard() error {
	if w.done {
		return nil
	}
	w.done = true
	s := w.store
	if err := w.unbind(); err != nil {
		s.log.Warn("unmounting scratch layer", "path", w.bind, "err", err)
	}
	if _, err := s.store.Unmount(w.id, true); err != nil && !errors.Is(err, storage.ErrLayerNotMounted) &&
		!errors.Is(err, storage.ErrContainerUnknown) {
		s.log.Warn("unmounting scratch layer", "container", w.id, "err", err)
	}
	if err := s.store.DeleteContainer(w.id); err != nil && !errors.Is(err, storage.ErrContainerUnknown) {
		return fmt.Errorf("removing scratch container %s: %w", w.id[:12], err)
	}
	return nil
}

// unbind undoes the bind of NewScratch.
func (w *Scratch) unbind() error {
	if w.bind == "" {
		return nil
	}
	err := unix.Unmount(w.bind, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "unmount", Path: w.bind, Err: err}
	}
	os.Remove(w.bind)
	w.bind = ""
	return nil
}

// removeAbandonedScratch deletes build containers of dead forge processes.
func (s *Store) removeAbandonedScratch(rep *Report) error {
	cs, err := s.store.Containers()
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range cs {
		for _, n := range c.Names {
			rest, ok := strings.CutPrefix(n, scratchPrefix)
			if !ok {
				continue
			}
			pid, _ := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
			if pid > 0 && pid != os.Getpid() && !proc.Alive(pid) {
				s.store.Unmount(c.ID, true)
				if err := s.store.DeleteContainer(c.ID); err != nil {
					errs = append(errs, err)
				} else {
					rep.Scratch = append(rep.Scratch, c.ID)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// LayerCount is the number of layers in the store (tests check that a
// failed commit left none).
func (s *Store) LayerCount() (int, error) {
	ls, err := s.store.Layers()
	return len(ls), err
}

// ScratchCount is the number of build containers in the store (tests check
// that a failed build leaves none).
func (s *Store) ScratchCount() (int, error) {
	cs, err := s.store.Containers()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cs {
		for _, name := range c.Names {
			if strings.HasPrefix(name, scratchPrefix) {
				n++
			}
		}
	}
	return n, nil
}
