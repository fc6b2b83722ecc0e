package scan

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// pipAudit runs pip-audit over pinned requirements, without installing
// anything (--no-deps --disable-pip): it asks the index's vulnerability
// data for each name and version.
func pipAudit(ctx context.Context, path string, env []string, pkgs []Package) (Report, error) {
	f, err := os.CreateTemp("", "forge-scan-*.txt")
	if err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrScanner, err)
	}
	defer os.Remove(f.Name())
	for _, p := range pkgs {
		fmt.Fprintf(f, "%s==%s\n", p.Name, p.Version)
	}
	if err := f.Close(); err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrScanner, err)
	}
	version := "pip-audit"
	if out, err := run(ctx, env, path, "--version"); err == nil {
		version = strings.TrimSpace(string(out))
	}
	out, err := run(ctx, env, path, "--format", "json", "--progress-spinner", "off", "--no-deps", "--disable-pip", "-r", f.Name())
	if err != nil {
		return Report{}, err
	}
	r, err := parsePipAudit(out)
	r.Scanner = version
	return r, err
}

type pipAuditOutput struct {
	Dependencies []struct {
		Name       string `json:"name"`
		Version    string `json:"version"`
		SkipReason string `json:"skip_reason"`
		Vulns      []struct {
			ID          string   `json:"id"`
			FixVersions []string `json:"fix_versions"`
			Aliases     []string `json:"aliases"`
			Description string   `json:"description"`
		} `json:"vulns"`
	} `json:"dependencies"`
}

func parsePipAudit(out []byte) (Report, error) {
	var doc pipAuditOutput
	if err := json.Unmarshal(out, &doc); err != nil {
		return Report{}, fmt.Errorf("%w: pip-audit printed no JSON report: %v", ErrScanner, err)
	}
	r := Report{Scanned: true}
	audited := 0
	for _, d := range doc.Dependencies {
		if d.SkipReason != "" {
			r.Skipped = append(r.Skipped, clip(d.SkipReason, 300))
			continue
		}
		audited++
		for _, v := range d.Vulns {
			r.Findings = append(r.Findings, Finding{
				Package: d.Name, Version: d.Version, ID: clip(v.ID, 64), Aliases: clipAll(v.Aliases),
				Severity: SeverityUnknown, Fixed: clipAll(v.FixVersions), Summary: clip(firstSentence(v.Description), 200),
			})
		}
	}
	r.Note = fmt.Sprintf("scanned with pip-audit: %d of %d packages audited, %d known vulnerabilities", audited, len(doc.Dependencies), len(r.Findings))
	if len(r.Skipped) > 0 {
		r.Note += fmt.Sprintf("; %d not audited (the index has no vulnerability data for them)", len(r.Skipped))
	}
	if audited == 0 && len(doc.Dependencies) > 0 {
		r.Scanned = false
		r.Note = "not scanned: pip-audit could audit none of the packages (the index serves no vulnerability data for them)"
	}
	return r, nil
}

func firstSentence(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, ". "); i > 0 {
		return s[:i+1]
	}
	return s
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func clipAll(s []string) []string {
	if len(s) > 16 {
		s = s[:16]
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = clip(v, 64)
	}
	return out
}
