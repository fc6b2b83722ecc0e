package scan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testutil"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The findings paths of the three scanners, from their JSON reports.
// Recorded output, because no index reachable here serves pip-audit's
// vulnerability data and trivy and grype are not packaged for Debian 12;
// TestPipAuditReal runs the real pip-audit.
func TestParseReports(t *testing.T) {
	pa, err := parsePipAudit(readFixture(t, "pip-audit.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !pa.Scanned || len(pa.Findings) != 1 || len(pa.Skipped) != 1 {
		t.Fatalf("pip-audit report %+v", pa)
	}
	f := pa.Findings[0]
	if f.Package != "requests" || f.ID != "PYSEC-2018-28" || f.Severity != SeverityUnknown || f.Fixed[0] != "2.20.0" || !strings.HasSuffix(f.Summary, "redirect.") {
		t.Fatalf("finding %+v", f)
	}
	if !strings.Contains(pa.Note, "2 of 3 packages audited") || !strings.Contains(pa.Note, "1 not audited") {
		t.Fatalf("note %q", pa.Note)
	}
	// Unknown severity rejects even at the lowest threshold's strictest reading.
	err = pa.Check(SeverityCritical)
	var rej *RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "CVE-2018-18074") {
		t.Fatalf("Check = %v, want a rejection naming CVE-2018-18074", err)
	}

	tr, err := parseTrivy(readFixture(t, "trivy.json"))
	if err != nil || len(tr.Findings) != 2 {
		t.Fatalf("trivy %+v %v", tr, err)
	}
	if b := tr.Blocking(SeverityCritical); len(b) != 1 || b[0].Package != "evilpkg" || strings.Join(b[0].Fixed, "|") != "1.1|2.0" {
		t.Fatalf("trivy blocking at critical: %+v", b)
	}
	if b := tr.Blocking(SeverityMedium); len(b) != 2 {
		t.Fatalf("trivy blocking at medium: %+v", b)
	}
	gr, err := parseGrype(readFixture(t, "grype.json"))
	if err != nil || len(gr.Findings) != 2 {
		t.Fatalf("grype %+v %v", gr, err)
	}
	if err := gr.Check(SeverityCritical); err != nil {
		t.Fatalf("grype has no critical finding, got %v", err)
	}
	if err := gr.Check(SeverityHigh); err == nil || !strings.Contains(err.Error(), "urllib3 1.23: GHSA-xxxx-high [high]") {
		t.Fatalf("grype at high: %v", err)
	}
	for _, parse := range []func([]byte) (Report, error){parsePipAudit, parseTrivy, parseGrype} {
		if _, err := parse([]byte("Traceback (most recent call last):")); !errors.Is(err, ErrScanner) {
			t.Fatalf("garbage output: %v", err)
		}
	}
}

func TestFind(t *testing.T) {
	none := func(string) (string, error) { return "", exec.ErrNotFound }
	only := func(want string) func(string) (string, error) {
		return func(name string) (string, error) {
			if name == want {
				return "/opt/" + name, nil
			}
			return "", exec.ErrNotFound
		}
	}
	r, err := Scan(context.Background(), Options{LookPath: none}, nil, "")
	if err != nil || r.Scanned || !strings.Contains(r.Note, "no vulnerability scanner is installed") {
		t.Fatalf("auto with nothing installed: %+v %v", r, err)
	}
	r, err = Scan(context.Background(), Options{Scanner: "none"}, nil, "")
	if err != nil || r.Scanned || !strings.Contains(r.Note, "scanner is none") {
		t.Fatalf("none: %+v %v", r, err)
	}
	if p, k, err := Find(Options{LookPath: only("grype")}); err != nil || k != "grype" || p != "/opt/grype" {
		t.Fatalf("auto finds grype: %s %s %v", p, k, err)
	}
	if _, _, err := Find(Options{Scanner: "trivy", LookPath: none}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("configured but missing: %v", err)
	}
	if _, _, err := Find(Options{Scanner: "clamav"}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "allowed: auto, none") {
		t.Fatalf("unknown scanner: %v", err)
	}
	if _, err := ParseSeverity("urgent"); !errors.Is(err, ErrConfig) {
		t.Fatalf("ParseSeverity: %v", err)
	}
}

