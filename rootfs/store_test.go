package rootfs

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testutil"
	"go.podman.io/image/v5/copy"
	dockerarchive "go.podman.io/image/v5/docker/archive"
	"go.podman.io/storage/pkg/reexec"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(holdRootFS(dir, os.Getenv(helperImageEnv)))
	}
	os.Exit(m.Run())
}

// newStateDir is a t.TempDir whose parent the sandbox's root may traverse.
func newStateDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func openStore(t testing.TB, stateDir string) *Store {
	t.Helper()
	testutil.RequiresRoot(t)
	s, err := Open(context.Background(), Options{StateDir: stateDir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoMounts(t, stateDir)
	})
	return s
}

func assertNoMounts(t testing.TB, dir string) {
	t.Helper()
	mps, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(mps) > 0 {
		t.Errorf("mounts left under %s: %v", dir, mps)
	}
}

// assertNoImageMounts checks that no layer is mounted (the store's home
// itself stays a mount while it is open).
func assertNoImageMounts(t testing.TB, s *Store) {
	t.Helper()
	mps, _ := mountsUnder(filepath.Join(s.stateDir, "storage"))
	for _, mp := range mps {
		if mp != filepath.Join(s.stateDir, "storage", "overlay") {
			t.Errorf("layer still mounted: %s", mp)
		}
	}
	layers, _ := s.store.Layers()
	for _, l := range layers {
		if l.MountCount != 0 {
			t.Errorf("layer %s has mount count %d", l.ID, l.MountCount)
		}
	}
}

// writeTestLayout writes a one-layer image with a few files, a symlink, a
// hardlink and a file owned by uid 1000 as an OCI layout.
func writeTestLayout(t testing.TB, refName, content string) string {
	t.Helper()
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "etc/hello.txt"), content)
	mustWrite(t, filepath.Join(root, "usr/bin/tool"), "#!/bin/sh\necho tool\n")
	if err := os.Chmod(filepath.Join(root, "usr/bin/tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tool", filepath.Join(root, "usr/bin/tool-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool-hard")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, "home/forge/owned"), "x")
	if err := os.Chown(filepath.Join(root, "home/forge/owned"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "layout")
	err := WriteLayout(context.Background(), dst, root, LayoutConfig{
		RefName: refName, Env: []string{"PATH=/usr/bin"}, Labels: map[string]string{"forge.test": "yes"},
	})
	if err != nil {
		t.Fatalf("WriteLayout: %v", err)
	}
	return dst
}

