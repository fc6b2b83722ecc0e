// Package scan runs a vulnerability scanner over a built environment and
// decides whether its findings reject the build.
//
// Scanners are found on the host: pip-audit (which asks the package index's
// vulnerability data for each installed name and version), trivy or grype
// (which scan the environment's files). Nothing here trusts what it is
// given: package names and versions come from inside a build sandbox, so
// they are checked before they reach a scanner's input, and a scanner's
// output is read bounded. With no scanner, the report says the environment
// was not scanned rather than that it is clean.
package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcp-forge/forge/internal/lazyre"
)

// Severity of a finding, lowercase. SeverityUnknown is a finding whose
// scanner gives none (pip-audit never does).
type Severity string

// The severities, from most to least severe.
const (
	SeverityCritical Severity = "critical"
	SeverityHigh     Severity = "high"
	SeverityMedium   Severity = "medium"
	SeverityLow      Severity = "low"
	SeverityUnknown  Severity = "unknown"
)

func (s Severity) rank() int {
	switch s {
	case SeverityCritical:
		return 4
	case SeverityHigh:
		return 3
	case SeverityMedium:
		return 2
	case SeverityLow:
		return 1
	}
	return 0
}

// ParseSeverity reads a configured rejection threshold.
func ParseSeverity(s string) (Severity, error) {
	switch v := Severity(strings.ToLower(s)); v {
	case SeverityCritical, SeverityHigh, SeverityMedium, SeverityLow:
		return v, nil
	}
	return "", fmt.Errorf("%w: severity %q; allowed: critical, high, medium, low", ErrConfig, s)
}

// Package is one installed distribution.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Finding is one known vulnerability of an installed package.
type Finding struct {
	Package  string   `json:"package"`
	Version  string   `json:"version"`
	ID       string   `json:"id"`
	Aliases  []string `json:"aliases,omitempty"`
	Severity Severity `json:"severity"`
	Fixed    []string `json:"fixed_versions,omitempty"`
	Summary  string   `json:"summary,omitempty"`
}

func (f Finding) String() string {
	s := fmt.Sprintf("%s %s: %s", f.Package, f.Version, f.ID)
	if len(f.Aliases) > 0 {
		s += " (" + strings.Join(f.Aliases, ", ") + ")"
	}
	s += " [" + string(f.Severity) + "]"
	if len(f.Fixed) > 0 {
		s += ", fixed in " + strings.Join(f.Fixed, ", ")
	}
	return s
}

// Report is the outcome of a scan.
type Report struct {
	// Scanner is the tool and version that ran; empty when none did.
	Scanner  string    `json:"scanner,omitempty"`
	Scanned  bool      `json:"scanned"`
	Findings []Finding `json:"findings,omitempty"`
	// Skipped are packages the scanner could not audit, with its reason.
	Skipped []string `json:"skipped,omitempty"`
	// Note says, in one sentence, what the scan covered.
	Note string `json:"note"`
}

// Blocking are the findings at or above threshold. A finding of unknown
// severity counts as critical: pip-audit reports no severity, and a
// scanner that cannot say how bad a known vulnerability is must not let
// it through.
func (r Report) Blocking(threshold Severity) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == SeverityUnknown || f.Severity.rank() >= threshold.rank() {
			out = append(out, f)
		}
	}
	return out
}

// Errors.
var (
	ErrConfig   = errors.New("invalid scanner configuration")
	ErrScanner  = errors.New("vulnerability scanner failed")
	ErrRejected = errors.New("environment rejected by the vulnerability scan")
	ErrPackage  = errors.New("invalid installed package")
)

// RejectedError lists the findings that rejected a build.
type RejectedError struct {
	Threshold Severity
	Findings  []Finding
}

func (e *RejectedError) Error() string {
	parts := make([]string, 0, len(e.Findings))
	for _, f := range e.Findings {
		parts = append(parts, f.String())
	}
	return fmt.Sprintf("%v: %d finding(s) at or above %s: %s", ErrRejected, len(e.Findings), e.Threshold, strings.Join(parts, "; "))
}

func (e *RejectedError) Unwrap() error { return ErrRejected }

// Check returns a *RejectedError when the report has blocking findings.
func (r Report) Check(threshold Severity) error {
	if b := r.Blocking(threshold); len(b) > 0 {
		return &RejectedError{Threshold: threshold, Findings: b}
	}
	return nil
}

