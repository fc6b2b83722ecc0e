package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// set is pyjwt[crypto] and python-dateutil resolved: pyjwt → cryptography
// → cffi → pycparser, python-dateutil → six.
var set = []Resolved{
	{Name: "cffi", Version: "2.1.1", RequiredBy: []string{"cryptography"}},
	{Name: "cryptography", Version: "50.0.2", RequiredBy: []string{"pyjwt"}},
	{Name: "pycparser", Version: "3.12", RequiredBy: []string{"cffi"}},
	{Name: "pyjwt", Version: "2.9.0", Requested: true},
	{Name: "python-dateutil", Version: "2.9.0.post0", Requested: true},
	{Name: "six", Version: "1.17.0", RequiredBy: []string{"python-dateutil"}},
}

func TestChain(t *testing.T) {
	reqs := mustParse(t, "PyJWT[crypto]==2.9.0", "python-dateutil==2.9.0.post0")
	for name, want := range map[string][]string{
		"pycparser": {"pyjwt[crypto]", "cryptography", "cffi", "pycparser"},
		"six":       {"python-dateutil", "six"},
		"pyjwt":     {"pyjwt[crypto]"},
		"unknown":   {"unknown"},
	} {
		if diff := cmp.Diff(want, Chain(set, reqs, name)); diff != "" {
			t.Errorf("Chain(%s) (-want +got)\n%s", name, diff)
		}
	}
	// A cycle ends.
	cyc := []Resolved{{Name: "a", RequiredBy: []string{"b"}}, {Name: "b", RequiredBy: []string{"a"}}}
	if got := Chain(cyc, nil, "a"); len(got) != 1 {
		t.Errorf("Chain of a cycle = %v, want [a]", got)
	}
}

func TestCheckResolved(t *testing.T) {
	reqs := mustParse(t, "PyJWT[crypto]==2.9.0", "python-dateutil==2.9.0.post0")
	for _, tc := range []struct {
		name     string
		rules    Rules
		set      []Resolved
		approved map[string]bool
		rule     Rule
		pkg      string
		msg      string
	}{
		{name: "all allowed", rules: Rules{Allow: []string{"*"}}, set: set},
		{name: "blocked dependency", rules: Rules{Allow: []string{"*"}, Block: []string{"six"}}, set: set,
			rule: RuleBlocked, pkg: "six", msg: `python-dateutil requires six, blocked by pattern "six"`},
		{name: "blocked through an extra", rules: Rules{Allow: []string{"*"}, Block: []string{"c*"}}, set: set,
			rule: RuleBlocked, pkg: "cffi", msg: `pyjwt[crypto] requires cryptography requires cffi, blocked by pattern "c*"`},
		{name: "block before allow", rules: Rules{Allow: []string{"pyjwt"}, Block: []string{"six"}}, set: set,
			rule: RuleBlocked, pkg: "six"},
		{name: "dependency not in allowlist", rules: Rules{Allow: []string{"pyjwt", "python-dateutil", "c*", "pycparser"}}, set: set,
			rule: RuleNotAllow, pkg: "six", msg: "python-dateutil requires six, which matches no allowlist pattern"},
		{name: "requested blocked", rules: Rules{Allow: []string{"*"}, Block: []string{"pyjwt"}}, set: set,
			rule: RuleBlocked, pkg: "pyjwt", msg: `package "pyjwt" refused: it is blocked by pattern "pyjwt"`},
		{name: "dependency needs approval", rules: Rules{Allow: []string{"*"}, Approve: []string{"six"}}, set: set,
			rule: RuleApproval, pkg: "six", msg: "python-dateutil requires six, which matches the approval pattern"},
		{name: "dependency approved by a person", rules: Rules{Allow: []string{"*"}, Approve: []string{"six"}}, set: set,
			approved: map[string]bool{"six": true}},
		{name: "dependency approved in config", rules: Rules{Allow: []string{"*"}, Approve: []string{"six"}, Approved: []string{"six"}}, set: set},
		{name: "direct dependency", rules: Rules{Allow: []string{"*"}},
			set:  append([]Resolved{{Name: "zzz", URL: "https://example.com/zzz.whl", RequiredBy: []string{"pyjwt"}}}, set...),
			rule: RuleDirect, pkg: "zzz", msg: "pyjwt[crypto] requires zzz, a direct reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rules.CheckResolved(tc.set, reqs, tc.approved)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || !errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, want a *Refusal", err)
			}
			if r.Rule != tc.rule || r.Package != tc.pkg {
				t.Fatalf("refusal %+v, want rule %s package %s", r, tc.rule, tc.pkg)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), r.Setting) {
				t.Fatalf("message %q, want it to hold %q and the setting %s", err, tc.msg, r.Setting)
			}
		})
	}
}
