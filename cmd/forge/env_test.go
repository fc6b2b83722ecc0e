package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// TestEnvCommands builds, lists, shows, uses and removes an environment
// from the shell (offline, from a wheelhouse the test makes), and checks
// the exit codes of what goes wrong.
func TestEnvCommands(t *testing.T) {
	testutil.RequiresRoot(t)
	importBase(t)
	wheels := t.TempDir()
	value := fmt.Sprintf("v%d", time.Now().UnixNano())
	testenv.MakeWheel(t, wheels, "forgetestpkg", "1.0", value)
	conf := filepath.Join(t.TempDir(), "forge.yaml")
	write := func(extra string) {
		body := fmt.Sprintf("environment_builder:\n  offline: true\n  wheelhouse: %s\n  allowed_packages: [forgetestpkg]\n%s", wheels, extra)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	name := fmt.Sprintf("t-cli-%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { forge(t, "", "--config", conf, "env", "rm", name) })

	code, stdout, stderr := forge(t, "", "--config", conf, "env", "build", name, "forgetestpkg==1.0")
	if code != exitOK || !strings.Contains(stdout, "forge/custom:"+name+" built") || !strings.Contains(stderr, "[6/6]") {
		t.Fatalf("env build: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = forge(t, "", "--config", conf, "env", "build", name, "forgetestpkg==1.0")
	if code != exitOK || !strings.Contains(stdout, "cached") {
		t.Errorf("second env build: exit %d %q, want a cache hit", code, stdout)
	}
	code, stdout, _ = forge(t, "", "env", "ls", "--json")
	var list []struct {
		Name      string   `json:"name"`
		Requested []string `json:"requested"`
		Size      int64    `json:"size"`
		LayerSize int64    `json:"layer_size"`
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &list) != nil || !strings.Contains(stdout, `"`+name+`"`) {
		t.Errorf("env ls --json: exit %d %q", code, stdout)
	}
	// The environment adds one small wheel to a base of tens of MB: its
	// layer is a tiny part of the image, and both are shown.
	for _, e := range list {
		if e.Name == name && (e.LayerSize <= 0 || e.LayerSize > 1<<20 || e.Size < 10<<20) {
			t.Errorf("env ls --json: %s has layer_size %d and size %d, want a layer of a few KB in an image of tens of MB", name, e.LayerSize, e.Size)
		}
	}
	code, stdout, _ = forge(t, "", "env", "ls")
	if code != exitOK || !strings.Contains(stdout, "ADDED") || !strings.Contains(stdout, "TOTAL") {
		t.Errorf("env ls: exit %d %q, want ADDED and TOTAL columns", code, stdout)
	}
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			if k, m := strings.Index(line, "KiB"), strings.Index(line, "MiB"); k < 0 || m < k {
				t.Errorf("env ls: row %q, want the added layer in KiB, then the total in MiB", line)
			}
		}
	}
	if code, stdout, _ = forge(t, "", "env", "show", name); code != exitOK || !strings.Contains(stdout, `"forgetestpkg==1.0"`) {
		t.Errorf("env show: exit %d %q", code, stdout)
	}
	if code, stdout, _ = forge(t, "", "run", "--image", name, "import forgetestpkg; print(forgetestpkg.VALUE)"); code != exitOK || strings.TrimSpace(stdout) != value {
		t.Errorf("run --image %s: exit %d %q", name, code, stdout)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"env", "build", "bad_name", "forgetestpkg"}, exitUsage, "letters, digits and hyphens"},
		{[]string{"env", "build", "t-cli-x", "numpy"}, exitUsage, "environment_builder.allowed_packages"},
		{[]string{"env", "build", "t-cli-x", "forgetestpkg==9"}, exitUsage, "forgetestpkg"},
		{[]string{"env", "build", "t-cli-x"}, exitUsage, "name packages, or a --preset"},
		{[]string{"env", "build", "t-cli-x", "--preset", "nope"}, exitUsage, `unknown preset "nope"; configured: data-science, web (environment_builder.presets)`},
		{[]string{"env", "build", "t-cli-x", "--template", "nope"}, exitUsage, `unknown preset "nope"`}, // --preset's old name
		{[]string{"env", "build", "t-cli-x", "--preset", "web", "--template", "web"}, exitUsage, "--template is the old name of --preset, and both are given"},
		{[]string{"env", "show", "t-cli-missing"}, exitUsage, "environment not found"},
		{[]string{"env", "frob"}, exitUsage, "unknown subcommand"},
	} {
		code, _, stderr := forge(t, "", append([]string{"--config", conf}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d %q, want exit %d naming %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// TestGCRemovesUnusedEnvironments runs forge gc on a state dir of its own:
// on the shared one it would remove the environments of tests running in
// parallel.
func TestGCRemovesUnusedEnvironments(t *testing.T) {
	testutil.RequiresRoot(t)
	state := t.TempDir()
	for _, d := range []string{filepath.Dir(state), state} {
		os.Chmod(d, 0o711) // the sandbox's root traverses it
	}
	wheels := t.TempDir()
	testenv.MakeWheel(t, wheels, "forgetestpkg", "1.0", "x")
	conf := filepath.Join(t.TempDir(), "forge.yaml")
	write := func(age string) {
		body := fmt.Sprintf("environment_builder:\n  offline: true\n  wheelhouse: %s\n  allowed_packages: [forgetestpkg]\n  gc_age: %s\n", wheels, age)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("720h")
	cli := func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := run(append([]string{"--state-dir", state, "--config", conf}, args...), strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	layout := testutil.BaseImageLayout(t, testenv.BaseImage)
	if code, _, stderr := cli("image", "import", "oci:"+layout); code != exitOK {
		t.Fatalf("import: exit %d %s", code, stderr)
	}
	if code, _, stderr := cli("env", "build", "old", "forgetestpkg"); code != exitOK {
		t.Fatalf("env build: exit %d %s", code, stderr)
	}
	if code, stdout, stderr := cli("gc"); code != exitOK || !strings.Contains(stdout, "removed: 0") {
		t.Errorf("gc within gc_age: exit %d %q %q, want nothing removed", code, stdout, stderr)
	}
	write("1ms")
	if code, stdout, stderr := cli("gc"); code != exitOK || !strings.Contains(stdout, "forge/custom:old") {
		t.Errorf("gc: exit %d %q %q, want forge/custom:old removed", code, stdout, stderr)
	}
	if code, _, stderr := cli("env", "rm", "old"); code != exitUsage || !strings.Contains(stderr, "not found") {
		t.Errorf("env rm after gc: exit %d %q", code, stderr)
	}
}

// A config that still says environment_builder.templates (the old name of
// environment_builder.presets) works, with one warning naming the new key;
// one that sets both is refused, naming both.
func TestEnvPresetsRenamed(t *testing.T) {
	testutil.RequiresRoot(t)
	conf := filepath.Join(t.TempDir(), "forge.yaml")
	write := func(body string) {
		if err := os.WriteFile(conf, []byte("environment_builder:\n  allowed_packages: [forgetestpkg]\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("  templates:\n    mine: {packages: [forgetestpkg]}\n")
	code, _, stderr := forge(t, "", "--config", conf, "env", "build", "t-cli-x", "--preset", "nope")
	if want := `unknown preset "nope"; configured: data-science, mine, web (environment_builder.presets)`; code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("old key: exit %d %q, want exit %d naming %q", code, stderr, exitUsage, want)
	}
	if n := strings.Count(stderr, "environment_builder.templates was renamed environment_builder.presets"); n != 1 || !strings.Contains(stderr, "level=WARN") {
		t.Errorf("old key: %d warnings naming environment_builder.presets in %q, want 1", n, stderr)
	}

	write("  templates:\n    mine: {packages: [forgetestpkg]}\n  presets:\n    yours: {packages: [forgetestpkg]}\n")
	code, _, stderr = forge(t, "", "--config", conf, "env", "ls")
	if want := "environment_builder.templates: invalid value: set together with environment_builder.presets (line 5), its new name: keep only environment_builder.presets (line 3)"; code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("both keys: exit %d %q, want exit %d naming %q", code, stderr, exitUsage, want)
	}
}
