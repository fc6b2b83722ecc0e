package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

func TestMain(m *testing.M) {
	if hooks.Reexec() {
		return
	}
	os.Exit(m.Run())
}

// forge runs the CLI in-process against the shared test state dir.
func forge(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"--state-dir", testutil.StateDir(t)}, args...)
	code = run(full, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"run"}, "no code given"},
		{[]string{"run", "--timeout", "x", "1"}, "invalid value"},
		{[]string{"run", "--memory", "lots", "1"}, "invalid memory limit"},
		{[]string{"run", "-f", "/nonexistent/file.py"}, "reading code"},
		{[]string{"image"}, "missing subcommand"},
		{[]string{"image", "pull", "python:3.12-slim"}, `did you mean "docker://python:3.12-slim"`},
		{[]string{"image", "import", "ftp://x"}, "accepted forms"},
		{[]string{"--log-level", "loud", "version"}, "--log-level"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := forge(t, "", tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d stderr %q, want exit 2 naming %q", code, stderr, tc.want)
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	testutil.RequiresRoot(t)
	importBase(t)
	code, out, _ := forge(t, "", "run", "print('hi')")
	if code != exitOK || out != "hi\n" {
		t.Errorf("print: exit %d stdout %q", code, out)
	}
	code, _, stderr := forge(t, "", "run", "1/0")
	if code != exitUserCode || !strings.Contains(stderr, "ZeroDivisionError") {
		t.Errorf("1/0: exit %d stderr %q", code, stderr)
	}
	code, out, _ = forge(t, "print(6*7)", "run", "--json", "-")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != exitOK || res["stdout"] != "42\n" {
		t.Errorf("--json from stdin: exit %d, %v, %q", code, err, out)
	}
	if n := strings.Count(strings.TrimSpace(out), "\n"); n != 0 {
		t.Errorf("--json printed %d lines, want exactly one object", n+1)
	}
	code, _, stderr = forge(t, "", "run", "--timeout", "1", "while True: pass")
	if code != exitUserCode || !strings.Contains(stderr, "TimeoutError") {
		t.Errorf("timeout: exit %d stderr %q", code, stderr)
	}
	code, _, stderr = forge(t, "", "run", "--memory", "64g", "1")
	if code != exitUsage || !strings.Contains(stderr, "exceeds the maximum") {
		t.Errorf("memory over max: exit %d stderr %q", code, stderr)
	}
	code, _, stderr = forge(t, "", "run", "--image", "forge/missing:1", "1")
	if code != exitUsage || !strings.Contains(stderr, "not found") {
		t.Errorf("missing image: exit %d stderr %q", code, stderr)
	}
}

func TestRegistryUnreachable(t *testing.T) {
	testutil.RequiresRoot(t)
	start := time.Now()
	code, _, stderr := forge(t, "", "image", "pull", "docker://forge-test.invalid/none:1")
	if code != exitInfra || !strings.Contains(stderr, "could not be reached") || !strings.Contains(stderr, "forge image import") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("took %s, want under 15s", el)
	}
}

func TestImageLsAndDoctor(t *testing.T) {
	testutil.RequiresRoot(t)
	importBase(t)
	code, out, _ := forge(t, "", "image", "ls", "--json")
	var imgs []rootfs.Image
	if err := json.Unmarshal([]byte(out), &imgs); err != nil || code != exitOK {
		t.Fatalf("image ls --json: exit %d %v %q", code, err, out)
	}
	found := false
	for _, im := range imgs {
		for _, n := range im.Names {
			found = found || n == testenv.BaseImage
		}
	}
	if !found {
		t.Errorf("image ls: %s missing from %+v", testenv.BaseImage, imgs)
	}
	code, out, _ = forge(t, "", "doctor", "--json")
	var checks []check
	if err := json.Unmarshal([]byte(out), &checks); err != nil || len(checks) < 10 {
		t.Fatalf("doctor --json: exit %d %v %q", code, err, out)
	}
	for _, c := range checks {
		if !c.Found {
			t.Errorf("doctor on the CI host: %s missing (%s)", c.Name, c.Detail)
		}
	}
}

func importBase(t *testing.T) {
	t.Helper()
	layout := testutil.BaseImageLayout(t, testenv.BaseImage)
	if code, _, stderr := forge(t, "", "image", "import", "oci:"+layout); code != exitOK {
		t.Fatalf("import: exit %d %s", code, stderr)
	}
}

// forge image import prints its progress on stderr: each blob when it
// starts, its bytes while it is read (at most every half second), when it
// is done, and the imported image; stdout keeps only the result.
func TestImportProgress(t *testing.T) {
	testutil.RequiresRoot(t)
	layout := testutil.BaseImageLayout(t, testenv.BaseImage)
	// The built binary, not run(): under -race the import takes a minute.
	// A store of its own: in the shared one the image is present, and an
	// import of a present image prints nothing.
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(t.Context(), filepath.Join(testenv.RepoRoot(), "bin", "forge"),
		"--state-dir", t.TempDir(), "image", "import", "oci:"+layout)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("import: %v %s", err, errb.String())
	}
	var started, read, done, imported int
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		switch {
		case !strings.HasPrefix(line, "importing oci:"+layout+": ") && !strings.HasPrefix(line, "imported "):
			t.Errorf("stderr line %q is not an import progress line", line)
		case strings.HasSuffix(line, "MiB)") && strings.Contains(line, ": started ("):
			started++
		case strings.Contains(line, " %)"):
			read++
		case strings.Contains(line, ": done ("):
			done++
		case strings.HasPrefix(line, "imported oci:"+layout+" as "):
			imported++
		}
	}
	// The base image has one layer and a config.
	if started < 2 || read < 1 || done < 2 || imported != 1 {
		t.Errorf("got %d started, %d read, %d done, %d imported lines, want >= 2, >= 1, >= 2, 1:\n%s", started, read, done, imported, errb.String())
	}
	if strings.Contains(out.String(), "importing") {
		t.Errorf("progress on stdout: %q", out.String())
	}
}
