package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
)

// TestContainerMode runs the session, hibernation, execution, code-mode and
// outside-attack tests again with the engine's sandboxes made as containers
// (sandbox.mode: container), as the rest of the suite runs in zygote mode,
// the default: the pool, sessions, hibernation and the bridge see a child as
// they see a container. TestSecondPython runs both of its images (Debian 13:
// another glibc under zygote mode's C helper).
func TestContainerMode(t *testing.T) {
	testenv.RunInMode(t, sandbox.ModeContainer, "^(TestSession.*|TestDocumentStateAndFiles|TestHibernation.*|TestCodeMode.*|TestSecondPython|TestOtherLocalUser)$", 14)
}

// TestZygotePerTenant: with sandbox.zygote_per_tenant on (or auto with
// tokens configured), two tenants' sandboxes, stateless and sessions, come
// from templates of their own, which share no memory with the other's
// children (docs/security.md, "Zygote siblings"); off (auto without tokens)
// they come from one template.
func TestZygotePerTenant(t *testing.T) {
	if testenv.Mode() != sandbox.ModeZygote {
		t.Skip("zygote mode only")
	}
	a, b := engine.Principal{Tenant: "tenant-a"}, engine.Principal{Tenant: "tenant-b"}
	for _, tc := range []struct {
		name      string
		setting   string
		tokens    bool
		templates int
	}{
		{"on", "on", false, 2},
		{"auto with tokens", "auto", true, 2},
		{"off", "off", true, 1},
		{"auto without tokens", "auto", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := testenv.Engine(t, false, func(c *profiles.Config) {
				c.Sandbox.ZygotePerTenant = tc.setting
				if tc.tokens {
					c.Server.Auth.Tokens = []profiles.TokenEntry{{Tenant: "tenant-a", Scopes: []string{"execute"}, SHA256: strings.Repeat("0", 64)}}
				}
			})
			ctx := context.Background()
			for _, p := range []engine.Principal{a, b, a, b} {
				for _, session := range []bool{false, true} {
					res, err := eng.Execute(ctx, engine.Request{Principal: p, Code: "print(1)", NewSession: session})
					if err != nil || !res.Success {
						t.Fatalf("%s (session %v): %v %+v", p, session, err, res)
					}
				}
			}
			if st := eng.Runtime().ZygoteStats(); st.Templates != tc.templates || st.Forks != 8 {
				t.Errorf("zygote stats %+v, want %d templates for 8 forks of two tenants", st, tc.templates)
			}
		})
	}
}