// Names and versions come from the sandbox: nothing that could add a line
// or an option to the scanner's requirements file passes.
func TestCheckPackagesRefusesInjection(t *testing.T) {
	for _, p := range []Package{
		{"requests", "2.0\n--index-url https://evil.example/simple"},
		{"-r", "1"},
		{"a b", "1"},
		{"ok", ""},
		{strings.Repeat("a", 200), "1"},
		{"ok", "1;rm -rf /"},
	} {
		if err := CheckPackages([]Package{p}); !errors.Is(err, ErrPackage) {
			t.Errorf("CheckPackages(%q) = %v", p, err)
		}
	}
	if err := CheckPackages([]Package{{"zope.interface", "6.1"}, {"torch", "2.3.0+cpu"}, {"a_b", "1!2.0.post1"}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "pip-audit")
	os.WriteFile(fake, []byte("#!/bin/sh\necho should not run >&2\nexit 3\n"), 0o755)
	if _, err := Scan(context.Background(), Options{Scanner: fake}, []Package{{"x", "1\n-e ."}}, ""); !errors.Is(err, ErrPackage) {
		t.Fatalf("Scan ran with an injected version: %v", err)
	}
}

// A scanner that hangs is stopped at the timeout; one that crashes is an
// error naming it. Shell stand-ins for the scanner's failure modes.
func TestScannerFailures(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "hang", "trivy")
	crash := filepath.Join(dir, "crash", "grype")
	os.MkdirAll(filepath.Dir(hang), 0o755)
	os.MkdirAll(filepath.Dir(crash), 0o755)
	os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755)
	os.WriteFile(crash, []byte("#!/bin/sh\necho 'grype: database is corrupt' >&2\nexit 2\n"), 0o755)
	start := time.Now()
	_, err := Scan(context.Background(), Options{Scanner: hang, Timeout: 300 * time.Millisecond}, nil, dir)
	if !errors.Is(err, ErrScanner) || !strings.Contains(err.Error(), "did not finish in time") {
		t.Fatalf("hang: %v", err)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("the timeout did not stop the scanner")
	}
	_, err = Scan(context.Background(), Options{Scanner: crash}, nil, dir)
	if !errors.Is(err, ErrScanner) || !strings.Contains(err.Error(), "database is corrupt") {
		t.Fatalf("crash: %v", err)
	}
}

// pipAuditPath is the pip-audit that scripts/install-deps.sh installs for
// the tests (FORGE_TEST_PIP_AUDIT overrides it).
func pipAuditPath(t *testing.T) string {
	if p := os.Getenv("FORGE_TEST_PIP_AUDIT"); p != "" {
		return p
	}
	cache := os.Getenv("FORGE_CACHE_DIR")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "forge")
	}
	p := filepath.Join(cache, "tools", "pip-audit", "bin", "pip-audit")
	if _, err := os.Stat(p); err != nil {
		testutil.Require(t, false, fmt.Sprintf("pip-audit missing at %s (scripts/install-deps.sh installs it)", p))
	}
	return p
}

// The real pip-audit against the configured index. Where the index serves
// vulnerability data, requests 2.19.0 (CVE-2018-18074) is rejected by name;
// where it does not (this machine's PyPI mirror serves the simple API
// only), the report must say the environment was not scanned, never that
// it is clean.
func TestPipAuditReal(t *testing.T) {
	path := pipAuditPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := Scan(ctx, Options{Scanner: path}, []Package{{"requests", "2.19.0"}, {"six", "1.16.0"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", r.Scanner, r.Note)
	if !strings.HasPrefix(r.Scanner, "pip-audit ") {
		t.Fatalf("scanner %q", r.Scanner)
	}
	if !r.Scanned {
		if len(r.Skipped) != 2 || !strings.HasPrefix(r.Note, "not scanned") || len(r.Findings) != 0 {
			t.Fatalf("unscanned report %+v", r)
		}
		return
	}
	if err := r.Check(SeverityCritical); err == nil || !strings.Contains(err.Error(), "requests 2.19.0") {
		t.Fatalf("requests 2.19.0 was not rejected: %+v", r)
	}
}
