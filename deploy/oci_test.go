package deploy

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
)

func readBlob(t *testing.T, layout string, d imgspecv1.Descriptor, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", d.Digest.Encoded()))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

// TestOCIImage builds forge's own image with make oci's script, checks its
// configuration, unpacks it and runs forge from it (pivot_root in a private
// mount namespace, as a container runtime would; pivot_root, not chroot:
// the kernel refuses user namespaces to a chrooted process): forge must find its
// libraries, import the base image it ships into an empty state dir, and
// run code in a sandbox.
func TestOCIImage(t *testing.T) {
	requireRoot(t)
	bin := forgeBin(t)
	out := filepath.Join(t.TempDir(), "forge")
	build := exec.Command("bash", "../scripts/oci.sh")
	build.Env = append(os.Environ(), "OCI_OUT="+out, "FORGE_BIN="+bin)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/oci.sh: %v\n%s", err, b)
	}
	var index imgspecv1.Index
	data, err := os.ReadFile(filepath.Join(out, "index.json"))
	if err != nil || json.Unmarshal(data, &index) != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, data)
	}
	if ref := index.Manifests[0].Annotations[imgspecv1.AnnotationRefName]; !strings.HasPrefix(ref, "localhost/forge:") {
		t.Errorf("ref.name %q", ref)
	}
	var manifest imgspecv1.Manifest
	readBlob(t, out, index.Manifests[0], &manifest)
	var config imgspecv1.Image
	readBlob(t, out, manifest.Config, &config)
	c := config.Config
	must(t, c.Labels["io.modelcontextprotocol.server.name"] == "io.github.mcp-forge/forge", "labels %v", c.Labels)
	must(t, slices.Equal(c.Entrypoint, []string{"/usr/bin/forge"}), "entrypoint %v", c.Entrypoint)
	must(t, len(c.Cmd) > 0 && c.Cmd[0] == "serve", "cmd %v", c.Cmd)
	if len(manifest.Layers) != 1 {
		t.Fatalf("%d layers", len(manifest.Layers))
	}

	root := filepath.Join(t.TempDir(), "rootfs")
	unpack(t, filepath.Join(out, "blobs", "sha256", manifest.Layers[0].Digest.Encoded()), root)
	for _, p := range []string{"usr/bin/forge", "etc/ssl/certs/ca-certificates.crt", "usr/share/forge/images/forge_python_3.11/index.json"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("image lacks /%s", p)
		}
	}
	// Run it. Its own uid range, so its sandboxes never share host ids
	// with the other tests' (their leases live in another state dir).
	script := `set -e
PATH=/usr/sbin:/usr/bin:/sbin:/bin
R=$1; shift
mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs tmpfs "$R/tmp"
mkdir -p "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
exec "$@"`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script, "sh", root,
		"/usr/bin/forge", "run", "--json", "import sys, ssl; print(sys.version_info[:2]); 6 * 7")
	cmd.Env = append(slices.Clone(c.Env), "FORGE_SECURITY_UID_RANGE_START=1610612736", "FORGE_SECURITY_UID_RANGE_SIZE=16777216",
		"FORGE_RUN_WARM=0") // one-shot: no warm runner left in the throw-away root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("forge run inside its own image: %v\n%s\n%s", err, stdout, stderr.String())
	}
	var res struct {
		Success bool   `json:"success"`
		Stdout  string `json:"stdout"`
		Result  any    `json:"result"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil || !res.Success || res.Stdout != "(3, 11)\n" {
		t.Fatalf("forge run inside its image: %s (%v)\n%s", stdout, err, stderr.String())
	}
}

// unpack extracts a gzip'd layer tar (regular files, dirs, symlinks, hard
// links) under dst.
func unpack(t *testing.T, blob, dst string) {
	t.Helper()
	f, err := os.Open(blob)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dst, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, os.FileMode(h.Mode)&os.ModePerm|os.FileMode(h.Mode)&os.ModeSticky)
			if err == nil {
				err = os.Chmod(name, h.FileInfo().Mode())
			}
		case tar.TypeReg:
			os.MkdirAll(filepath.Dir(name), 0o755)
			var w *os.File
			if w, err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, h.FileInfo().Mode()); err == nil {
				_, err = io.Copy(w, tr)
				w.Close()
			}
		case tar.TypeSymlink:
			os.MkdirAll(filepath.Dir(name), 0o755)
			err = os.Symlink(h.Linkname, name)
		case tar.TypeLink:
			err = os.Link(filepath.Join(dst, filepath.Clean("/"+h.Linkname)), name)
		}
		if err != nil {
			t.Fatalf("unpacking %s: %v", h.Name, err)
		}
		if err := os.Lchown(name, h.Uid, h.Gid); err != nil {
			t.Fatal(err)
		}
	}
}
