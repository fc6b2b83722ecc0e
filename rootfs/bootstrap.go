package rootfs

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/mcp-forge/forge/internal/cachedir"
	"github.com/mcp-forge/forge/internal/proc"
)

// Defaults of BootstrapOptions.
const (
	DefaultImage = "forge/python:3.11"
	// DefaultDataImage is Debian 13's Python (3.13) with numpy, pandas and
	// matplotlib: from 3.12 on a zygote template makes its heap immortal,
	// and a live session holding a DataFrame takes 2.9 MiB of host memory
	// where 3.11's took 4.9 (docs/bench-log.md).
	DefaultDataImage = "forge/python-data:3.13"
	DefaultMirror    = "http://deb.debian.org/debian"
	DefaultSuite     = "bookworm"
	// DataSuite is the suite of an image with packages (DefaultDataImage).
	DataSuite = "trixie"
)

// Suites are the Debian suites Bootstrap builds from, with the Python
// minor version each ships (the tag of the images it names).
var Suites = map[string]string{"bookworm": "3.11", "trixie": "3.13"}

// DefaultName is the image Bootstrap names for a suite: forge/python:X.Y,
// or forge/python-data:X.Y for an image with extra packages.
func DefaultName(suite string, data bool) string {
	repo := "forge/python"
	if data {
		repo = "forge/python-data"
	}
	return repo + ":" + Suites[suite]
}

func checkSuite(suite string) error {
	if _, ok := Suites[suite]; ok {
		return nil
	}
	known := make([]string, 0, len(Suites))
	for s, py := range Suites {
		known = append(known, s+" (Python "+py+")")
	}
	slices.Sort(known)
	return fmt.Errorf("%w %q; known: %s", ErrUnknownSuite, suite, strings.Join(known, ", "))
}

// sandboxUID is the uid (and gid) the sandboxed code runs as.
const sandboxUID = 1000

// BootstrapOptions configures Bootstrap.
type BootstrapOptions struct {
	// Name of the image: DefaultName(Suite, len(Packages) > 0), which is
	// DefaultImage or DefaultDataImage for the default suite.
	Name string
	// Packages are Debian packages installed beside python3.
	Packages []string
	// Mirror is the Debian mirror: the host's configured apt mirror for
	// Suite if there is one, else DefaultMirror.
	Mirror string
	// Suite is the Debian suite: DefaultSuite, or DataSuite with Packages.
	Suite string
	// CacheDir holds built layouts: FORGE_CACHE_DIR, else
	// $XDG_CACHE_HOME/forge, else ~/.cache/forge.
	CacheDir string
	// Rebuild ignores a cached layout.
	Rebuild bool
	// Progress receives human-readable progress lines (nil = none).
	Progress io.Writer
}

