package build_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

var local = engine.LocalPrincipal

// uniqueName is an environment name no earlier run of the tests used (the
// test store is shared and kept).
func uniqueName(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func makeWheel(t *testing.T, dir, dist, version, value string) {
	testenv.MakeWheel(t, dir, dist, version, value)
}

// offlineEngine is an engine whose builds install only from a wheelhouse
// holding forgetestpkg 1.0 (VALUE = value).
func offlineEngine(t *testing.T, value string, mutate func(*profiles.EnvironmentBuilderConfig)) *engine.Engine {
	wheels := t.TempDir()
	makeWheel(t, wheels, "forgetestpkg", "1.0", value)
	return testenv.Engine(t, false, func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.Offline, b.Wheelhouse, b.AllowedPackages = true, true, wheels, []string{"*"}
		if mutate != nil {
			mutate(b)
		}
	})
}

// hostCABundle is the host's CA bundle when it has one: this machine
// reaches PyPI through a TLS-inspecting proxy whose CA only the host's
// bundle holds (environment_builder.ca_bundle is for exactly that).
func hostCABundle() string {
	const p = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// removeEnv removes the environment when the test ends, once the
// sandboxes of its runs (destroyed in the background) let go of it.
func removeEnv(t *testing.T, eng *engine.Engine, name string) {
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := eng.RemoveEnvironment(context.Background(), local, name)
			switch {
			case err == nil, errors.Is(err, build.ErrNotFound):
				return
			case errors.Is(err, build.ErrInUse) && time.Now().Before(deadline):
				time.Sleep(20 * time.Millisecond) // polling for the background destroys, with a deadline
			default:
				t.Errorf("removing environment %s: %v", name, err)
				return
			}
		}
	})
}

func TestBuildOfflineWheelhouse(t *testing.T) {
	ctx := context.Background()
	value := uniqueName("v")
	eng := offlineEngine(t, value, nil)
	name := uniqueName("t-wheel")
	removeEnv(t, eng, name)
	var steps []string
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"ForgeTestPkg==1.0"},
		Progress: func(step, total int, msg string) { steps = append(steps, msg) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cached {
		t.Errorf("first build reported a cache hit")
	}
	if res.Image != "forge/custom:"+name {
		t.Errorf("image %q, want forge/custom:%s", res.Image, name)
	}
	if len(res.Installed) != 1 || res.Installed[0].Name != "forgetestpkg" || res.Installed[0].Version != "1.0" {
		t.Errorf("installed %+v, want forgetestpkg 1.0", res.Installed)
	}
	if len(res.Requested) != 1 || res.Requested[0] != "forgetestpkg==1.0" {
		t.Errorf("requested %v, want the normalized spec", res.Requested)
	}
	if len(steps) < 3 {
		t.Errorf("progress steps %q, want each step", steps)
	}
	img, err := eng.Store().Lookup(ctx, res.Image)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := eng.Store().Lookup(ctx, testenv.BaseImage)
	for k, want := range map[string]string{build.LabelHash: res.Hash, build.LabelBaseDigest: base.Digest, build.LabelOwner: "local",
		build.LabelRequested: `["forgetestpkg==1.0"]`, build.LabelInstalled: `[{"name":"forgetestpkg","version":"1.0"}]`} {
		if got := img.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if img.Labels[build.LabelBuilt] == "" {
		t.Errorf("no %s label", build.LabelBuilt)
	}

	code := "import forgetestpkg, sys\nprint(forgetestpkg.VALUE)"
	for _, tc := range []struct {
		how string
		req engine.Request
	}{
		{"stateless by name", engine.Request{Principal: local, Code: code, Image: name}},
		{"stateless by image", engine.Request{Principal: local, Code: code, Image: res.Image}},
		{"session", engine.Request{Principal: local, Code: code, Image: name, NewSession: true}},
	} {
		out, err := eng.Execute(ctx, tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.how, err)
		}
		if !out.Success || strings.TrimSpace(out.Stdout) != value {
			t.Errorf("%s: got %+v, want stdout %q", tc.how, out, value)
		}
		if out.SessionID != nil {
			eng.DestroySession(ctx, local, *out.SessionID)
		}
	}
	// The base image is untouched.
	out, err := eng.Execute(ctx, engine.Request{Principal: local, Code: "import forgetestpkg"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Success {
		t.Errorf("the base image imports the package too")
	}

	again, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg == 1.0"}})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cached || again.ID != res.ID {
		t.Errorf("second build: cached %v id %s, want a cache hit of %s", again.Cached, again.ID, res.ID)
	}
	if n, err := eng.Store().ScratchCount(); err != nil || n != 0 {
		t.Errorf("scratch containers left: %d (%v)", n, err)
	}
}

// TestBuildFromPyPI installs a small pure-Python package from the real
// index, through the egress proxy, and imports it in a run and a session.
func TestBuildFromPyPI(t *testing.T) {
	ctx := context.Background()
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.AllowedPackages, b.CABundle = true, []string{"*"}, hostCABundle()
	})
	name := uniqueName("t-pypi")
	removeEnv(t, eng, name)
	// A build per run: the description is not hashed, so vary the base?
	// No: the hash of the same specs is the same, a cache hit; remove any
	// earlier run's environment with this spec first by using a pin that
	// no other test uses.
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"six==1.16.0"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Installed) != 1 || res.Installed[0].Name != "six" || res.Installed[0].Version != "1.16.0" {
		t.Errorf("installed %+v, want six 1.16.0", res.Installed)
	}
	if res.Installer != "uv" {
		t.Errorf("installer %q, want uv", res.Installer)
	}
	code := "import six\nprint(six.__version__)"
	for _, sess := range []bool{false, true} {
		out, err := eng.Execute(ctx, engine.Request{Principal: local, Code: code, Image: name, NewSession: sess})
		if err != nil {
			t.Fatal(err)
		}
		if !out.Success || strings.TrimSpace(out.Stdout) != "1.16.0" {
			t.Errorf("session %v: got %+v", sess, out)
		}
		if out.SessionID != nil {
			eng.DestroySession(ctx, local, *out.SessionID)
		}
	}
}

