package rootfs

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

// LayoutConfig describes the single-layer image WriteLayout writes.
type LayoutConfig struct {
	// RefName is the org.opencontainers.image.ref.name annotation in
	// index.json ("" = none). A full name such as "forge/python:3.11" is
	// allowed by the OCI spec and becomes the image's name on import.
	RefName    string
	Env        []string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
	Labels     map[string]string
	Created    time.Time // zero means now
}

// WriteLayout packs the directory tree root as one gzip layer and writes an
// OCI image layout (oci-layout, index.json, blobs/sha256/…) at dst.
// Ownership, modes, symlinks and hardlinks are preserved; the contents of
// /dev, device nodes and sockets are skipped. The layout is built in a
// sibling temp dir and renamed into place, so a crash never leaves a half
// layout at dst; an existing dst is replaced.
func WriteLayout(ctx context.Context, dst, root string, cfg LayoutConfig) (retErr error) {
	dst = filepath.Clean(dst)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	blobs := filepath.Join(tmp, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}
	layer, err := writeLayerBlob(ctx, blobs, root)
	if err != nil {
		return fmt.Errorf("packing layer from %s: %w", root, err)
	}
	created := cfg.Created
	if created.IsZero() {
		created = time.Now().UTC()
	}
	config := imgspecv1.Image{
		Created:  &created,
		Platform: imgspecv1.Platform{Architecture: goruntime.GOARCH, OS: "linux"},
		Config: imgspecv1.ImageConfig{
			Env: cfg.Env, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, WorkingDir: cfg.WorkingDir, Labels: cfg.Labels,
		},
		RootFS:  imgspecv1.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.diffID}},
		History: []imgspecv1.History{{Created: &created, CreatedBy: "forge WriteLayout"}},
	}
	configDesc, err := writeJSONBlob(blobs, imgspecv1.MediaTypeImageConfig, config)
	if err != nil {
		return err
	}
	manifest := imgspecv1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: imgspecv1.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []imgspecv1.Descriptor{layer.desc},
	}
	manifestDesc, err := writeJSONBlob(blobs, imgspecv1.MediaTypeImageManifest, manifest)
	if err != nil {
		return err
	}
	if cfg.RefName != "" {
		manifestDesc.Annotations = map[string]string{imgspecv1.AnnotationRefName: cfg.RefName}
	}
	manifestDesc.Platform = &config.Platform
	index := imgspecv1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: imgspecv1.MediaTypeImageIndex,
		Manifests: []imgspecv1.Descriptor{manifestDesc},
	}
	if err := writeJSONFile(filepath.Join(tmp, imgspecv1.ImageIndexFile), index); err != nil {
		return err
	}
	if err := writeJSONFile(filepath.Join(tmp, imgspecv1.ImageLayoutFile), imgspecv1.ImageLayout{Version: imgspecv1.ImageLayoutVersion}); err != nil {
		return err
	}
	return replaceDir(tmp, dst)
}

// replaceDir renames src to dst, moving an existing dst out of the way first
// and deleting it afterwards.
func replaceDir(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		old := dst + fmt.Sprintf(".old-%d", time.Now().UnixNano())
		if err := os.Rename(dst, old); err != nil {
			return err
		}
		defer os.RemoveAll(old)
	}
	return os.Rename(src, dst)
}

type layerBlob struct {
	desc   imgspecv1.Descriptor
	diffID digest.Digest
}

// writeLayerBlob tars root through gzip into blobs, hashing both the
// compressed stream (blob digest) and the tar stream (diff_id).
func writeLayerBlob(ctx context.Context, blobs, root string) (layerBlob, error) {
	f, err := os.CreateTemp(blobs, ".layer-")
	if err != nil {
		return layerBlob{}, err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name()) // no-op after the rename
	}()
	blobHash, diffHash := sha256.New(), sha256.New()
	counter := &countingWriter{w: io.MultiWriter(f, blobHash)}
	gz, err := gzip.NewWriterLevel(counter, gzip.DefaultCompression)
	if err != nil {
		return layerBlob{}, err
	}
	tw := tar.NewWriter(io.MultiWriter(gz, diffHash))
	if err := writeTree(ctx, tw, root); err != nil {
		return layerBlob{}, err
	}
	if err := tw.Close(); err != nil {
		return layerBlob{}, err
	}
	if err := gz.Close(); err != nil {
		return layerBlob{}, err
	}
	if err := f.Chmod(0o644); err != nil {
		return layerBlob{}, err
	}
	if err := f.Close(); err != nil {
		return layerBlob{}, err
	}
	d := digest.NewDigestFromBytes(digest.SHA256, blobHash.Sum(nil))
	if err := os.Rename(f.Name(), filepath.Join(blobs, d.Encoded())); err != nil {
		return layerBlob{}, err
	}
	return layerBlob{
		desc:   imgspecv1.Descriptor{MediaType: imgspecv1.MediaTypeImageLayerGzip, Digest: d, Size: counter.n},
		diffID: digest.NewDigestFromBytes(digest.SHA256, diffHash.Sum(nil)),
	}, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type inode struct{ dev, ino uint64 }

// writeTree writes every entry under root (not root itself) to tw in
// lexical order, without following symlinks.
func writeTree(ctx context.Context, tw *tar.Writer, root string) error {
	links := map[inode]string{}
	count := 0
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if count++; count%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		if strings.HasPrefix(name, "dev/") { // a tmpfs in every sandbox
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return writeEntry(tw, path, name, fi, links)
	})
}

func writeEntry(tw *tar.Writer, path, name string, fi fs.FileInfo, links map[inode]string) error {
	mode := fi.Mode()
	if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket|fs.ModeIrregular) != 0 {
		return nil
	}
	var target string
	if mode&fs.ModeSymlink != 0 {
		var err error
		if target, err = os.Readlink(path); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return err
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	// Host user names and sub-second times mean nothing in the image and
	// would force PAX records on every entry.
	hdr.Uname, hdr.Gname = "", ""
	hdr.ModTime = fi.ModTime().Truncate(time.Second)
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no stat data", path)
	}
	hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	if mode.IsRegular() && st.Nlink > 1 {
		key := inode{uint64(st.Dev), st.Ino}
		if first, seen := links[key]; seen {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			return tw.WriteHeader(hdr)
		}
		links[key] = name
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !mode.IsRegular() {
		return nil
	}
	return copyFileInto(tw, path, hdr.Size)
}

func copyFileInto(w io.Writer, path string, size int64) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	n, err := io.CopyN(w, f, size)
	if err != nil {
		return fmt.Errorf("reading %s (%d of %d bytes): %w", path, n, size, err)
	}
	return nil
}

func writeJSONBlob(blobs, mediaType string, v any) (imgspecv1.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return imgspecv1.Descriptor{}, err
	}
	d := digest.FromBytes(data)
	if err := os.WriteFile(filepath.Join(blobs, d.Encoded()), data, 0o644); err != nil {
		return imgspecv1.Descriptor{}, err
	}
	return imgspecv1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}, nil
}

func writeJSONFile(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
