package build

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/mcp-forge/forge/runtime/build/scan"
)

// scan runs the configured scanner over the installed packages (pip-audit)
// or the directory they went to (trivy, grype), and rejects the build on a
// critical finding (or one of unknown severity: pip-audit gives none). It
// returns what it did, for the result's scan field.
func (b *Builder) scan(ctx context.Context, installed []Package, hostTarget string) (string, error) {
	pkgs := make([]scan.Package, len(installed))
	for i, p := range installed {
		pkgs[i] = scan.Package{Name: p.Name, Version: p.Version}
	}
	rep, err := scan.Scan(ctx, scan.Options{Scanner: b.cfg.Scanner, Env: os.Environ()}, pkgs, hostTarget)
	if err != nil {
		return "", fmt.Errorf("scanning (environment_builder.scanner %s): %w", b.cfg.Scanner, err)
	}
	if err := rep.Check(scan.SeverityCritical); err != nil {
		var rej *scan.RejectedError
		if errors.As(err, &rej) {
			return "", fmt.Errorf("%w: %w", ErrScan, err)
		}
		return "", err
	}
	if !rep.Scanned {
		return rep.Note, nil
	}
	note := fmt.Sprintf("scanned with %s: %d finding(s) below critical", rep.Scanner, len(rep.Findings))
	if rep.Note != "" {
		note += "; " + rep.Note
	}
	return note, nil
}