// pyPIConfig configures builds from the real index through the egress
// proxy, with installer as environment_builder.installer.
func pyPIConfig(installer string) func(*profiles.Config) {
	return func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.AllowedPackages, b.CABundle, b.Installer = true, []string{"*"}, hostCABundle(), installer
	}
}

// pipBaseName is an environment of pip, built with uv from the real index
// and kept: its content hash does not change between runs, so a rerun on
// the same store is a cache hit (a fresh store, as in CI, builds it).
const pipBaseName = "t-pip-base"

// TestBuildWithPip is the pip fallback, for real: uv installs pip from the
// real index into an environment; a build on that environment with
// environment_builder.installer pip installs a small pure-Python package
// with the base's own python3 -m pip, from the real index through the same
// egress proxy (the build sandbox has no other network).
func TestBuildWithPip(t *testing.T) {
	ctx := context.Background()
	uvEng := testenv.Engine(t, false, pyPIConfig("auto"))
	if got := uvEng.Builder().Installer(); got != "uv" {
		t.Fatalf("installer auto with uv on PATH is %q, want uv", got)
	}
	base, err := uvEng.BuildEnvironment(ctx, local, build.Request{Name: pipBaseName, Packages: []string{"pip==24.3.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if base.Installer != "uv" || !slices.Contains(base.Installed, build.Package{Name: "pip", Version: "24.3.1"}) {
		t.Fatalf("pip base: installer %q installed %+v, want pip 24.3.1 by uv", base.Installer, base.Installed)
	}
	if err := uvEng.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	eng := testenv.Engine(t, false, pyPIConfig("pip"))
	if got := eng.Builder().Installer(); got != "pip" {
		t.Fatalf("installer pip: Installer() = %q", got)
	}
	// A base without pip is refused before anything starts, naming the
	// setting.
	_, err = eng.BuildEnvironment(ctx, local, build.Request{Name: uniqueName("t-nopip"), Packages: []string{"six==1.17.0"}})
	if !errors.Is(err, build.ErrInvalid) || !strings.Contains(err.Error(), "has no pip") ||
		!strings.Contains(err.Error(), "environment_builder.installer") || !strings.Contains(err.Error(), testenv.BaseImage) {
		t.Errorf("pip build on %s: %v, want ErrInvalid naming the image and environment_builder.installer", testenv.BaseImage, err)
	}
	nothingLeft(t, eng)

	name := uniqueName("t-pip")
	removeEnv(t, eng, name)
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"six==1.17.0"}, BaseImage: base.Image})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cached || res.Installer != "pip" {
		t.Errorf("cached %v installer %q, want a new build by pip", res.Cached, res.Installer)
	}
	for _, want := range []build.Package{{Name: "six", Version: "1.17.0"}, {Name: "pip", Version: "24.3.1"}} {
		if !slices.Contains(res.Installed, want) {
			t.Errorf("installed %+v, want %v among them", res.Installed, want)
		}
	}
	img, err := eng.Store().Lookup(ctx, res.Image)
	if err != nil {
		t.Fatal(err)
	}
	if img.Labels[build.LabelInstaller] != "pip" || !strings.Contains(img.Labels[build.LabelInstalled], `{"name":"six","version":"1.17.0"}`) ||
		img.Labels[build.LabelRequested] != `["six==1.17.0"]` || img.Labels[build.LabelBase] != base.Image {
		t.Errorf("labels %v, want installer pip, six 1.17.0 installed and requested, base %s", img.Labels, base.Image)
	}
	out, err := eng.Execute(ctx, engine.Request{Principal: local, Image: name,
		Code: "import six, pip\nprint(six.__version__, pip.__version__, six.__file__)"})
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(out.Stdout); !out.Success || len(f) != 3 || f[0] != "1.17.0" || f[1] != "24.3.1" || !strings.Contains(f[2], "/dist-packages/") {
		t.Errorf("run in %s: %+v, want six 1.17.0 and pip 24.3.1 from dist-packages", name, out)
	}
}

