package rootfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/forge/internal/rootless"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
)

// Options configures Open.
type Options struct {
	// StateDir holds everything: the store in StateDir/storage, run state
	// (mounts, owner pids) in StateDir/run, temp blobs in StateDir/tmp and
	// the blob-info cache in StateDir/cache.
	StateDir string
	// Progress receives human-readable progress lines of imports: each
	// blob when it starts, its bytes every half second, when it is done
	// (nil = none). An image already present prints nothing.
	Progress io.Writer
	// Logger gets debug lines of each step (nil = discard).
	Logger *slog.Logger
}

// Image describes an image in the store.
type Image struct {
	ID    string   `json:"id"`
	Names []string `json:"names"`
	Size  int64    `json:"size"`
	// LayerSize is the size of the image's top layer alone (for an
	// environment, what the build added to its base).
	LayerSize int64             `json:"layer_size"`
	Created   time.Time         `json:"created"`
	Digest    string            `json:"digest"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// Store is forge's image store. It is safe for concurrent use, and several
// forge processes may share one StateDir.
type Store struct {
	stateDir string
	runDir   string   // StateDir/run/<pid>: this process's mounts
	pidLock  *os.File // flock on StateDir/run/<pid>.lock while open (lockPid)
	tmpDir   string   // StateDir/tmp/<pid>: this process's temp blobs
	skelDir  string   // the mount points every shared rootfs needs
	progress io.Writer
	log      *slog.Logger
	store    storage.Store
	sys      *types.SystemContext
	policy   *signature.PolicyContext
	// traverseErr is set when the sandbox's root cannot reach run/.
	traverseErr error

	mu     sync.Mutex
	mounts map[string]*sharedMount // by image ID
	labels map[string]imageMeta    // by image ID; images are immutable
	// importing counts copies in progress, whose new layers GC must keep.
	importing int
	closed    bool
	// refs counts the Opens sharing this Store (guarded by openStores.mu).
	refs int
}

// openStores shares one Store per state dir within a process:
// containers/storage keeps one store object per root per process, and this
// process's shared mounts live at one path, so a second, independent Store
// on the same root would shut the first one's down under it.
var openStores = struct {
	mu sync.Mutex
	m  map[string]*Store
}{m: map[string]*Store{}}

// storageConf is written to StateDir/storage.conf and named by
// CONTAINERS_STORAGE_CONF, so /etc/containers/storage.conf (and its
// surprises, e.g. additional image stores) is never read.
const storageConf = `# Written by forge; the store's options are set in code.
[storage]
driver = "overlay"
`

// Open opens (creating it if needed) the store under opts.StateDir and
// repairs what a crashed forge process left behind there (see GC). Opening
// the same state dir again in one process returns the same Store; each
// Open needs its Close.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.StateDir == "" {
		return nil, errors.New("rootfs: Options.StateDir is required")
	}
	stateDir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, err
	}
	openStores.mu.Lock()
	defer openStores.mu.Unlock()
	if s, ok := openStores.m[stateDir]; ok {
		s.refs++
		return s, nil
	}
	s, err := open(ctx, stateDir, opts)
	if err != nil {
		return nil, err
	}
	s.refs = 1
	openStores.m[stateDir] = s
	return s, nil
}

func open(ctx context.Context, stateDir string, opts Options) (_ *Store, retErr error) {
	var err error
	if strings.ContainsAny(stateDir, ":,") {
		return nil, fmt.Errorf("rootfs: state dir %q must not contain ':' or ',' (overlay mount options)", stateDir)
	}
	s := &Store{
		stateDir: stateDir,
		runDir:   filepath.Join(stateDir, "run", strconv.Itoa(os.Getpid())),
		tmpDir:   filepath.Join(stateDir, "tmp", strconv.Itoa(os.Getpid())),
		skelDir:  filepath.Join(stateDir, "skel"),
		progress: opts.Progress,
		log:      opts.Logger,
		mounts:   map[string]*sharedMount{},
		labels:   map[string]imageMeta{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.pidLock, err = lockPid(ctx, stateDir, s.log); err != nil {
		return nil, err
	}
	// Holding the lock, a run/<pid> that exists is a dead process's (same
	// pid, another pid namespace or an earlier boot): cleaned once the store
	// is open.
	_, statErr := os.Stat(s.runDir)
	stale := statErr == nil
	os.RemoveAll(s.tmpDir)
	if err := s.makeDirs(); err != nil {
		s.pidLock.Close()
		return nil, err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(s.runDir)
			os.RemoveAll(s.tmpDir)
			s.pidLock.Close()
		}
	}()
	confPath := filepath.Join(stateDir, "storage.conf")
	if err := os.WriteFile(confPath, []byte(storageConf), 0o644); err != nil {
		return nil, err
	}
	os.Setenv("CONTAINERS_STORAGE_CONF", confPath)
	start := time.Now()
	// Image mounts are only ever lower layers of forge's own read-only overlay.
	driverOpts := []string{"overlay.mountopt=nodev"}
	if m, err := rootless.Mapped("/proc"); rootless.Active() && err == nil && m.Size == 0 {
		// A rootless forge with only the user's own uid mapped cannot give
		// image files their owners: all become the user's (as podman does).
		driverOpts = append(driverOpts, "overlay.ignore_chown_errors=true")
	}
	s.store, err = storage.GetStore(storage.StoreOptions{
		RunRoot:            filepath.Join(stateDir, "run", "storage"),
		GraphRoot:          filepath.Join(stateDir, "storage"), // StorageDir
		GraphDriverName:    "overlay",
		GraphDriverOptions: driverOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("opening image store in %s: %w", stateDir, err)
	}
	s.log.Debug("image store opened", "state_dir", stateDir, "elapsed", time.Since(start))
	s.sys = s.systemContext()
	// forge runs whatever image the user names; signatures are not checked
	// (the equivalent of policy.json {"default":[{"type":"insecureAcceptAnything"}]}).
	s.policy, err = signature.NewPolicyContext(&signature.Policy{
		Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()},
	})
	if err != nil {
		s.store.Shutdown(false)
		return nil, err
	}
	if stale {
		var rep Report
		if err := s.withStateLock(ctx, func() error { return s.cleanRunDir(s.runDir, &rep) }); err != nil {
			s.log.Warn("cleaning the run dir a dead forge process with this pid left", "dir", s.runDir, "err", err)
		}
		if err := s.makeDirs(); err != nil {
			s.store.Shutdown(false)
			return nil, err
		}
		s.log.Info("cleaned the run dir a dead forge process with this pid left", "dir", s.runDir, "unmounted", len(rep.Unmounted))
	}
	s.traverseErr = searchableByOthers(filepath.Join(s.runDir, "rootfs"))
	if _, err := s.GC(ctx); err != nil {
		s.log.Warn("recovering state of crashed forge processes", "err", err)
	}
	return s, nil
}

// makeDirs creates the state layout. Directories on the way to the shared
// mounts are 0711: the sandbox's root (an unprivileged host uid) must be
// able to traverse them, but not list them.
// StorageDir is where the store keeps images and layers (StateDir/storage).
func (s *Store) StorageDir() string { return filepath.Join(s.stateDir, "storage") }

// TempDir is this process's temp dir for blobs and layer diffs.
func (s *Store) TempDir() string { return s.tmpDir }

func (s *Store) makeDirs() error {
	for _, d := range []string{s.stateDir, filepath.Dir(s.runDir), s.runDir, filepath.Join(s.runDir, "rootfs"),
		filepath.Join(s.runDir, "images"), s.tmpDir, filepath.Join(s.stateDir, "cache")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	owner, err := ownerID(os.Getpid())
	if err != nil {
		return err
	}
	for _, d := range []string{s.runDir, s.tmpDir} {
		if err := os.WriteFile(filepath.Join(d, "owner"), []byte(owner+"\n"), 0o644); err != nil {
			return err
		}
	}
	return makeSkeleton(s.skelDir)
}

// makeSkeleton creates the lowest-priority-free top layer of every shared
// rootfs: the empty mount-point directories, and the links every image
// gets (skelLinks).
func makeSkeleton(dir string) error {
	for _, d := range mountPoints {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for name, target := range skelLinks {
		p := filepath.Join(dir, name)
		if t, err := os.Readlink(p); err == nil && t == target {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		os.Remove(p) // a stale link; a directory stays and fails below
		if err := os.Symlink(target, p); err != nil {
			return err
		}
	}
	return os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky)
}

// skelLinks are symlinks in every shared rootfs: /home/user is the
// workspace, where code written for E2B sandboxes keeps its files (the
// E2B face, server/e2b). Build layers are not on the skeleton, so no
// image built by forge carries them.
var skelLinks = map[string]string{"home/user": "/workspace"}

// systemContext keeps every temp file and cache under StateDir. The host's
// registries.conf (mirrors, insecure registries) and auth files are still
// read if present: they describe how this host reaches registries.
func (s *Store) systemContext() *types.SystemContext {
	return &types.SystemContext{
		BigFilesTemporaryDir: s.tmpDir,
		BlobInfoCacheDir:     filepath.Join(s.stateDir, "cache"),
		OSChoice:             "linux",
	}
}

// Close releases every shared mount of this process and shuts the store
// down, once every Open of it has been closed.
func (s *Store) Close() error {
	openStores.mu.Lock()
	s.refs--
	last := s.refs <= 0
	if last && openStores.m[s.stateDir] == s {
		delete(openStores.m, s.stateDir)
	}
	openStores.mu.Unlock()
	if !last {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for id, m := range s.mounts {
		errs = append(errs, s.unmountLocked(m))
		delete(s.mounts, id)
	}
	// Another forge process sharing the state dir may still have layers
	// mounted; never force-unmount them (Shutdown(true) would).
	if _, err := s.store.Shutdown(false); err != nil && !errors.Is(err, storage.ErrLayerUsedByContainer) {
		errs = append(errs, err)
	}
	s.policy.Destroy()
	errs = append(errs, os.RemoveAll(s.runDir), os.RemoveAll(s.tmpDir))
	errs = append(errs, s.pidLock.Close()) // last: run/<pid> is free for the next holder
	return errors.Join(errs...)
}

// Images lists the images in the store.
func (s *Store) Images(ctx context.Context) ([]Image, error) {
	imgs, err := s.store.Images()
	if err != nil {
		return nil, err
	}
	out := make([]Image, 0, len(imgs))
	for i := range imgs {
		if isPlaceholderOnly(imgs[i].Names) {
			continue // an import in progress
		}
		out = append(out, s.describe(&imgs[i]))
	}
	return out, nil
}

// Lookup finds an image by name as typed ("forge/python:3.11",
// "docker://python:3.12-slim", "python:3.12-slim") or by ID or ID prefix.
func (s *Store) Lookup(ctx context.Context, name string) (*Image, error) {
	img, _, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	out := s.describe(img)
	return &out, nil
}

// lookup also returns the name that matched ("" when matched by ID).
func (s *Store) lookup(name string) (*storage.Image, string, error) {
	if name == "" {
		return nil, "", fmt.Errorf("%w: empty name", ErrImageNotFound)
	}
	candidates := []string{name}
	if rest, ok := strings.CutPrefix(name, "docker://"); ok {
		candidates = []string{rest}
	}
	if n := normalizedDockerName(candidates[0]); n != "" && n != candidates[0] {
		candidates = append(candidates, n)
	}
	for _, c := range candidates {
		img, err := s.store.Image(c)
		if err == nil {
			matched := c
			if strings.HasPrefix(img.ID, c) {
				matched = ""
			}
			return img, matched, nil
		}
		if !errors.Is(err, storage.ErrImageUnknown) {
			return nil, "", fmt.Errorf("looking up image %q: %w", name, err)
		}
	}
	return nil, "", fmt.Errorf("%w: %q (see `forge image ls`)", ErrImageNotFound, name)
}

type imageMeta struct {
	labels    map[string]string
	size      int64
	layerSize int64
}

// describe converts a storage image, reading labels from its config once.
func (s *Store) describe(img *storage.Image) Image {
	s.mu.Lock()
	meta, ok := s.labels[img.ID]
	s.mu.Unlock()
	if !ok {
		meta = s.readMeta(img)
		s.mu.Lock()
		s.labels[img.ID] = meta
		s.mu.Unlock()
	}
	var names []string
	for _, n := range img.Names {
		if !isPlaceholder(n) {
			names = append(names, n)
		}
	}
	return Image{
		ID: img.ID, Names: names, Size: meta.size, LayerSize: meta.layerSize, Created: img.Created,
		Digest: img.Digest.String(), Labels: meta.labels,
	}
}

func (s *Store) readMeta(img *storage.Image) imageMeta {
	var meta imageMeta
	if size, err := s.store.ImageSize(img.ID); err == nil {
		meta.size = size
	}
	if img.TopLayer != "" {
		if l, err := s.store.Layer(img.TopLayer); err == nil && l.UncompressedSize > 0 {
			meta.layerSize = l.UncompressedSize
		} else if n, err := s.store.LayerSize(img.TopLayer); err == nil && n > 0 {
			meta.layerSize = n
		}
	}
	blob, err := s.store.ImageBigData(img.ID, storage.ImageDigestBigDataKey)
	if err != nil {
		return meta
	}
	m, err := manifest.FromBlob(blob, manifest.GuessMIMEType(blob))
	if err != nil {
		return meta
	}
	cfg, err := s.store.ImageBigData(img.ID, m.ConfigInfo().Digest.String())
	if err != nil {
		return meta
	}
	var config imgspecv1.Image
	if json.Unmarshal(cfg, &config) == nil {
		meta.labels = config.Config.Labels
	}
	return meta
}

// Placeholder names are put on an image while it is imported, and replaced
// by its real names at the end; they carry the importer's pid for GC.
const placeholderRepo = "localhost/forge-importing"

func newPlaceholder() (reference.NamedTagged, error) {
	nonce := make([]byte, 6)
	rand.Read(nonce)
	named, err := reference.ParseNormalizedNamed(placeholderRepo)
	if err != nil {
		return nil, err
	}
	return reference.WithTag(named, fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(nonce)))
}

func isPlaceholder(name string) bool { return strings.HasPrefix(name, placeholderRepo+":") }

func isPlaceholderOnly(names []string) bool {
	for _, n := range names {
		if !isPlaceholder(n) {
			return false
		}
	}
	return len(names) > 0
}

// placeholderPid is the importer's pid of a placeholder name, or 0.
func placeholderPid(name string) int {
	tag, ok := strings.CutPrefix(name, placeholderRepo+":")
	if !ok {
		return 0
	}
	pid, _ := strconv.Atoi(strings.SplitN(tag, "-", 2)[0])
	return pid
}

// Remove deletes the image ref names. If ref is one of several names of the
// image, only that name is removed. It fails with ErrImageInUse while a
// shared rootfs of the image is held by this or another live forge process.
func (s *Store) Remove(ctx context.Context, ref string) error {
	img, matched, err := s.lookup(ref)
	if err != nil {
		return err
	}
	if matched != "" && len(img.Names) > 1 {
		return s.store.RemoveNames(img.ID, []string{matched})
	}
	return s.withStateLock(ctx, func() error {
		if users := s.usersOf(img.ID); len(users) > 0 {
			name := img.ID[:12]
			if len(img.Names) > 0 {
				name = img.Names[0]
			}
			return &InUseError{Image: name, Users: users}
		}
		if _, err := s.store.DeleteImage(img.ID, true); err != nil {
			return fmt.Errorf("removing image %s: %w", img.ID, err)
		}
		s.mu.Lock()
		delete(s.labels, img.ID)
		s.mu.Unlock()
		s.log.Debug("image removed", "id", img.ID, "names", img.Names)
		return nil
	})
}

// usersOf describes who holds a shared rootfs of image id: this process,
// and other live forge processes sharing the state dir.
func (s *Store) usersOf(id string) []string {
	var users []string
	s.mu.Lock()
	if m := s.mounts[id]; m != nil && m.refs > 0 {
		users = append(users, fmt.Sprintf("this forge process (pid %d, %d holder(s))", os.Getpid(), m.refs))
	}
	s.mu.Unlock()
	for _, o := range s.otherOwners() {
		if !o.alive {
			continue
		}
		if _, err := os.Lstat(filepath.Join(o.dir, "rootfs", id)); err == nil {
			users = append(users, fmt.Sprintf("forge process pid %d", o.pid))
		}
	}
	return users
}