func mustWrite(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestImportAcquireRead(t *testing.T) {
	testutil.RequiresRoot(t)
	varTmp, varLib := listDir(t, "/var/tmp"), listDir(t, "/var/lib/containers")
	layout := writeTestLayout(t, "forge/test:1", "hello\n")
	s := openStore(t, newStateDir(t))
	ctx := context.Background()

	img, err := s.Pull(ctx, "oci:"+layout)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if got, want := strings.Join(img.Names, ","), "forge/test:1"; got != want {
		t.Errorf("names: got %v, want %v", got, want)
	}
	if img.Labels["forge.test"] != "yes" || img.Size <= 0 || img.Digest == "" {
		t.Errorf("image metadata: got %+v", img)
	}
	imgs, err := s.Images(ctx)
	if err != nil || len(imgs) != 1 || imgs[0].ID != img.ID {
		t.Fatalf("Images: got %+v, %v; want just %s", imgs, err, img.ID)
	}
	for _, name := range []string{"forge/test:1", img.ID, img.ID[:12]} {
		if got, err := s.Lookup(ctx, name); err != nil || got.ID != img.ID {
			t.Errorf("Lookup(%q): got %v, %v; want %s", name, got, err, img.ID)
		}
	}
	if _, err := s.Lookup(ctx, "forge/nope:1"); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("Lookup of a missing image: got %v, want ErrImageNotFound", err)
	}

	r, err := s.Acquire(ctx, "forge/test:1")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(r.Path(), "etc/hello.txt"))
	if err != nil || string(data) != "hello\n" {
		t.Errorf("reading etc/hello.txt: got %q, %v", data, err)
	}
	for _, d := range mountPoints {
		if fi, err := os.Stat(filepath.Join(r.Path(), d)); err != nil || !fi.IsDir() {
			t.Errorf("mount point /%s: %v", d, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(r.Path(), "usr/bin/tool-link")); err != nil || target != "tool" {
		t.Errorf("symlink: got %q, %v", target, err)
	}
	var a, b unix.Stat_t
	unix.Stat(filepath.Join(r.Path(), "usr/bin/tool"), &a)
	unix.Stat(filepath.Join(r.Path(), "usr/bin/tool-hard"), &b)
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hardlink: inodes %d/%d nlink %d, want one inode with 2 links", a.Ino, b.Ino, a.Nlink)
	}
	if unix.Stat(filepath.Join(r.Path(), "home/forge/owned"), &a); a.Uid != 1000 || a.Gid != 1000 {
		t.Errorf("ownership: got %d:%d, want 1000:1000", a.Uid, a.Gid)
	}
	if err := os.WriteFile(filepath.Join(r.Path(), "etc/new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("writing into the shared rootfs: got %v, want EROFS", err)
	}

	// A second holder shares the mount; the last release unmounts.
	r2, err := s.Acquire(ctx, img.ID[:12])
	if err != nil || r2.Path() != r.Path() {
		t.Fatalf("second Acquire: got %v, %v; want the same path %s", r2, err, r.Path())
	}
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r2.Path(), "etc/hello.txt")); err != nil {
		t.Errorf("after one of two releases: %v", err)
	}
	// Retain is a holder of its own: the mount outlasts the one it came from.
	r3 := r2.Retain()
	if r3 == nil || r3.Path() != r2.Path() {
		t.Fatalf("Retain: got %v, want a holder of %s", r3, r2.Path())
	}
	if err := r2.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r3.Path(), "etc/hello.txt")); err != nil {
		t.Errorf("a retained holder after its origin's release: %v", err)
	}
	if err := r3.Release(); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountsUnder(filepath.Join(s.stateDir, "run")); len(mps) != 0 {
		t.Errorf("after the last release: mounts left %v", mps)
	}
	if r4 := r3.Retain(); r4 != nil {
		t.Errorf("Retain of a holder whose mount is gone: %v, want nil", r4)
	}

	if got := listDir(t, "/var/tmp"); got != varTmp {
		t.Errorf("/var/tmp changed: before %q, after %q", varTmp, got)
	}
	if got := listDir(t, "/var/lib/containers"); got != varLib {
		t.Errorf("/var/lib/containers changed: before %q, after %q", varLib, got)
	}
}

func listDir(t testing.TB, dir string) string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

func TestImportTwiceIsNoop(t *testing.T) {
	layout := writeTestLayout(t, "forge/test:1", "hello\n")
	s := openStore(t, newStateDir(t))
	ctx := context.Background()
	first, err := s.Pull(ctx, "oci:"+layout)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := s.store.Layers()
	start := time.Now()
	second, err := s.Pull(ctx, "oci:"+layout+":forge/test:1")
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID != first.ID {
		t.Errorf("ID: got %s, want %s", second.ID, first.ID)
	}
	if elapsed > 200*time.Millisecond {
		t.Errorf("second import took %v, want a no-op of a few ms", elapsed)
	}
	if again, _ := s.store.Layers(); len(again) != len(layers) {
		t.Errorf("layers: got %d, want %d", len(again), len(layers))
	}
	t.Logf("import of a present image: %v", elapsed)

	// A tag the layout does not have.
	if _, err := s.Pull(ctx, "oci:"+layout+":forge/alias:2"); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("import of a missing tag: got %v, want ErrImageNotFound", err)
	}
	// An image with a second name (e.g. the same archive imported under
	// another tag).
	if err := s.addNames(first.ID, []string{"forge/alias:2"}); err != nil {
		t.Fatal(err)
	}
	// Removing one of two names only untags.
	if err := s.Remove(ctx, "forge/alias:2"); err != nil {
		t.Fatal(err)
	}
	if img, err := s.Lookup(ctx, "forge/test:1"); err != nil || len(img.Names) != 1 {
		t.Errorf("after untag: got %+v, %v", img, err)
	}
}