// TestInstallerUVMissing: installer uv without a uv is an error at start
// naming the setting; pip never looks for uv.
func TestInstallerUVMissing(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	cfg := *eng.Config()
	cfg.EnvironmentBuilder.Installer = "uv"
	_, err := build.New(build.Options{Store: eng.Store(), Config: &cfg, UV: "none"})
	if !errors.Is(err, build.ErrInvalid) || !strings.Contains(err.Error(), "environment_builder.installer is uv") {
		t.Errorf("installer uv, no uv: %v, want ErrInvalid naming environment_builder.installer", err)
	}
	cfg.EnvironmentBuilder.Installer = "pip"
	b, err := build.New(build.Options{Store: eng.Store(), Config: &cfg})
	if err != nil || b.Installer() != "pip" {
		t.Errorf("installer pip with uv on PATH: %v, %v, want pip", b, err)
	}
}

// TestBuildDiskFull builds on a state dir of its own, a small tmpfs filled
// so that the build runs out of space: inside the build sandbox while the
// installer unpacks a wheel into the uv cache, and while it copies it into
// the scratch layer; on the host while the layer's diff goes to the
// store's temp dir at commit. Each gets an error that names
// the full place and the setting, and leaves nothing behind; with the
// space back, the same build works.
func TestBuildDiskFull(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := context.Background()
	state := t.TempDir()
	for _, d := range []string{filepath.Dir(state), state} {
		os.Chmod(d, 0o711) // the sandbox's root traverses it
	}
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=400m,mode=0711"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(state, unix.MNT_DETACH) }) // after the engine's cleanup
	// bin/forge imports the base image: the race-instrumented test binary
	// took over a minute to unpack it here, bin/forge 6 s.
	forge := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	if _, err := os.Stat(forge); err != nil {
		t.Fatalf("%s missing (make build): %v", forge, err)
	}
	start := time.Now()
	cmd := exec.Command(forge, "--state-dir", state, "image", "import", "oci:"+testutil.BaseImageLayout(t, testenv.BaseImage))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("importing the base image into %s: %v\n%s", state, err, out)
	}
	t.Logf("imported %s into a tmpfs in %s", testenv.BaseImage, time.Since(start).Round(time.Millisecond))
	wheels := t.TempDir()
	blob := make([]byte, 8<<20)
	rand.Read(blob) // incompressible: the layer holds all of it
	testenv.MakeWheelWith(t, wheels, "bigpkg", "1.0", "x", map[string][]byte{"blob.bin": blob})
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.StateDir = state
		b := &c.EnvironmentBuilder
		b.Enabled, b.Offline, b.Wheelhouse, b.AllowedPackages = true, true, wheels, []string{"*"}
	})
	filler := filepath.Join(state, "filler")
	fill := func(free int64) {
		t.Helper()
		os.Remove(filler)
		var st unix.Statfs_t
		if err := unix.Statfs(state, &st); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail)*st.Bsize-free); err != nil {
			t.Fatal(err)
		}
	}
	layers, err := eng.Store().LayerCount()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		step  string
		free  int64
		where string
	}{
		// 1 MiB free: the 8 MiB wheel does not unpack into the uv cache.
		{"unpack", 1 << 20, filepath.Join(state, "build", "cache")},
		// 12 MiB free: it unpacks, its copy into the scratch layer does
		// not fit.
		{"install", 12 << 20, filepath.Join(state, "storage")},
		// 20 MiB free: the install (8 MiB in the uv cache, 8 MiB in the
		// layer) fits, the layer's 8 MiB diff in the temp dir does not.
		{"diff", 20 << 20, filepath.Join(state, "tmp")},
		// 28 MiB free: the diff fits, the stored layer does not.
		{"commit", 28 << 20, filepath.Join(state, "storage")},
	} {
		t.Run(tc.step, func(t *testing.T) {
			// Each step starts with an empty uv cache (an earlier one may
			// have unpacked the wheel).
			caches, _ := filepath.Glob(filepath.Join(state, "build", "cache", "*-local"))
			for _, c := range caches {
				if err := os.RemoveAll(c); err != nil {
					t.Fatal(err)
				}
			}
			fill(tc.free)
			name := uniqueName("t-full")
			_, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"bigpkg"}})
			var ns *build.NoSpaceError
			if !errors.As(err, &ns) || !errors.Is(err, build.ErrNoSpace) {
				t.Fatalf("got %v, want a full disk recognised", err)
			}
			t.Logf("%s: %v", tc.step, err)
			for _, w := range []string{"no space left on the device holding", tc.where, "state_dir"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			nothingLeft(t, eng)
			if _, err := eng.Store().Lookup(ctx, build.ImageName("local", name)); err == nil {
				t.Errorf("the failed build left an image")
			}
			if n, err := eng.Store().LayerCount(); err != nil || n != layers {
				t.Errorf("%d layers in the store (%v), want %d as before", n, err, layers)
			}
		})
	}
	os.Remove(filler)
	name := uniqueName("t-full")
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"bigpkg"}})
	if err != nil {
		t.Fatalf("with the space back: %v", err)
	}
	if res.LayerSize < 8<<20 || res.LayerSize > 9<<20 {
		t.Errorf("layer size %d, want the 8 MiB blob and a little", res.LayerSize)
	}
	if err := eng.RemoveEnvironment(ctx, local, name); err != nil {
		t.Error(err)
	}
}

