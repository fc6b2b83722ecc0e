package rootfs

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/test/testutil"
)

func TestParseReference(t *testing.T) {
	tests := []struct {
		ref       string
		transport string // "" = must fail
		wantMsg   []string
	}{
		{ref: "docker://python:3.12-slim", transport: "docker"},
		{ref: "docker://quay.io/org/img@sha256:" + strings.Repeat("a", 64), transport: "docker"},
		{ref: "oci:/tmp/layout", transport: "oci"},
		{ref: "oci:/tmp/layout:forge/python:3.11", transport: "oci"},
		{ref: "oci-archive:/tmp/img.tar", transport: "oci-archive"},
		{ref: "oci-archive:/tmp/img.tar:v1", transport: "oci-archive"},
		{ref: "docker-archive:/tmp/img.tar", transport: "docker-archive"},
		{ref: "python:3.12-slim", wantMsg: []string{`did you mean "docker://python:3.12-slim"`, "docker://NAME", "oci-archive:FILE"}},
		{ref: "ubuntu", wantMsg: []string{`did you mean "docker://ubuntu"`}},
		{ref: "localhost:5000/img:1", wantMsg: []string{`did you mean "docker://localhost:5000/img:1"`}},
		{ref: "docker:python:3.12", wantMsg: []string{`did you mean "docker://python:3.12"`}},
		{ref: "/tmp/img.tar", wantMsg: []string{`did you mean "oci-archive:/tmp/img.tar"`}},
		{ref: "containers-storage:foo", wantMsg: []string{`unknown or unsupported transport "containers-storage"`}},
		{ref: "ftp://host/x", wantMsg: []string{`unknown or unsupported transport "ftp"`, "accepted forms"}},
		{ref: "docker://UPPER/case", wantMsg: []string{"cannot parse"}},
		{ref: "oci:", wantMsg: []string{"missing path"}},
		{ref: "", wantMsg: []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			ref, err := ParseReference(tt.ref)
			if tt.transport != "" {
				if err != nil {
					t.Fatalf("got error %v, want a %s reference", err, tt.transport)
				}
				if got := ref.Transport().Name(); got != tt.transport {
					t.Errorf("transport: got %v, want %v", got, tt.transport)
				}
				return
			}
			var refErr *RefError
			if !errors.Is(err, ErrBadReference) || !errors.As(err, &refErr) {
				t.Fatalf("got %v, want a *RefError matching ErrBadReference", err)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not contain %q", err, m)
				}
			}
		})
	}
}

func FuzzParseReference(f *testing.F) {
	for _, s := range []string{"docker://python:3.12", "oci:/x:y", "python", "oci-archive:", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseReference(s)
		if (ref == nil) == (err == nil) {
			t.Fatalf("ParseReference(%q) = %v, %v", s, ref, err)
		}
		if err != nil && !errors.Is(err, ErrBadReference) {
			t.Fatalf("ParseReference(%q): error %v does not match ErrBadReference", s, err)
		}
	})
}

func TestErrorMatching(t *testing.T) {
	tests := []struct {
		err    error
		target error
	}{
		{&RegistryError{Registry: "docker.io", Err: errors.New("x")}, ErrRegistryUnreachable},
		{&InUseError{Image: "a", Users: []string{"pid 1"}}, ErrImageInUse},
		{&RefError{Ref: "x", Reason: "y"}, ErrBadReference},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.target) {
			t.Errorf("errors.Is(%v, %v): got false, want true", tt.err, tt.target)
		}
	}
}

func TestMirrorFromSources(t *testing.T) {
	const deb822 = `Types: deb
# comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`
	tests := []struct {
		name, data string
		deb822     bool
		want       string
	}{
		{"deb822", deb822, true, "http://mirror.example/debian"},
		{"list", "deb http://ftp.example/debian bookworm main\n", false, "http://ftp.example/debian"},
		{"list with options", "deb [arch=amd64 signed-by=/k.gpg] http://o.example/debian bookworm main\n", false, "http://o.example/debian"},
		{"other suite", "deb http://ftp.example/debian bullseye main\n", false, ""},
		{"security only", "deb http://security.example bookworm-security main\n", false, ""},
	}
	for _, tt := range tests {
		if got := mirrorFromSources(tt.data, tt.deb822, "bookworm"); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestLayoutDirMatchesTestutil(t *testing.T) {
	for _, name := range []string{DefaultImage, DefaultDataImage} {
		if got, want := LayoutDir(DefaultCacheDir(), name), testutil.LayoutDir(name); got != want {
			t.Errorf("LayoutDir(%q): got %v, want %v", name, got, want)
		}
	}
}

func TestAppendIfMissing(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir+"/passwd", "root:x:0:0:root:/root:/bin/bash")
	for range 2 {
		if err := appendIfMissing(dir+"/passwd", 2, "1000", "forge:x:1000:1000::/home/forge:/bin/sh\n"); err != nil {
			t.Fatal(err)
		}
	}
	got := readFile(t, dir+"/passwd")
	if want := "root:x:0:0:root:/root:/bin/bash\nforge:x:1000:1000::/home/forge:/bin/sh\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestBootstrapReusesCachedLayout(t *testing.T) {
	cache := t.TempDir()
	root := t.TempDir()
	mustWrite(t, root+"/etc/hello", "x")
	layout := LayoutDir(cache, DefaultImage)
	if err := WriteLayout(t.Context(), layout, root, LayoutConfig{
		RefName: DefaultImage, Labels: map[string]string{"forge.packages": "python3"},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := Bootstrap(t.Context(), BootstrapOptions{CacheDir: cache})
	if err != nil || got != layout {
		t.Fatalf("Bootstrap: got %q, %v; want the cached %q", got, err, layout)
	}
	// Other packages under the same name mean a rebuild, which needs
	// debootstrap: hide it to see the attempt.
	t.Setenv("PATH", "")
	_, err = Bootstrap(t.Context(), BootstrapOptions{CacheDir: cache, Name: DefaultImage, Packages: []string{"python3-numpy"}})
	if err == nil || !strings.Contains(err.Error(), "debootstrap") {
		t.Errorf("Bootstrap with other packages: got %v, want a rebuild attempt", err)
	}
	if _, err := os.Stat(layout + "/index.json"); err != nil {
		t.Errorf("the failed rebuild damaged the cached layout: %v", err)
	}
}