// Options selects and runs a scanner.
type Options struct {
	// Scanner is auto (the first of pip-audit, trivy, grype found), a tool
	// name, an absolute path to one of them, or none.
	Scanner string
	// Timeout bounds one scan (default 5 minutes).
	Timeout time.Duration
	// Env is the scanner's environment (nil = forge's own), e.g. a proxy.
	Env []string
	// LookPath finds tools (nil = exec.LookPath); tests point it elsewhere.
	LookPath func(string) (string, error)
}

// Kinds of scanner Find knows.
var kinds = []string{"pip-audit", "trivy", "grype"}

// Find resolves Options.Scanner to a tool path and kind; kind is "" when
// no scanner is to run (none, or auto with nothing installed).
func Find(opts Options) (path, kind string, err error) {
	look := opts.LookPath
	if look == nil {
		look = exec.LookPath
	}
	switch s := opts.Scanner; {
	case s == "none":
		return "", "", nil
	case s == "" || s == "auto":
		for _, k := range kinds {
			if p, err := look(k); err == nil {
				return p, k, nil
			}
		}
		return "", "", nil
	case slices.Contains(kinds, s):
		p, err := look(s)
		if err != nil {
			return "", "", fmt.Errorf("%w: scanner %q is configured but not installed: %v", ErrConfig, s, err)
		}
		return p, s, nil
	case filepath.IsAbs(s) && slices.Contains(kinds, filepath.Base(s)):
		if _, err := os.Stat(s); err != nil {
			return "", "", fmt.Errorf("%w: scanner %s: %v", ErrConfig, s, err)
		}
		return s, filepath.Base(s), nil
	default:
		return "", "", fmt.Errorf("%w: scanner %q; allowed: auto, none, pip-audit, trivy, grype, or an absolute path to one of them", ErrConfig, s)
	}
}

// maxOutput bounds what a scanner may print.
const maxOutput = 16 << 20

var (
	safeName    = lazyre.New(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$`)
	safeVersion = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._+!-]{0,63}$`)
)

// CheckPackages refuses a name or version that is not one (they come from
// the sandbox and become scanner input).
func CheckPackages(pkgs []Package) error {
	for _, p := range pkgs {
		if !safeName.MatchString(p.Name) || !safeVersion.MatchString(p.Version) {
			return fmt.Errorf("%w: %.80q %.80q", ErrPackage, p.Name, p.Version)
		}
	}
	return nil
}

// Scan runs the configured scanner over the packages (pip-audit) or the
// environment's root directory (trivy, grype).
func Scan(ctx context.Context, opts Options, pkgs []Package, rootDir string) (Report, error) {
	path, kind, err := Find(opts)
	if err != nil {
		return Report{}, err
	}
	if kind == "" {
		note := "not scanned: no vulnerability scanner is installed (pip-audit, trivy or grype)"
		if opts.Scanner == "none" {
			note = "not scanned: environment_builder.scanner is none"
		}
		return Report{Note: note}, nil
	}
	if err := CheckPackages(pkgs); err != nil {
		return Report{}, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch kind {
	case "pip-audit":
		return pipAudit(ctx, path, opts.Env, pkgs)
	case "trivy":
		out, err := run(ctx, opts.Env, path, "rootfs", "--format", "json", "--scanners", "vuln", "--quiet", rootDir)
		if err != nil {
			return Report{}, err
		}
		r, err := parseTrivy(out)
		r.Scanner = "trivy"
		return r, err
	default:
		out, err := run(ctx, opts.Env, path, "dir:"+rootDir, "-o", "json", "-q")
		if err != nil {
			return Report{}, err
		}
		r, err := parseGrype(out)
		r.Scanner = "grype"
		return r, err
	}
}

// run runs a scanner and returns its stdout, bounded. Scanners exit 1 when
// they find something; only output that does not parse is a failure.
func run(ctx context.Context, env []string, path string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &stdout, n: maxOutput}
	cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %s did not finish in time: %v", ErrScanner, filepath.Base(path), ctx.Err())
	}
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		return nil, fmt.Errorf("%w: %s: %v: %s", ErrScanner, filepath.Base(path), err, lastLine(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// limitedWriter keeps the first n bytes and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