func TestCorruptArchive(t *testing.T) {
	layout := writeTestLayout(t, "forge/test:1", strings.Repeat("0123456789", 100000))
	s := openStore(t, newStateDir(t))
	ctx := context.Background()

	truncatedBlob := copyDir(t, layout)
	blob := largestFile(t, filepath.Join(truncatedBlob, "blobs/sha256"))
	truncate(t, blob)

	archive := filepath.Join(t.TempDir(), "image.tar")
	tarDir(t, layout, archive)
	truncatedArchive := filepath.Join(t.TempDir(), "truncated.tar")
	copyFile(t, archive, truncatedArchive)
	truncate(t, truncatedArchive)

	for _, ref := range []string{"oci:" + truncatedBlob, "oci-archive:" + truncatedArchive} {
		_, err := s.Pull(ctx, ref)
		if !errors.Is(err, ErrCorruptArchive) {
			t.Errorf("Pull(%s): got %v, want ErrCorruptArchive", ref, err)
		} else {
			t.Logf("Pull(%s): %v", ref, err)
		}
		if imgs, _ := s.Images(ctx); len(imgs) != 0 {
			t.Errorf("images left after a failed import: %+v", imgs)
		}
		if all, _ := s.store.Images(); len(all) != 0 {
			t.Errorf("storage images left after a failed import: %+v", all)
		}
		if layers, _ := s.store.Layers(); len(layers) != 0 {
			t.Errorf("layers left after a failed import: %d", len(layers))
		}
	}
	// The intact archive still imports.
	if img, err := s.Pull(ctx, "oci-archive:"+archive); err != nil || img.Names[0] != "forge/test:1" {
		t.Errorf("Pull of the intact archive: got %+v, %v", img, err)
	}
	if _, err := s.Pull(ctx, "oci-archive:/nonexistent.tar"); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("Pull of a missing archive: got %v, want ErrImageNotFound", err)
	}
}

func copyDir(t testing.TB, src string) string {
	dst := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	return dst
}

