// Package testutil holds helpers shared by the tests of forge's packages:
// root and kernel-feature requirements that must not silently skip in CI,
// the shared test state directory, and the cached base image layout.
package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcp-forge/forge/internal/cachedir"
)

// InCI reports whether tests run under CI (CI=true) or with
// FORGE_REQUIRE_ALL_TESTS=1, where a missing requirement is a failure, not a skip.
func InCI() bool {
	return os.Getenv("CI") == "true" || os.Getenv("FORGE_REQUIRE_ALL_TESTS") == "1"
}

// Require skips the test with reason when ok is false, or fails it in CI:
// tests that need root or a kernel feature must run there.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("required in CI but unavailable: %s", reason)
	}
	t.Skipf("skipping: %s", reason)
}

// RequiresRoot skips (or, in CI, fails) a test that needs root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "test needs root")
}

// LayoutDir is where `forge image bootstrap` caches the OCI layout of the
// image name ("forge/python:3.11" → <cache>/images/forge_python_3.11).
func LayoutDir(name string) string { return cachedir.Layout(cachedir.Dir(), name) }

// BaseImageLayout returns the cached OCI layout of the bootstrapped image
// name, skipping (failing in CI) when `make image` has not built it.
func BaseImageLayout(t testing.TB, name string) string {
	t.Helper()
	dir := LayoutDir(name)
	_, err := os.Stat(filepath.Join(dir, "index.json"))
	Require(t, err == nil, "image layout "+dir+" missing: run `make image`")
	return dir
}

// StateDir is the state directory shared by the tests of every package, so
// the base image is imported once per machine: FORGE_TEST_STATE_DIR, else
// /var/lib/forge-test.
func StateDir(t testing.TB) string {
	t.Helper()
	return StateDirPath()
}

// StateDirPath is StateDir for code that has no test at hand.
func StateDirPath() string {
	if d := os.Getenv("FORGE_TEST_STATE_DIR"); d != "" {
		return d
	}
	return "/var/lib/forge-test"
}