// makeSlowSdist writes an sdist of slowpkg whose in-tree build backend
// sleeps for ever when the installer loads it: a build that only a
// timeout (or a kill) ends.
func makeSlowSdist(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "slowpkg-1.0.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for name, body := range map[string]string{
		"slowpkg-1.0/PKG-INFO":       "Metadata-Version: 2.1\nName: slowpkg\nVersion: 1.0\n",
		"slowpkg-1.0/pyproject.toml": "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n",
		"slowpkg-1.0/backend.py":     "import time\ntime.sleep(3600)\n",
	} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
}

// nothingLeft checks that no build sandbox, scratch container or temp
// file of the store outlived a build.
func nothingLeft(t *testing.T, eng *engine.Engine) {
	t.Helper()
	if n := eng.Runtime().Live(); n != 0 {
		t.Errorf("%d sandboxes alive, want 0", n)
	}
	if n, err := eng.Store().ScratchCount(); err != nil || n != 0 {
		t.Errorf("%d scratch containers in the store (%v), want 0", n, err)
	}
	tmp := filepath.Join(eng.Config().StateDir, "tmp", fmt.Sprint(os.Getpid()))
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		if e.Name() != "owner" {
			t.Errorf("left in the store's temp dir: %s", e.Name())
		}
	}
}

func TestPolicyRefusalsStartNothing(t *testing.T) {
	ctx := context.Background()
	eng := offlineEngine(t, "x", func(b *profiles.EnvironmentBuilderConfig) {
		b.AllowedPackages = []string{"forgetestpkg", "requests", "evil-*"}
		b.BlockedPackages = []string{"evil-*"}
		b.ApprovalPackages = []string{"requests"}
		b.MaxPackages = 3
	})
	for _, tc := range []struct {
		name     string
		req      build.Request
		sentinel error
		want     []string
	}{
		{"blocked", build.Request{Name: "t-refuse", Packages: []string{"Evil_Thing"}}, build.ErrRefused, []string{"evil-thing", "environment_builder.blocked_packages"}},
		{"not allowed", build.Request{Name: "t-refuse", Packages: []string{"numpy"}}, build.ErrRefused, []string{"numpy", "environment_builder.allowed_packages"}},
		{"approval", build.Request{Name: "t-refuse", Packages: []string{"requests"}}, build.ErrRefused, []string{"requests", "environment_builder.approved_packages"}},
		{"url", build.Request{Name: "t-refuse", Packages: []string{"forgetestpkg @ https://example.com/x.whl"}}, build.ErrRefused, []string{"forgetestpkg", "environment_builder.allow_direct_references"}},
		{"path", build.Request{Name: "t-refuse", Packages: []string{"./forgetestpkg"}}, build.ErrInvalid, []string{"./forgetestpkg"}},
		{"option", build.Request{Name: "t-refuse", Packages: []string{"--index-url=http://evil"}}, build.ErrInvalid, []string{"--index-url"}},
		{"too many", build.Request{Name: "t-refuse", Packages: []string{"a", "b", "c", "d"}}, build.ErrRefused, []string{"4 packages", "environment_builder.max_packages"}},
		{"malformed", build.Request{Name: "t-refuse", Packages: []string{"forgetestpkg >>= 1"}}, build.ErrInvalid, []string{"forgetestpkg >>= 1"}},
		{"bad name", build.Request{Name: "no_underscores", Packages: []string{"forgetestpkg"}}, build.ErrInvalid, []string{"no_underscores", "letters, digits and hyphens"}},
		{"long name", build.Request{Name: strings.Repeat("a", 64), Packages: []string{"forgetestpkg"}}, build.ErrInvalid, []string{"at most 63"}},
		{"unknown preset", build.Request{Name: "t-refuse", Preset: "nope"}, build.ErrInvalid, []string{"unknown preset \"nope\"", "environment_builder.presets"}},
		{"base not allowed", build.Request{Name: "t-refuse", Packages: []string{"forgetestpkg"}, BaseImage: "docker.io/library/python:3"}, build.ErrInvalid, []string{"images.allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := eng.BuildEnvironment(ctx, local, tc.req)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want %v", err, tc.sentinel)
			}
			if !errors.As(err, new(*engine.RefusedError)) {
				t.Errorf("got %T, want an *engine.RefusedError (a tool error, exit 2)", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			nothingLeft(t, eng)
		})
	}
	if _, err := eng.Environment(ctx, local, "t-refuse"); !errors.Is(err, build.ErrNotFound) {
		t.Errorf("after refusals: %v, want no environment", err)
	}
}

