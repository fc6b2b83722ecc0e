package build

import "context"

// scan runs the configured scanner over the installed packages. It says
// what it did: the result's scan field.
func (b *Builder) scan(ctx context.Context, target string) (string, error) {
	if b.cfg.Scanner == "none" {
		return "not scanned (environment_builder.scanner: none)", nil
	}
	return "not scanned: no scanner installed (pip-audit, trivy or grype)", nil
}
