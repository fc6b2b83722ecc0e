package rootfs

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/copy"
	dockerarchive "go.podman.io/image/v5/docker/archive"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/image"
	ociarchive "go.podman.io/image/v5/oci/archive"
	ocilayout "go.podman.io/image/v5/oci/layout"
	istorage "go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
)

// registryProbeTimeout bounds how long a docker:// pull may wait for the
// registry's first answer, so an offline host fails fast.
const registryProbeTimeout = 15 * time.Second

// Pull imports ref (docker://, oci:, oci-archive:, docker-archive:) into the
// store and returns the image. It is a no-op when the same image is already
// present: for archives, the same config digest; for docker://, an image of
// that name (pull policy "missing"; remove it to pull again).
//
// The image is named after the reference: docker://python:3.12-slim →
// "docker.io/library/python:3.12-slim"; oci:DIR:forge/python:3.11 →
// "forge/python:3.11"; without a tag, the layout's ref.name annotation (or
// the docker archive's repo tag) names it.
func (s *Store) Pull(ctx context.Context, ref string) (*Image, error) {
	srcRef, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	isDocker := srcRef.Transport().Name() == "docker"
	if !isDocker {
		path, _, _ := strings.Cut(srcRef.StringWithinTransport(), ":")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("importing %s: %w: %w", ref, ErrImageNotFound, err)
		}
	}
	names := s.namesFor(srcRef)
	if isDocker && len(names) > 0 {
		if img, err := s.store.Image(names[0]); err == nil {
			out := s.describe(img)
			return &out, nil
		}
	}
	id, err := s.predictID(ctx, srcRef)
	if err != nil {
		return nil, classifyPullError(srcRef, ref, err)
	}
	if img, err := s.store.Image(id); err == nil && id != "" {
		if err := s.addNames(img.ID, names); err != nil {
			return nil, err
		}
		s.log.Debug("image already present", "ref", ref, "id", id, "elapsed", time.Since(start))
		return s.Lookup(ctx, img.ID)
	}
	img, err := s.copyIn(ctx, srcRef, ref, names)
	if err != nil {
		return nil, err
	}
	if s.progress != nil {
		fmt.Fprintf(s.progress, "imported %s as %s in %s\n", ref, img.ID[:12], time.Since(start).Round(100*time.Millisecond))
	}
	s.log.Debug("image imported", "ref", ref, "id", img.ID, "elapsed", time.Since(start))
	return img, nil
}

// predictID opens the source and computes the ID containers/storage gives
// the image (the hex of its config digest), so a present image is found
// without copying. For docker:// this is also the reachability probe.
func (s *Store) predictID(ctx context.Context, ref types.ImageReference) (string, error) {
	if ref.Transport().Name() == "docker" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, registryProbeTimeout)
		defer cancel()
	}
	src, err := ref.NewImageSource(ctx, s.sys)
	if err != nil {
		return "", err
	}
	defer src.Close()
	img, err := image.FromUnparsedImage(ctx, s.sys, image.UnparsedInstance(src, nil))
	if err != nil {
		return "", err
	}
	return img.ConfigInfo().Digest.Encoded(), nil
}

// copyIn copies the image under a placeholder name and renames it on
// success; on failure it removes whatever the copy left in the store.
func (s *Store) copyIn(ctx context.Context, srcRef types.ImageReference, ref string, names []string) (*Image, error) {
	placeholder, err := newPlaceholder()
	if err != nil {
		return nil, err
	}
	destRef, err := istorage.Transport.NewStoreReference(s.store, placeholder, "")
	if err != nil {
		return nil, err
	}
	layersBefore, err := s.layerIDs()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.importing++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.importing--
		s.mu.Unlock()
	}()
	events := make(chan types.ProgressProperties)
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		reportImport(s.progress, ref, events)
	}()
	_, err = copy.Image(ctx, s.policy, destRef, srcRef, &copy.Options{
		Progress:         events,
		ProgressInterval: progressInterval,
		SourceCtx:        s.sys,
		DestinationCtx:   s.sys,
	})
	close(events)
	<-reported
	if err != nil {
		s.rollback(placeholder.String(), layersBefore)
		return nil, classifyPullError(srcRef, ref, err)
	}
	img, err := s.store.Image(placeholder.String())
	if err != nil {
		return nil, fmt.Errorf("finding imported image: %w", err)
	}
	if err := s.addNames(img.ID, names); err != nil {
		return nil, err
	}
	if err := s.store.RemoveNames(img.ID, []string{placeholder.String()}); err != nil {
		return nil, err
	}
	return s.Lookup(ctx, img.ID)
}

func (s *Store) addNames(id string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	if err := s.store.AddNames(id, names); err != nil {
		return fmt.Errorf("naming image %s %v: %w", id, names, err)
	}
	return nil
}

func (s *Store) layerIDs() (map[string]bool, error) {
	layers, err := s.store.Layers()
	if err != nil {
		return nil, err
	}
	ids := make(map[string]bool, len(layers))
	for _, l := range layers {
		ids[l.ID] = true
	}
	return ids, nil
}

