package stress

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
)

// TestBoundaryPolicyResolvedSet (issue 28, finding 4): the package policy
// holds for the full resolved set, not only the requested names. Real
// builds from the real index: python-dateutil 2.9.0.post0 requires six,
// and pyjwt 2.9.0's extra crypto requires cryptography. A blocked or
// unlisted dependency is refused before anything is installed, with the
// chain that pulled it in; an allowed set is installed exactly as
// resolved. The last build leaves environment_builder.ca_bundle empty:
// the host's trust store is the default (this machine's index is behind a
// TLS-inspecting proxy that only the host's store trusts).
func TestBoundaryPolicyResolvedSet(t *testing.T) {
	state := dedicatedStateDir(t)
	ctx := context.Background()
	local := engine.LocalPrincipal
	engineWith := func(t *testing.T, allow, block []string, ca string) *engine.Engine {
		eng, _ := engineAt(t, state, func(c *profiles.Config) {
			b := &c.EnvironmentBuilder
			b.Enabled, b.AllowedPackages, b.BlockedPackages, b.CABundle = true, allow, block, ca
		})
		return eng
	}
	const ca = "/etc/ssl/certs/ca-certificates.crt"
	for _, tc := range []struct {
		name         string
		allow, block []string
		packages     []string
		want         string // in the refusal
		absent       string // a distribution that must not be in the uv cache
	}{
		{"blocked dependency", []string{"*"}, []string{"six"}, []string{"python-dateutil==2.9.0.post0"},
			`python-dateutil requires six, blocked by pattern "six"`, "six"},
		{"blocked through an extra", []string{"*"}, []string{"cryptography"}, []string{"PyJWT[crypto]==2.9.0"},
			`pyjwt[crypto] requires cryptography, blocked by pattern "cryptography"`, "cryptography"},
		{"dependency not allowed", []string{"python-dateutil"}, nil, []string{"python-dateutil==2.9.0.post0"},
			`python-dateutil requires six, which matches no allowlist pattern`, "six"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := engineWith(t, tc.allow, tc.block, ca)
			name := "t-resolved-" + strings.ReplaceAll(tc.name, " ", "-")
			_, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: tc.packages})
			if !errors.Is(err, build.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("build of %v: got %v, want a refusal naming %q", tc.packages, err, tc.want)
			}
			t.Log(err)
			if _, err := eng.Store().Lookup(ctx, build.ImageName("local", name)); err == nil {
				t.Errorf("the refused build left an image")
			}
			if n, err := eng.Store().ScratchCount(); err != nil || n != 0 {
				t.Errorf("scratch containers left: %d (%v)", n, err)
			}
			// Resolving reads metadata only: no archive of the refused
			// package was downloaded or unpacked, let alone installed.
			if got := unpacked(t, filepath.Join(state, "build", "cache"), tc.absent); got != "" {
				t.Errorf("the refused package %s was fetched: %s", tc.absent, got)
			}
		})
	}
	t.Run("allowed set installed as resolved", func(t *testing.T) {
		eng := engineWith(t, []string{"python-dateutil", "six"}, nil, "")
		name := "t-resolved-ok"
		// six named too: another content hash than the refused requests,
		// so this is a real build, from the index, whatever ran before.
		res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"python-dateutil==2.9.0.post0", "six"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Cached {
			t.Fatalf("a cache hit, want a build from the index")
		}
		defer eng.RemoveEnvironment(ctx, local, name)
		var names []string
		for _, p := range res.Installed {
			names = append(names, strings.ToLower(p.Name))
		}
		if strings.Join(names, " ") != "python-dateutil six" {
			t.Errorf("installed %+v, want python-dateutil and six", res.Installed)
		}
		out, err := eng.Execute(ctx, engine.Request{Principal: local, Image: name,
			Code: "import dateutil.parser\nprint(dateutil.parser.parse('2024-02-29').year)"})
		if err != nil {
			t.Fatal(err)
		}
		if !out.Success || strings.TrimSpace(out.Stdout) != "2024" {
			t.Errorf("run in the environment: %+v", out)
		}
		// The check above looks where an installed archive shows up.
		if unpacked(t, filepath.Join(state, "build", "cache"), "six") == "" {
			t.Errorf("six was installed, but unpacked does not find it in the uv cache")
		}
	})
}

// unpacked finds a distribution's files (name.py, name/, name-*.dist-info)
// in a uv cache's unpacked archives, or "".
func unpacked(t *testing.T, cache, name string) string {
	t.Helper()
	var found string
	filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" {
			return nil
		}
		if !strings.Contains(p, "/archive-v") {
			return nil
		}
		b := d.Name()
		if b == name+".py" || (d.IsDir() && (b == name || strings.HasPrefix(b, name+"-") && strings.HasSuffix(b, ".dist-info"))) {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("no uv cache at %s: %v", cache, err)
	}
	return found
}