func (o BootstrapOptions) withDefaults() BootstrapOptions {
	if o.Suite == "" {
		o.Suite = DefaultSuite
		if len(o.Packages) > 0 {
			o.Suite = DataSuite
		}
	}
	if o.Name == "" {
		o.Name = DefaultName(o.Suite, len(o.Packages) > 0)
	}
	if o.Mirror == "" {
		o.Mirror = hostMirror(o.Suite)
	}
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// DefaultCacheDir is FORGE_CACHE_DIR, else $XDG_CACHE_HOME/forge, else
// ~/.cache/forge.
func DefaultCacheDir() string { return cachedir.Dir() }

// LayoutDir is where Bootstrap caches the layout of image name:
// <cacheDir>/images/<name with '/' and ':' replaced by '_'>.
func LayoutDir(cacheDir, name string) string { return cachedir.Layout(cacheDir, name) }

// Bootstrap builds a Python image from Debian packages with debootstrap and
// writes it as an OCI layout under opts.CacheDir, or returns the cached
// layout. The layout's ref.name is opts.Name.
func Bootstrap(ctx context.Context, opts BootstrapOptions) (layoutDir string, retErr error) {
	if err := checkSuite(cmp.Or(opts.Suite, DefaultSuite)); err != nil {
		return "", err
	}
	opts = opts.withDefaults()
	layoutDir = LayoutDir(opts.CacheDir, opts.Name)
	if !opts.Rebuild {
		cached, err := layoutLabel(layoutDir, "forge.packages")
		if err == nil && cached == packagesLabel(opts.Packages) {
			fmt.Fprintf(opts.Progress, "bootstrap: using cached layout %s\n", layoutDir)
			return layoutDir, nil
		}
		if err == nil {
			fmt.Fprintf(opts.Progress, "bootstrap: cached layout %s has packages %s; rebuilding\n", layoutDir, cached)
		}
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("bootstrap needs debootstrap (apt-get install debootstrap): %w", err)
	}
	start := time.Now()
	work, err := newBootstrapWorkDir(opts.CacheDir)
	if err != nil {
		return "", err
	}
	defer removeTree(work)
	target := filepath.Join(work, "rootfs")
	if err := runDebootstrap(ctx, opts, target, start); err != nil {
		return "", err
	}
	if err := prepareTree(target); err != nil {
		return "", fmt.Errorf("preparing %s: %w", target, err)
	}
	pyVersion, err := pythonVersion(target)
	if err != nil {
		return "", err
	}
	if want := Suites[opts.Suite]; pyVersion != want && !strings.HasPrefix(pyVersion, want+".") {
		return "", fmt.Errorf("bootstrap: %s ships Python %s, not %s as forge expects of it", opts.Suite, pyVersion, want)
	}
	fmt.Fprintf(opts.Progress, "bootstrap: packing layer (%s elapsed)\n", since(start))
	cfg := LayoutConfig{
		RefName: opts.Name,
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8",
		},
		Cmd: []string{"/usr/bin/python3"},
		Labels: map[string]string{
			"org.opencontainers.image.title": opts.Name,
			"forge.python.version":           pyVersion,
			"forge.packages":                 packagesLabel(opts.Packages),
			"forge.debian.suite":             opts.Suite,
		},
	}
	if err := WriteLayout(ctx, layoutDir, target, cfg); err != nil {
		return "", err
	}
	fmt.Fprintf(opts.Progress, "bootstrap: wrote %s in %s\n", layoutDir, since(start))
	return layoutDir, nil
}

// packagesLabel is the forge.packages label: the Debian packages installed.
func packagesLabel(packages []string) string {
	return strings.Join(append([]string{"python3"}, packages...), ",")
}

// layoutLabel reads a label of the only image in an OCI layout.
func layoutLabel(dir, key string) (string, error) {
	var index imgspecv1.Index
	if err := readJSON(filepath.Join(dir, "index.json"), &index); err != nil {
		return "", err
	}
	if len(index.Manifests) != 1 {
		return "", fmt.Errorf("%s: %d manifests, want 1", dir, len(index.Manifests))
	}
	var m imgspecv1.Manifest
	if err := readJSON(blobPath(dir, index.Manifests[0].Digest.Encoded()), &m); err != nil {
		return "", err
	}
	var config imgspecv1.Image
	if err := readJSON(blobPath(dir, m.Config.Digest.Encoded()), &config); err != nil {
		return "", err
	}
	return config.Config.Labels[key], nil
}

func blobPath(dir, hex string) string { return filepath.Join(dir, "blobs", "sha256", hex) }

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

// newBootstrapWorkDir makes a work dir under cacheDir/tmp (same file system
// as the layouts, for the final rename), removing those of dead bootstraps.
func newBootstrapWorkDir(cacheDir string) (string, error) {
	tmpRoot := filepath.Join(cacheDir, "tmp")
	if err := os.MkdirAll(tmpRoot, 0o755); err != nil {
		return "", err
	}
	entries, _ := os.ReadDir(tmpRoot)
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "bootstrap-%d-", &pid); err == nil && !proc.Alive(pid) {
			removeTree(filepath.Join(tmpRoot, e.Name()))
		}
	}
	return os.MkdirTemp(tmpRoot, fmt.Sprintf("bootstrap-%d-", os.Getpid()))
}

// removeTree unmounts whatever a killed debootstrap left mounted (/proc,
// /sys inside the target) before deleting the tree.
func removeTree(dir string) {
	_ = unmountUnder(dir)
	os.RemoveAll(dir)
}