func TestBuildTimeoutLeavesNothing(t *testing.T) {
	ctx := context.Background()
	eng := offlineEngine(t, "x", func(b *profiles.EnvironmentBuilderConfig) {
		b.BuildTimeout = profiles.Duration(3 * time.Second)
		makeSlowSdist(t, b.Wheelhouse)
	})
	name := uniqueName("t-slow")
	_, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"slowpkg"}})
	if !errors.Is(err, build.ErrTimeout) || !strings.Contains(err.Error(), "environment_builder.build_timeout") {
		t.Fatalf("got %v, want a timeout naming environment_builder.build_timeout", err)
	}
	nothingLeft(t, eng)
	if _, err := eng.Store().Lookup(ctx, build.ImageName("local", name)); err == nil {
		t.Errorf("the timed-out build left an image")
	}
}

func TestBuildLimits(t *testing.T) {
	ctx := context.Background()
	eng := offlineEngine(t, uniqueName("v"), func(b *profiles.EnvironmentBuilderConfig) {
		b.BuildsPerPeriod, b.RatePeriod, b.MaxConcurrent = 2, profiles.Duration(time.Hour), 1
		b.BuildTimeout = profiles.Duration(20 * time.Second)
		makeSlowSdist(t, b.Wheelhouse)
	})
	first := uniqueName("t-limit")
	removeEnv(t, eng, first)
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: first, Packages: []string{"forgetestpkg"}}); err != nil {
		t.Fatal(err)
	}
	// A cache hit does not count.
	if res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: first, Packages: []string{"forgetestpkg"}}); err != nil || !res.Cached {
		t.Fatalf("cache hit: %v, %v", res, err)
	}
	// The second build hangs; a third one meanwhile is over max_concurrent.
	slowCtx, cancel := context.WithCancel(ctx)
	slow := make(chan error, 1)
	go func() {
		_, err := eng.BuildEnvironment(slowCtx, local, build.Request{Name: uniqueName("t-slow"), Packages: []string{"slowpkg"}})
		slow <- err
	}()
	deadline := time.Now().Add(15 * time.Second)
	for eng.Runtime().Live() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling for the build sandbox, with a deadline
	}
	_, err := eng.BuildEnvironment(ctx, local, build.Request{Name: uniqueName("t-third"), Packages: []string{"forgetestpkg==1.0"}})
	if !errors.Is(err, build.ErrBusy) || !strings.Contains(err.Error(), "environment_builder.max_concurrent") {
		t.Errorf("concurrent build: got %v, want ErrBusy naming environment_builder.max_concurrent", err)
	}
	cancel()
	if err := <-slow; err == nil {
		t.Errorf("cancelled build succeeded")
	}
	nothingLeft(t, eng)
	// Two builds started this hour: the next one is rate limited.
	_, err = eng.BuildEnvironment(ctx, local, build.Request{Name: uniqueName("t-third"), Packages: []string{"forgetestpkg==1.0"}})
	var rl *build.RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter <= 0 || rl.RetryAfter > time.Hour {
		t.Fatalf("got %v, want a rate limit with a retry time within the hour", err)
	}
	if !strings.Contains(err.Error(), "retry in") || !strings.Contains(err.Error(), "environment_builder.builds_per_period") {
		t.Errorf("rate limit error %q should say when to retry and name the setting", err)
	}
	// Another principal has its own budget.
	other := engine.Principal{Tenant: "listener:test"}
	otherName := uniqueName("t-other")
	if _, err := eng.BuildEnvironment(ctx, other, build.Request{Name: otherName, Packages: []string{"forgetestpkg"}}); err != nil {
		t.Errorf("another principal: %v", err)
	}
	if err := eng.RemoveEnvironment(ctx, other, otherName); err != nil {
		t.Errorf("removing the other principal's environment: %v", err)
	}
}

