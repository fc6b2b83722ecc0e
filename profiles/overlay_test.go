package profiles

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOverlay: a set field overrides, a zero one inherits, in profiles and
// tenant overrides alike; an empty egress list inherits in a profile and
// allows nothing in a tenant override (as before the shared helper).
func TestOverlay(t *testing.T) {
	cfg := Default()
	cfg.Execution.Egress = []string{"example.com:443"}
	cfg.Profiles = map[string]Profile{"big": {Memory: 2 << 30, Egress: []string{}}, "net": {Egress: []string{"none"}}}
	big, err := cfg.Profile("big")
	if err != nil {
		t.Fatal(err)
	}
	want := Profile{Memory: 2 << 30, CPUs: cfg.Execution.DefaultCPUs, Pids: cfg.Execution.MaxPids, Timeout: cfg.Execution.DefaultTimeout,
		TmpSize: cfg.Execution.TmpSize, Seccomp: cfg.Security.SeccompProfile, Egress: cfg.Execution.Egress}
	if diff := cmp.Diff(want, big); diff != "" {
		t.Errorf("profile big (-want +got):\n%s", diff)
	}
	if n, _ := cfg.Profile("net"); !cmp.Equal(n.Egress, []string{"none"}) || n.Memory != cfg.Execution.DefaultMemory {
		t.Errorf("profile net = %+v", n)
	}
	tc := TenantsConfig{Default: TenantLimits{ExecutionsPerMinute: 60, MaxSessions: 4, Egress: []string{"example.com:443"}},
		Overrides: map[string]TenantLimits{"a": {MaxSessions: 9}, "b": {Egress: []string{}}}}
	if diff := cmp.Diff(TenantLimits{ExecutionsPerMinute: 60, MaxSessions: 9, Egress: []string{"example.com:443"}}, tc.Tenant("a")); diff != "" {
		t.Errorf("tenant a (-want +got):\n%s", diff)
	}
	if b := tc.Tenant("b"); b.Egress == nil || len(b.Egress) != 0 || b.MaxSessions != 4 {
		t.Errorf("tenant b = %+v, want an empty (non-nil) egress and the default's max_sessions", b)
	}
	if c := tc.Tenant("c"); !cmp.Equal(c, tc.Default) {
		t.Errorf("tenant c = %+v, want the default", c)
	}
}