// rollback deletes the half-imported image and the layers created since
// layersBefore that no image uses.
func (s *Store) rollback(placeholder string, layersBefore map[string]bool) {
	if img, err := s.store.Image(placeholder); err == nil {
		if _, err := s.store.DeleteImage(img.ID, true); err != nil {
			s.log.Warn("rolling back import: deleting image", "id", img.ID, "err", err)
		}
	}
	used, err := s.usedLayers()
	if err != nil {
		return
	}
	layers, err := s.store.Layers()
	if err != nil {
		return
	}
	// Children before parents: a layer cannot be deleted while it has one.
	for deleted := true; deleted; {
		deleted = false
		for _, l := range layers {
			if layersBefore[l.ID] || used[l.ID] || hasChild(layers, l.ID) {
				continue
			}
			if err := s.store.DeleteLayer(l.ID); err == nil {
				deleted = true
				layersBefore[l.ID] = true // gone: skip it from now on
				s.log.Debug("rolled back layer", "layer", l.ID)
			}
		}
		if layers, err = s.store.Layers(); err != nil {
			return
		}
	}
}

func hasChild(layers []storage.Layer, id string) bool {
	for _, l := range layers {
		if l.Parent == id {
			return true
		}
	}
	return false
}

// usedLayers are the layers of every image's chain and of containers.
func (s *Store) usedLayers() (map[string]bool, error) {
	layers, err := s.store.Layers()
	if err != nil {
		return nil, err
	}
	parent := map[string]string{}
	for _, l := range layers {
		parent[l.ID] = l.Parent
	}
	used := map[string]bool{}
	mark := func(id string) {
		for ; id != "" && !used[id]; id = parent[id] {
			used[id] = true
		}
	}
	imgs, err := s.store.Images()
	if err != nil {
		return nil, err
	}
	for _, img := range imgs {
		mark(img.TopLayer)
		for _, l := range img.MappedTopLayers {
			mark(l)
		}
	}
	ctrs, err := s.store.Containers()
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		mark(c.LayerID)
	}
	return used, nil
}

// namesFor derives the store names of the image ref points to.
func (s *Store) namesFor(ref types.ImageReference) []string {
	if named := ref.DockerReference(); named != nil {
		return []string{reference.TagNameOnly(named).String()}
	}
	switch ref.Transport().Name() {
	case "oci", "oci-archive":
		path, tag, _ := strings.Cut(ref.StringWithinTransport(), ":")
		if tag != "" {
			return []string{tag}
		}
		if n := ociRefName(path, ref.Transport().Name() == "oci-archive"); n != "" {
			return []string{n}
		}
	case "docker-archive":
		return dockerArchiveNames(s.sys, ref.StringWithinTransport())
	}
	return nil
}

// ociRefName is the ref.name annotation of the only manifest of a layout
// (a directory or a tar of one), or "".
func ociRefName(path string, archive bool) string {
	var data []byte
	if archive {
		data = readTarMember(path, "index.json")
	} else {
		data, _ = os.ReadFile(filepath.Join(path, "index.json"))
	}
	var index imgspecv1.Index
	if json.Unmarshal(data, &index) != nil || len(index.Manifests) != 1 {
		return ""
	}
	return index.Manifests[0].Annotations[imgspecv1.AnnotationRefName]
}

func readTarMember(path, name string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return nil
		}
		if strings.TrimPrefix(hdr.Name, "./") == name {
			data, _ := io.ReadAll(io.LimitReader(tr, 1<<20))
			return data
		}
	}
}

// dockerArchiveNames are the repo tags of a single-image docker archive.
func dockerArchiveNames(sys *types.SystemContext, path string) []string {
	r, err := dockerarchive.NewReader(sys, path)
	if err != nil {
		return nil
	}
	defer r.Close()
	refs, err := r.List()
	if err != nil || len(refs) != 1 {
		return nil
	}
	var names []string
	for _, ref := range refs[0] {
		if named := ref.DockerReference(); named != nil {
			names = append(names, named.String())
		}
	}
	return names
}

// classifyPullError maps a pull failure to the package's errors.
func classifyPullError(srcRef types.ImageReference, ref string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	if srcRef.Transport().Name() == "docker" {
		if isNetworkError(err) {
			registry := "docker.io"
			if named := srcRef.DockerReference(); named != nil {
				registry = reference.Domain(named)
			}
			return &RegistryError{Registry: registry, Err: err}
		}
		return fmt.Errorf("pulling %s: %w", ref, err)
	}
	var layoutNotFound ocilayout.ImageNotFoundError
	var archiveNotFound ociarchive.ImageNotFoundError
	if errors.Is(err, fs.ErrNotExist) || errors.As(err, &layoutNotFound) || errors.As(err, &archiveNotFound) {
		return fmt.Errorf("importing %s: %w: %w", ref, ErrImageNotFound, err)
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("importing %s: %w", ref, err)
	}
	// Everything else reading a local archive is a problem of its contents:
	// digest mismatches, truncated gzip or tar streams, broken JSON.
	return fmt.Errorf("importing %s: %w (nothing was imported): %w", ref, ErrCorruptArchive, err)
}

// isNetworkError reports a failure to reach a host at all.
func isNetworkError(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	return errors.As(err, &dnsErr) || errors.As(err, &opErr) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ETIMEDOUT)
}

// Bootstrap builds (or reuses) the Debian-based Python layout, see the
// package-level Bootstrap, and imports it like any oci: layout.
func (s *Store) Bootstrap(ctx context.Context, opts BootstrapOptions) (*Image, error) {
	if opts.Progress == nil {
		opts.Progress = s.progress
	}
	opts = opts.withDefaults()
	dir, err := Bootstrap(ctx, opts)
	if err != nil {
		return nil, err
	}
	return s.Pull(ctx, "oci:"+dir+":"+opts.Name)
}