// TestBuildFromLoopbackIndex serves a PEP 503 index on the host's loopback
// and builds from it: the build sandbox has no network of its own, so the
// only way there is forge's egress proxy, allowed exactly that address.
func TestBuildFromLoopbackIndex(t *testing.T) {
	ctx := context.Background()
	value := uniqueName("v")
	wheels := t.TempDir()
	makeWheel(t, wheels, "forgetestpkg", "1.0", value)
	whl := "forgetestpkg-1.0-py3-none-any.whl"
	data, err := os.ReadFile(filepath.Join(wheels, whl))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	var hits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/forgetestpkg/", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`, whl, hex.EncodeToString(sum[:]), whl)
	})
	mux.HandleFunc("/files/"+whl, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(data)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.AllowedPackages = true, []string{"*"}
		b.IndexURL, b.IndexHosts = "http://"+ln.Addr().String()+"/simple", nil
	})
	name := uniqueName("t-index")
	removeEnv(t, eng, name)
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}})
	if err != nil {
		t.Fatal(err)
	}
	if hits.Load() < 2 {
		t.Errorf("the index saw %d requests, want the page and the wheel", hits.Load())
	}
	out, err := eng.Execute(ctx, engine.Request{Principal: local, Code: "import forgetestpkg\nprint(forgetestpkg.VALUE)", Image: res.Name})
	if err != nil || strings.TrimSpace(out.Stdout) != value {
		t.Errorf("got %+v, %v, want %q", out, err, value)
	}
}

// TestSessionRestoresIntoEnvironment hibernates a session that runs in an
// environment (the engine closes) and restores it in a new engine: the
// session comes back in the same environment, its variables with it.
func TestSessionRestoresIntoEnvironment(t *testing.T) {
	ctx := context.Background()
	value := uniqueName("v")
	wheels := t.TempDir()
	makeWheel(t, wheels, "forgetestpkg", "1.0", value)
	cfg := func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.Offline, b.Wheelhouse, b.AllowedPackages = true, true, wheels, []string{"*"}
		c.Sessions.Persist = true
	}
	eng := testenv.Engine(t, false, cfg)
	name := uniqueName("t-sess")
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}}); err != nil {
		t.Fatal(err)
	}
	sid := uniqueName("s")
	out, err := eng.Execute(ctx, engine.Request{Principal: local, Code: "import forgetestpkg\nv = forgetestpkg.VALUE", Image: name, SessionID: sid})
	if err != nil || !out.Success {
		t.Fatalf("%+v, %v", out, err)
	}
	if err := eng.RemoveEnvironment(ctx, local, name); !errors.Is(err, build.ErrInUse) {
		t.Errorf("removing an environment a session runs in: %v, want ErrInUse", err)
	}
	if err := eng.Close(5 * time.Second); err != nil {
		t.Fatalf("Close (hibernates): %v", err)
	}
	eng2 := testenv.Engine(t, false, cfg)
	removeEnv(t, eng2, name)
	t.Cleanup(func() { eng2.DestroySession(ctx, local, sid) })
	out, err = eng2.Execute(ctx, engine.Request{Principal: local, Code: "import forgetestpkg\n(v, forgetestpkg.__file__)", SessionID: sid})
	if err != nil || !out.Success {
		t.Fatalf("after restore: %+v, %v", out, err)
	}
	if got := fmt.Sprint(out.Result); !strings.Contains(got, value) || !strings.Contains(got, "dist-packages") {
		t.Errorf("after restore: result %v, want the variable and the environment's package", got)
	}
}

// TestPresetOnFirstUse runs code with environment = a preset that was
// never built: the first call builds it (with progress), later calls and
// other principals' find their own.
func TestPresetOnFirstUse(t *testing.T) {
	ctx := context.Background()
	value := uniqueName("v")
	preset := uniqueName("preset")
	eng := offlineEngine(t, value, func(b *profiles.EnvironmentBuilderConfig) {
		b.Presets = map[string]profiles.Preset{preset: {Packages: []string{"forgetestpkg"}}}
	})
	removeEnv(t, eng, preset)
	var (
		mu    sync.Mutex
		steps []string
	)
	req := engine.Request{Principal: local, Code: "import forgetestpkg\nprint(forgetestpkg.VALUE)", Environment: preset,
		Progress: func(p engine.Progress) {
			if p.Message != "" {
				mu.Lock()
				steps = append(steps, p.Message)
				mu.Unlock()
			}
		}}
	out, err := eng.Execute(ctx, req)
	if err != nil || strings.TrimSpace(out.Stdout) != value {
		t.Fatalf("first use: %+v, %v", out, err)
	}
	if len(steps) < 3 {
		t.Errorf("first use reported progress %q, want the build's steps", steps)
	}
	steps = nil
	if out, err = eng.Execute(ctx, req); err != nil || strings.TrimSpace(out.Stdout) != value {
		t.Fatalf("second use: %+v, %v", out, err)
	}
	if len(steps) != 1 || !strings.Contains(steps[0], "cache hit") {
		t.Errorf("second use progress %q, want one cache hit", steps)
	}
	if _, err := eng.Execute(ctx, engine.Request{Principal: local, Code: "1", Environment: "no-such-preset"}); !errors.Is(err, engine.ErrInvalidRequest) ||
		!strings.Contains(err.Error(), "environment_builder.presets") {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := eng.Execute(ctx, engine.Request{Principal: local, Code: "1", Environment: preset, Image: testenv.BaseImage}); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("preset and image both: %v", err)
	}
	// The environment's image records its preset (forge env ls --json, REST).
	envs, err := eng.ListEnvironments(ctx, local)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(envs, func(e build.Environment) bool { return e.Name == preset })
	if i < 0 || envs[i].Preset != preset {
		t.Errorf("environments %+v: want %s with preset %s", envs, preset, preset)
	}
}

