package profiles

import (
	"os"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add(defaultsYAML)
	if b, err := os.ReadFile("../forge.example.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"", "~", "execution: {timeot: 1}", "pool:\n  size: ${N:-3}\n", "a: &a [*a]\n",
		"server: &s {name: x}\nimages: *s\n", "mcp_tools: {x: {env: {A: ${B}}}}",
		"profiles: {p: {memory: 1.5g, cpus: 1e400}}", "- [", "execution:\n  max_memory: 99999999999t\n",
	} {
		f.Add([]byte(s))
	}
	env := envMap(map[string]string{"N": "5", "B": "x"})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, env)
		if err != nil {
			if err.Error() == "" {
				t.Errorf("empty error for %q", data)
			}
			return
		}
		_ = c.Validate()
		_, _ = c.Profile("default")
		_ = c.Clone()
	})
}

// FuzzParseEgressRule: rules come from tool arguments too. A rule that
// parses prints back (String) as one that parses to the same rule, and
// narrowing with itself changes nothing.
func FuzzParseEgressRule(f *testing.F) {
	for _, s := range []string{"pypi.org", "*.pythonhosted.org:443", "10.0.0.0/8:5432", "[::1]:8080", "db.internal:5432!private",
		"[2001:db8::/32]:443,80", "none", "a..b", "[::1", "x:0", "::ffff:1.2.3.4", "*.a.b:1,2,3!private", "db:5432!tcp!private", "10.0.0.1!tcp", "x!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseEgressRule(s)
		if err != nil {
			return
		}
		again, err := ParseEgressRule(r.String())
		if err != nil || !again.equal(r) {
			t.Fatalf("ParseEgressRule(%q) = %+v, whose String %q parses to %+v, %v", s, r, r.String(), again, err)
		}
		p := EgressPolicy{Rules: []EgressRule{r}}
		if n := p.Narrow(p); n.String() != p.String() {
			t.Fatalf("Narrow(%v, itself) = %v", p, n)
		}
		if _, err := p.Within(p, "x"); err != nil {
			t.Fatalf("a policy is not Within itself: %v", err)
		}
	})
}
