package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/egress"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/server/tenant"
)

// A tenant's egress policy narrows the profile's; its requests may narrow
// it further, never widen it; principals that are not token tenants keep
// the profile's.
func TestTenantEgressNarrowsProfile(t *testing.T) {
	stub := newStub()
	stub.cfg.Execution.Egress = []string{"pypi.org:443", "*.example.com:443"}
	stub.cfg.Server.Tenants.Default.Egress = []string{"pypi.org:80,443"}
	stub.cfg.Server.Tenants.Overrides = map[string]profiles.TenantLimits{"wide": {Egress: []string{"*.example.com:80,443"}}}
	s := New(stub, Options{Tenants: tenant.New(stub.cfg.Server.Tenants)})
	as := func(name string) context.Context {
		return withPrincipal(context.Background(), auth.Identity{Tenant: name}.Principal())
	}
	run := func(ctx context.Context, pol *egress.Policy) (*egress.Policy, error) {
		stub.reqs = nil
		if _, err := s.execute(ctx, engine.Request{Principal: s.principal(ctx), Code: "1", Egress: pol}); err != nil {
			return nil, err
		}
		return stub.reqs[0].Egress, nil
	}
	str := func(p *egress.Policy) string {
		if p == nil {
			return "<profile's>"
		}
		return p.String()
	}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		req     *egress.Policy
		want    string
		wantErr string
	}{
		{"tenant default", as("alice"), nil, "pypi.org", ""}, // 443 only: a name rule's default
		{"request narrows to none", as("alice"), &egress.Policy{}, "", ""},
		{"request widens past the tenant", as("alice"), new(egress.MustParse("api.example.com:443")), "", "server.tenants.default.egress"},
		{"override", as("wide"), nil, "*.example.com", ""},
		{"override narrowed", as("wide"), new(egress.MustParse("api.example.com:443")), "api.example.com", ""},
		{"local user: the profile's", context.Background(), nil, "<profile's>", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := run(tc.ctx, tc.req)
			if tc.wantErr != "" {
				var refused *engine.RefusedError
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want a refusal naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if str(got) != tc.want && !(tc.want == "" && got != nil && got.IsNone()) {
				t.Errorf("egress %s, want %s", str(got), tc.want)
			}
		})
	}
}