// TestEnvironmentsArePrivate: another principal neither sees nor runs in
// nor removes one principal's environment, by name or by image.
func TestEnvironmentsArePrivate(t *testing.T) {
	ctx := context.Background()
	eng := offlineEngine(t, "x", nil)
	name := uniqueName("t-mine")
	removeEnv(t, eng, name)
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}})
	if err != nil {
		t.Fatal(err)
	}
	other := engine.Principal{Tenant: "listener:other"}
	list, err := eng.ListEnvironments(ctx, other)
	if err != nil || len(list) != 0 {
		t.Errorf("other's list: %v, %v", list, err)
	}
	for _, image := range []string{name, res.Image} {
		_, err := eng.Execute(ctx, engine.Request{Principal: other, Code: "1", Image: image})
		if !errors.Is(err, rootfs.ErrImageNotFound) {
			t.Errorf("other runs in %s: %v, want image not found", image, err)
		}
	}
	if err := eng.RemoveEnvironment(ctx, other, name); !errors.Is(err, build.ErrNotFound) {
		t.Errorf("other removes it: %v", err)
	}
	if _, err := eng.BuildEnvironment(ctx, other, build.Request{Name: "t-x", Packages: []string{"forgetestpkg"}, BaseImage: res.Image}); !errors.Is(err, rootfs.ErrImageNotFound) {
		t.Errorf("other builds on it: %v", err)
	}
}

// TestBuildOnTrixie builds on the second base image, Debian 13's Python:
// the package lands where that Python imports from.
func TestBuildOnTrixie(t *testing.T) {
	ctx := context.Background()
	value := uniqueName("v")
	eng := offlineEngine(t, value, nil)
	const trixie = "forge/python:3.13"
	_, err := eng.Store().Lookup(ctx, trixie)
	testutil.Require(t, err == nil, trixie+" is not imported (make test-images)")
	name := uniqueName("t-trixie")
	removeEnv(t, eng, name)
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}, BaseImage: trixie})
	if err != nil {
		t.Fatal(err)
	}
	if res.Python != "3.13" || res.BaseImage != trixie {
		t.Errorf("python %q base %q, want 3.13 on %s", res.Python, res.BaseImage, trixie)
	}
	out, err := eng.Execute(ctx, engine.Request{Principal: local, Code: "import forgetestpkg, sys\nprint(forgetestpkg.VALUE, sys.version_info[:2])", Image: name})
	if err != nil || strings.TrimSpace(out.Stdout) != value+" (3, 13)" {
		t.Errorf("got %+v, %v", out, err)
	}
}

// TestEnvironmentPoolShrinks: an environment gets a warm pool when used,
// and the pool goes away once idle (the base image's pool stays).
func TestEnvironmentPoolShrinks(t *testing.T) {
	ctx := context.Background()
	wheels := t.TempDir()
	makeWheel(t, wheels, "forgetestpkg", "1.0", "x")
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.Offline, b.Wheelhouse, b.AllowedPackages = true, true, wheels, []string{"*"}
		c.Pool.Enabled, c.Pool.Size, c.Pool.MaxIdleAge = true, 1, profiles.Duration(3*time.Second)
	})
	name := uniqueName("t-pool")
	removeEnv(t, eng, name)
	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}})
	if err != nil {
		t.Fatal(err)
	}
	hasPool := func() bool {
		for _, st := range eng.PoolStats() {
			if st.Name == res.Image {
				return true
			}
		}
		return false
	}
	if out, err := eng.Execute(ctx, engine.Request{Principal: local, Code: "import forgetestpkg", Image: name}); err != nil || !out.Success {
		t.Fatalf("%+v %v", out, err)
	}
	if !hasPool() {
		t.Fatalf("no warm pool for %s after a run in it: %+v", res.Image, eng.PoolStats())
	}
	deadline := time.Now().Add(20 * time.Second)
	for hasPool() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // polling for the idle pool to go, with a deadline
	}
	if hasPool() {
		t.Errorf("the pool of %s is still there after %s idle", res.Image, 3*time.Second)
	}
}