func runDebootstrap(ctx context.Context, opts BootstrapOptions, target string, start time.Time) error {
	include := append([]string{"python3"}, opts.Packages...)
	args := []string{"--variant=minbase", "--include=" + strings.Join(include, ","), opts.Suite, target, opts.Mirror}
	fmt.Fprintf(opts.Progress, "debootstrap: %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "debootstrap", args...)
	// Its own process group, so cancelling kills apt and dpkg too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting debootstrap: %w", err)
	}
	var tail []string // the last lines, for the error message
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintf(opts.Progress, "debootstrap: %s (%s)\n", line, since(start))
		if tail = append(tail, line); len(tail) > 5 {
			tail = tail[1:]
		}
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("debootstrap %s from %s: %w: %s", opts.Suite, opts.Mirror, err, strings.Join(tail, " | "))
	}
	return nil
}

// prepareTree trims the debootstrapped tree and adds what sandboxes need:
// the sandbox user and the mount points of the read-only root.
func prepareTree(root string) error {
	for _, dir := range []string{
		"var/cache/apt", "var/lib/apt/lists", "var/cache/debconf", "var/log",
		"usr/share/doc", "usr/share/man", "usr/share/info", "dev",
	} {
		if err := emptyDir(filepath.Join(root, dir)); err != nil {
			return err
		}
	}
	// debootstrap copies the host's; sandboxes have no network.
	if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), nil, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("forge\n"), 0o644); err != nil {
		return err
	}
	if err := addSandboxUser(root); err != nil {
		return err
	}
	for _, d := range mountPoints {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	return os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky)
}

// emptyDir removes the contents of dir, keeping dir itself.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// addSandboxUser makes sure uid and gid 1000 exist (user "forge").
func addSandboxUser(root string) error {
	id := strconv.Itoa(sandboxUID)
	if err := appendIfMissing(filepath.Join(root, "etc/group"), 2, id, "forge:x:"+id+":\n"); err != nil {
		return err
	}
	if err := appendIfMissing(filepath.Join(root, "etc/passwd"), 2, id, "forge:x:"+id+":"+id+":forge:/home/forge:/bin/sh\n"); err != nil {
		return err
	}
	if err := appendIfMissing(filepath.Join(root, "etc/shadow"), 0, "forge", "forge:*:19000:0:99999:7:::\n"); err != nil {
		return err
	}
	home := filepath.Join(root, "home/forge")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	return os.Chown(home, sandboxUID, sandboxUID)
}

// appendIfMissing appends line to the colon-separated file unless a line
// already has value in field.
func appendIfMissing(path string, field int, value, line string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Split(l, ":"); len(f) > field && f[field] == value {
			return nil
		}
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		line = "\n" + line
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, line...), fi.Mode().Perm())
}

// pythonVersion reads "3.11" from the /usr/bin/python3 symlink.
func pythonVersion(root string) (string, error) {
	target, err := os.Readlink(filepath.Join(root, "usr/bin/python3"))
	if err != nil {
		return "", fmt.Errorf("no python3 in the bootstrapped tree: %w", err)
	}
	v := strings.TrimPrefix(filepath.Base(target), "python")
	if v == "" || v == filepath.Base(target) {
		return "", fmt.Errorf("cannot tell the python version from /usr/bin/python3 -> %s", target)
	}
	return v, nil
}

// hostMirror returns the Debian mirror the host's apt sources use for suite,
// or DefaultMirror.
func hostMirror(suite string) string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append([]string{"/etc/apt/sources.list"}, files...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := mirrorFromSources(string(data), strings.HasSuffix(f, ".sources"), suite); m != "" {
			return m
		}
	}
	return DefaultMirror
}

// mirrorFromSources finds a URI serving suite in a one-line (.list) or
// deb822 (.sources) apt source file.
func mirrorFromSources(data string, deb822 bool, suite string) string {
	if !deb822 {
		for _, line := range strings.Split(data, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "deb" {
				f = f[1:]
				if strings.HasPrefix(f[0], "[") { // options
					for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
						f = f[1:]
					}
					if len(f) > 0 {
						f = f[1:]
					}
				}
				if len(f) >= 2 && f[1] == suite {
					return f[0]
				}
			}
		}
		return ""
	}
	for _, stanza := range strings.Split(data, "\n\n") {
		var uris, suites []string
		debType := false
		for _, line := range strings.Split(stanza, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || strings.HasPrefix(line, "#") {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "types":
				debType = strings.Contains(" "+v+" ", " deb ")
			case "uris":
				uris = strings.Fields(v)
			case "suites":
				suites = strings.Fields(v)
			}
		}
		for _, s := range suites {
			if s == suite && debType && len(uris) > 0 {
				return uris[0]
			}
		}
	}
	return ""
}