func copyFile(t testing.TB, src, dst string) {
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func largestFile(t testing.TB, dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var best string
	var size int64 = -1
	for _, e := range entries {
		fi, _ := e.Info()
		if fi.Size() > size {
			best, size = filepath.Join(dir, e.Name()), fi.Size()
		}
	}
	return best
}

func truncate(t testing.TB, path string) {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// tarDir writes dir as an uncompressed tar (an oci-archive of a layout).
func tarDir(t testing.TB, dir, dst string) {
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = rel
		if err := tw.WriteHeader(hdr); err != nil || !fi.Mode().IsRegular() {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBaseImage(t *testing.T) {
	layout := testutil.BaseImageLayout(t, DefaultImage)
	s := openStore(t, newStateDir(t))
	ctx := context.Background()
	// Bootstrap reuses the cached layout and imports it as
	// oci:LAYOUT:forge/python:3.11.
	start := time.Now()
	img, err := s.Bootstrap(ctx, BootstrapOptions{CacheDir: filepath.Dir(filepath.Dir(layout))})
	if err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	t.Logf("Bootstrap from the cached layout (cold import): %v", time.Since(start))
	if len(img.Names) != 1 || img.Names[0] != DefaultImage {
		t.Errorf("names: got %v, want [%s]", img.Names, DefaultImage)
	}
	start = time.Now()
	again, err := s.Pull(ctx, "oci:"+layout) // named by the layout's ref.name
	if err != nil || again.ID != img.ID {
		t.Fatalf("Pull of the present image: got %+v, %v", again, err)
	}
	t.Logf("import of the present image: %v", time.Since(start))
	if img.Labels["forge.python.version"] != "3.11" {
		t.Errorf("labels: got %v", img.Labels)
	}
	r, err := s.Acquire(ctx, DefaultImage)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer r.Release()
	for _, p := range []string{"usr/bin/python3", "workspace", "opt/forge/agent", "run/forge"} {
		if _, err := os.Stat(filepath.Join(r.Path(), p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	// The sandbox's root (host uid 100000) must be able to reach the tree.
	out, err := exec.Command("setpriv", "--reuid=100000", "--regid=100000", "--clear-groups",
		"ls", filepath.Join(r.Path(), "usr/bin/python3")).CombinedOutput()
	if err != nil {
		t.Errorf("uid 100000 cannot reach the rootfs: %v: %s", err, out)
	}
	out, err = exec.Command("chroot", "--userspec=1000:1000", r.Path(), "/usr/bin/python3", "-c", "import json; print(1+1)").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "2" {
		t.Errorf("python3 in the rootfs: got %q, %v", out, err)
	}
	passwd, _ := os.ReadFile(filepath.Join(r.Path(), "etc/passwd"))
	if !strings.Contains(string(passwd), ":1000:1000:") {
		t.Errorf("no uid 1000 in /etc/passwd")
	}
}

// TestDataImage checks the data image's packages import in its rootfs.
func TestDataImage(t *testing.T) {
	if testing.Short() {
		t.Skip("imports a 350 MB image")
	}
	layout := testutil.BaseImageLayout(t, DefaultDataImage)
	s := openStore(t, newStateDir(t))
	ctx := context.Background()
	start := time.Now()
	if _, err := s.Pull(ctx, "oci:"+layout); err != nil {
		t.Fatalf("Pull: %v", err)
	}
	t.Logf("cold import of %s: %v", DefaultDataImage, time.Since(start))
	r, err := s.Acquire(ctx, DefaultDataImage)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	// matplotlib needs a writable /tmp, a tmpfs in every sandbox: mount one
	// in a private mount namespace.
	script := `mount -t tmpfs tmpfs "$0/tmp" && exec chroot --userspec=1000:1000 "$0" /usr/bin/python3 -c "$1"`
	out, err := exec.Command("unshare", "-m", "sh", "-c", script, r.Path(),
		"import numpy, pandas, matplotlib; print(numpy.arange(3).sum())").CombinedOutput()
	if lines := strings.Fields(string(out)); err != nil || len(lines) == 0 || lines[len(lines)-1] != "3" {
		t.Errorf("python3 with numpy, pandas, matplotlib: got %q, %v", out, err)
	}
}

// TestDockerArchiveNames imports a docker-archive whose repo tag names the
// image as a registry image, found then by docker:// and bare names.
func TestDockerArchiveNames(t *testing.T) {
	layout := writeTestLayout(t, "forge/test:1", "hello\n")
	s := openStore(t, newStateDir(t))
	ctx := context.Background()
	archive := filepath.Join(t.TempDir(), "img.tar")
	src, _ := ParseReference("oci:" + layout)
	dst, err := dockerarchive.ParseReference(archive + ":python:3.12-slim")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := copy.Image(ctx, s.policy, dst, src, &copy.Options{SourceCtx: s.sys, DestinationCtx: s.sys}); err != nil {
		t.Fatalf("writing a docker archive: %v", err)
	}
	img, err := s.Pull(ctx, "docker-archive:"+archive)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if want := "docker.io/library/python:3.12-slim"; len(img.Names) != 1 || img.Names[0] != want {
		t.Errorf("names: got %v, want [%s]", img.Names, want)
	}
	for _, name := range []string{"docker://python:3.12-slim", "python:3.12-slim", "docker.io/library/python:3.12-slim"} {
		if got, err := s.Lookup(ctx, name); err != nil || got.ID != img.ID {
			t.Errorf("Lookup(%q): got %v, %v", name, got, err)
		}
	}
	// Present under that name: docker:// does not go to the network.
	if got, err := s.Pull(ctx, "docker://python:3.12-slim"); err != nil || got.ID != img.ID {
		t.Errorf("Pull of a present docker:// name: got %v, %v", got, err)
	}
}

func TestRemoveInUse(t *testing.T) {
	layout := writeTestLayout(t, "forge/test:1", "hello\n")
	s := openStore(t, newStateDir(t))
	ctx := context.Background()
	if _, err := s.Pull(ctx, "oci:"+layout); err != nil {
		t.Fatal(err)
	}
	r, err := s.Acquire(ctx, "forge/test:1")
	if err != nil {
		t.Fatal(err)
	}
	err = s.Remove(ctx, "forge/test:1")
	if !errors.Is(err, ErrImageInUse) || !strings.Contains(err.Error(), "this forge process") {
		t.Fatalf("Remove while acquired: got %v, want ErrImageInUse naming this process", err)
	}
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "forge/test:1"); err != nil {
		t.Fatalf("Remove after release: %v", err)
	}
	if imgs, _ := s.Images(ctx); len(imgs) != 0 {
		t.Errorf("images after Remove: %+v", imgs)
	}
	if err := s.Remove(ctx, "forge/test:1"); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("Remove of a removed image: got %v, want ErrImageNotFound", err)
	}
}

const (
	helperEnv      = "FORGE_ROOTFS_TEST_HOLD_STATE_DIR"
	helperImageEnv = "FORGE_ROOTFS_TEST_HOLD_IMAGE"
)

// holdRootFS is the helper process: it opens the store, acquires image,
// says "ready" and waits to be killed.
func holdRootFS(stateDir, image string) int {
	s, err := Open(context.Background(), Options{StateDir: stateDir})
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		return 1
	}
	r, err := s.Acquire(context.Background(), image)
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		return 1
	}
	os.Stdout.WriteString("ready " + r.Path() + "\n")
	select {}
}

// TestCrashRecovery: another forge process holds a shared rootfs (Remove
// refuses), is killed with SIGKILL, and the next Open repairs its mounts.
func TestCrashRecovery(t *testing.T) {
	layout := writeTestLayout(t, "forge/test:1", "hello\n")
	stateDir := newStateDir(t)
	s := openStore(t, stateDir)
	ctx := context.Background()
	if _, err := s.Pull(ctx, "oci:"+layout); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+stateDir, helperImageEnv+"=forge/test:1")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make([]byte, 4096)
	n, _ := stdout.Read(line)
	if !strings.HasPrefix(string(line[:n]), "ready ") {
		t.Fatalf("helper: %q", line[:n])
	}
	helperPath := strings.TrimSpace(strings.TrimPrefix(string(line[:n]), "ready "))

	err := s.Remove(ctx, "forge/test:1")
	if !errors.Is(err, ErrImageInUse) || !strings.Contains(err.Error(), "pid") {
		t.Errorf("Remove while another process holds it: got %v, want ErrImageInUse naming the pid", err)
	}
	t.Logf("Remove: %v", err)

	cmd.Process.Signal(unix.SIGKILL)
	cmd.Wait()
	if mps, _ := mountsUnder(stateDir); len(mps) == 0 {
		t.Fatalf("the killed helper left no mounts; the test would prove nothing")
	}

	// A fresh process would Open; here the store is already open in this
	// process (containers/storage shares it), so run the same recovery.
	rep, err := s.GC(ctx)
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	t.Logf("GC: %+v", rep)
	if len(rep.DeadProcesses) != 1 || rep.ImageMounts != 1 {
		t.Errorf("report: got %+v, want one dead process and one image mount given back", rep)
	}
	assertNoMounts(t, filepath.Join(stateDir, "run"))
	assertNoImageMounts(t, s)
	if _, err := os.Stat(filepath.Dir(filepath.Dir(helperPath))); !os.IsNotExist(err) {
		t.Errorf("run dir of the dead process: %v, want it gone", err)
	}
	if err := s.Remove(ctx, "forge/test:1"); err != nil {
		t.Errorf("Remove after recovery: %v", err)
	}
}

// TestOpenRecovers closes the store after a crash and opens it again.
func TestOpenRecovers(t *testing.T) {
	testutil.RequiresRoot(t)
	layout := writeTestLayout(t, "forge/test:1", "hello\n")
	stateDir := newStateDir(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(ctx, "oci:"+layout); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+stateDir, helperImageEnv+"=forge/test:1")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 4096)
	n, _ := stdout.Read(line)
	if !strings.HasPrefix(string(line[:n]), "ready ") {
		t.Fatalf("helper: %q", line[:n])
	}
	cmd.Process.Signal(unix.SIGKILL)
	cmd.Wait()
	s = openStore(t, stateDir) // repairs
	assertNoMounts(t, filepath.Join(stateDir, "run"))
	assertNoImageMounts(t, s)
	entries, _ := os.ReadDir(filepath.Join(stateDir, "run"))
	for _, e := range entries {
		if e.Name() == itoa(cmd.Process.Pid) {
			t.Errorf("run dir of the killed process left behind")
		}
	}
	if err := s.Remove(ctx, "forge/test:1"); err != nil {
		t.Errorf("Remove after recovery: %v", err)
	}
	if layers, _ := s.store.Layers(); len(layers) != 0 {
		t.Errorf("layers after Remove: %d", len(layers))
	}
}

func TestDockerOffline(t *testing.T) {
	s := openStore(t, newStateDir(t))
	start := time.Now()
	_, err := s.Pull(context.Background(), "docker://python:3.12-slim")
	elapsed := time.Since(start)
	if !errors.Is(err, ErrRegistryUnreachable) {
		t.Skipf("registry reachable or other failure (%v); this test needs an offline host", err)
	}
	if elapsed > 15*time.Second {
		t.Errorf("took %v, want < 15 s", elapsed)
	}
	if !strings.Contains(err.Error(), "forge image import") || !strings.Contains(err.Error(), "docker.io") {
		t.Errorf("message does not help: %v", err)
	}
	t.Logf("%v after %v", err, elapsed)
}