// TestBuildAudit: build.request, build.refused, build.complete and
// build.failed reach the audit log, with the principal.
func TestBuildAudit(t *testing.T) {
	ctx := context.Background()
	logPath := filepath.Join(t.TempDir(), "audit.log")
	lg, err := audit.Open(logPath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	wheels := t.TempDir()
	makeWheel(t, wheels, "forgetestpkg", "1.0", "x")
	eng := testenv.EngineWith(t, false, func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.Offline, b.Wheelhouse, b.AllowedPackages = true, true, wheels, []string{"forgetestpkg", "nothere"}
	}, engine.Options{Audit: lg})
	name := uniqueName("t-audit")
	removeEnv(t, eng, name)
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"numpy"}}); !errors.Is(err, build.ErrRefused) {
		t.Fatalf("refusal: %v", err)
	}
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"nothere"}}); !errors.Is(err, build.ErrInstall) {
		t.Fatalf("failure: %v", err)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev audit.Event
		if json.Unmarshal([]byte(line), &ev) == nil && strings.HasPrefix(ev.Event, "build.") {
			if ev.Principal != "local" {
				t.Errorf("%s names principal %q, want local", ev.Event, ev.Principal)
			}
			counts[ev.Event]++
		}
	}
	want := map[string]int{audit.EventBuildRequest: 3, audit.EventBuildComplete: 1, audit.EventBuildRefused: 1, audit.EventBuildFailed: 1}
	for ev, n := range want {
		if counts[ev] != n {
			t.Errorf("%d %s events, want %d (all: %v)", counts[ev], ev, n, counts)
		}
	}
}

// serveIndex serves a PEP 503 index of files (name → content) on the
// host's loopback and returns its URL.
func serveIndex(t *testing.T, files map[string][]byte) string {
	t.Helper()
	mux := http.NewServeMux()
	projects := map[string][]string{}
	for f := range files {
		proj := strings.ReplaceAll(strings.SplitN(f, "-", 2)[0], "_", "-")
		projects[proj] = append(projects[proj], f)
	}
	for proj, fs := range projects {
		mux.HandleFunc("/simple/"+proj+"/", func(w http.ResponseWriter, r *http.Request) {
			for _, f := range fs {
				sum := sha256.Sum256(files[f])
				fmt.Fprintf(w, `<a href="/files/%s#sha256=%s">%s</a>`+"\n", f, hex.EncodeToString(sum[:]), f)
			}
		})
	}
	mux.HandleFunc("/files/", func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[strings.TrimPrefix(r.URL.Path, "/files/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/simple"
}

// TestCacheNotSharedBetweenPrincipals is an attack: one principal's build
// runs a package's build backend, which rewrites the unpacked copy of a
// popular package in the uv cache; another principal's build of that
// package must not get the rewritten copy. (With one cache per base
// image, as first written, it did.)
func TestCacheNotSharedBetweenPrincipals(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	makeWheel(t, dir, "forgetestpkg", "1.0", "genuine")
	whl, err := os.ReadFile(filepath.Join(dir, "forgetestpkg-1.0-py3-none-any.whl"))
	if err != nil {
		t.Fatal(err)
	}
	backend := `import os
for root, dirs, files in os.walk("/opt/forge/build/cache"):
    if root.endswith("/forgetestpkg") and "__init__.py" in files:
        with open(os.path.join(root, "__init__.py"), "w") as f:
            f.write('VALUE = "poisoned"\n')
raise SystemExit("evilpkg does not build")
`
	index := serveIndex(t, map[string][]byte{
		"forgetestpkg-1.0-py3-none-any.whl": whl,
		"evilpkg-1.0.tar.gz":                sdist(t, "evilpkg", backend),
	})
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.AllowedPackages, b.IndexURL, b.IndexHosts = true, []string{"*"}, index, nil
	})
	attacker := engine.Principal{Tenant: "listener:attacker"}
	victim := engine.Principal{Tenant: "listener:victim"}
	mine := uniqueName("t-bait")
	if _, err := eng.BuildEnvironment(ctx, attacker, build.Request{Name: mine, Packages: []string{"forgetestpkg"}}); err != nil {
		t.Fatal(err)
	}
	defer eng.RemoveEnvironment(ctx, attacker, mine)
	if _, err := eng.BuildEnvironment(ctx, attacker, build.Request{Name: uniqueName("t-evil"), Packages: []string{"evilpkg"}}); !errors.Is(err, build.ErrInstall) {
		t.Fatalf("the poisoning build: %v, want it to fail after its backend ran", err)
	}
	theirs := uniqueName("t-victim")
	res, err := eng.BuildEnvironment(ctx, victim, build.Request{Name: theirs, Packages: []string{"forgetestpkg"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		deadline := time.Now().Add(10 * time.Second)
		for eng.RemoveEnvironment(ctx, victim, theirs) != nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling for the run's sandbox to go, with a deadline
		}
	}()
	out, err := eng.Execute(ctx, engine.Request{Principal: victim, Code: "import forgetestpkg\nprint(forgetestpkg.VALUE)", Image: res.Name})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.Stdout); got != "genuine" {
		t.Errorf("the victim's environment has VALUE %q (stderr %q), want the genuine package", got, out.Stderr)
	}
}

// sdist is a source distribution of name whose in-tree build backend is
// backend (run when the installer loads it).
func sdist(t *testing.T, name, backend string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for file, body := range map[string]string{
		"PKG-INFO":       "Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n",
		"pyproject.toml": "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n",
		"backend.py":     backend,
	} {
		tw.WriteHeader(&tar.Header{Name: name + "-1.0/" + file, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}
