package profiles

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseEgressRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want EgressRule
	}{
		{"pypi.org", EgressRule{Host: "pypi.org", Ports: []int{443}}}, // a name: HTTPS only
		{"PyPI.org.", EgressRule{Host: "pypi.org", Ports: []int{443}}},
		{"pypi.org:80,443", EgressRule{Host: "pypi.org", Ports: []int{80, 443}}},
		{"*.pythonhosted.org:443", EgressRule{Host: "*.pythonhosted.org", Ports: []int{443}}},
		{"10.0.0.0/8:5432", EgressRule{Host: "10.0.0.0/8", Ports: []int{5432}}},
		{"10.1.2.3/8:5432", EgressRule{Host: "10.0.0.0/8", Ports: []int{5432}}},
		{"127.0.0.1:8080,80,8080", EgressRule{Host: "127.0.0.1", Ports: []int{80, 8080}}},
		{"[::1]:8080", EgressRule{Host: "::1", Ports: []int{8080}}},
		{"::1", EgressRule{Host: "::1", Ports: []int{80, 443}}}, // an IP: 80 and 443
		{"[2001:db8::/32]:443", EgressRule{Host: "2001:db8::/32", Ports: []int{443}}},
		{"::ffff:127.0.0.1", EgressRule{Host: "127.0.0.1", Ports: []int{80, 443}}},
		{"db.internal:5432!private", EgressRule{Host: "db.internal", Ports: []int{5432}, Private: true}},
		{"db.internal:5432!tcp!private", EgressRule{Host: "db.internal", Ports: []int{5432}, Private: true, RawTCP: true}},
		{"10.0.0.5:5432!tcp", EgressRule{Host: "10.0.0.5", Ports: []int{5432}, RawTCP: true}},
		{" files_1.example.com ", EgressRule{Host: "files_1.example.com", Ports: []int{443}}},
	} {
		got, err := ParseEgressRule(tc.in)
		if err != nil {
			t.Errorf("ParseEgressRule(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseEgressRule(%q) (-want +got):\n%s", tc.in, diff)
		}
		// String round-trips.
		again, err := ParseEgressRule(got.String())
		if err != nil || !again.equal(got) {
			t.Errorf("ParseEgressRule(%q).String() = %q does not parse back: %v, %v", tc.in, got.String(), again, err)
		}
	}
}

func TestParseEgressRuleErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty host"},
		{"!private", "empty host"},
		{"pypi.org:", "empty port list"},
		{"pypi.org:0", `port "0"`},
		{"pypi.org:70000", `port "70000"`},
		{"pypi.org:http", `port "http"`},
		{"*.org", "whole top-level domain"},
		{"*", `character '*'`},
		{"a.*.org", `character '*'`},
		{"py pi.org", `character ' '`},
		{"https://pypi.org", "not a URL"},
		{"fe80::1::2", "neither a name nor an IP"},
		{"10.0.0.0/33", "bad CIDR"},
		{"fe80::1%eth0", "zone"},
		{"[::1", "unclosed ["},
		{"[::1]8080", "want :port after ]"},
		{"10.0.0.1!private", "!private is for names"},
		{"pypi.org!", `flag "!" is not !private or !tcp`},
		{"pypi.org!udp", `flag "!udp" is not !private or !tcp`},
		{"pypi.org!tcp!tcp", `flag "!tcp" is not !private or !tcp, or is repeated`},
		{"pypi.org!tcp:443", `flag "!tcp:443"`},
		{"a..b", "empty or over-long label"},
		{strings.Repeat("a", 64) + ".org", "over-long label"},
	} {
		_, err := ParseEgressRule(tc.in)
		if err == nil || !errors.Is(err, ErrInvalidEgressRule) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseEgressRule(%q) = %v, want an ErrInvalidEgressRule containing %q", tc.in, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), "want host[:port") {
			t.Errorf("ParseEgressRule(%q): the error does not say what is allowed: %v", tc.in, err)
		}
	}
}

func TestParseEgressPolicy(t *testing.T) {
	for _, in := range [][]string{nil, {}, {"none"}, {" none "}} {
		p, err := ParseEgressPolicy(in)
		if err != nil || !p.IsNone() {
			t.Errorf("ParseEgressPolicy(%q) = %v, %v; want the zero Policy", in, p, err)
		}
	}
	p, err := ParseEgressPolicy([]string{"pypi.org", "pypi.org:443", "*.pythonhosted.org:80,443", "10.0.0.1", "10.0.0.1:443,80"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"pypi.org", "*.pythonhosted.org:80,443", "10.0.0.1"}, p.Strings()); diff != "" {
		t.Errorf("duplicates not merged (-want +got):\n%s", diff)
	}
	_, err = ParseEgressPolicy([]string{"ok.org", "bad:x", "none"})
	if err == nil || !strings.Contains(err.Error(), `"bad:x"`) || !strings.Contains(err.Error(), `"none"`) {
		t.Errorf("want both bad rules named (none is only valid alone), got %v", err)
	}
}

func TestEgressAllowsHost(t *testing.T) {
	pol := MustParseEgress("pypi.org", "*.pythonhosted.org:443", "10.0.0.0/8:5432", "127.0.0.1:8080", "192.0.2.1")
	for _, tc := range []struct {
		host string
		port int
		want bool
	}{
		{"pypi.org", 443, true},
		{"pypi.org", 80, false}, // a name rule without ports allows 443 only
		{"192.0.2.1", 80, true}, // an IP rule without ports allows 80 and 443
		{"192.0.2.1", 443, true},
		{"pypi.org", 8080, false},
		{"www.pypi.org", 443, false},
		{"files.pythonhosted.org", 443, true},
		{"a.b.pythonhosted.org", 443, true},
		{"pythonhosted.org", 443, false},
		{"evilpythonhosted.org", 443, false},
		{"files.pythonhosted.org", 80, false},
		{"10.2.3.4", 5432, true},
		{"11.2.3.4", 5432, false},
		{"127.0.0.1", 8080, true},
		{"127.0.0.2", 8080, false},
		{"localhost", 8080, false}, // a name is matched by name rules only
	} {
		if _, got := pol.AllowsHost(tc.host, tc.port); got != tc.want {
			t.Errorf("allowsHost(%s, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
}

func TestEgressNarrow(t *testing.T) {
	for _, tc := range []struct {
		name string
		p, q []string
		want []string
	}{
		{"none narrows to none", []string{"pypi.org"}, nil, []string{"none"}},
		{"equal", []string{"pypi.org"}, []string{"pypi.org"}, []string{"pypi.org"}},
		{"ports intersect", []string{"pypi.org:80,443,8080"}, []string{"pypi.org:443,9000"}, []string{"pypi.org"}},
		{"default ports", []string{"pypi.org:80,443"}, []string{"pypi.org"}, []string{"pypi.org"}},
		{"disjoint ports", []string{"pypi.org:80"}, []string{"pypi.org:443"}, []string{"none"}},
		{"name within wildcard", []string{"*.example.com"}, []string{"a.example.com"}, []string{"a.example.com"}},
		{"wildcard within wildcard", []string{"*.example.com"}, []string{"*.x.example.com"}, []string{"*.x.example.com"}},
		{"suffix is not a subdomain", []string{"*.example.com"}, []string{"*.badexample.com"}, []string{"none"}},
		{"wildcard excludes apex", []string{"*.example.com"}, []string{"example.com"}, []string{"none"}},
		{"ip within cidr", []string{"10.0.0.0/8:5432"}, []string{"10.1.1.1:5432"}, []string{"10.1.1.1:5432"}},
		{"cidr within cidr", []string{"10.0.0.0/8"}, []string{"10.1.0.0/16"}, []string{"10.1.0.0/16"}},
		{"name is not an ip", []string{"10.0.0.0/8"}, []string{"db.internal"}, []string{"none"}},
		{"private needs both", []string{"db.internal!private"}, []string{"db.internal"}, []string{"db.internal"}},
		{"private both", []string{"db.internal!private"}, []string{"db.internal!private"}, []string{"db.internal!private"}},
		{"tcp needs both", []string{"db.internal:5432!tcp"}, []string{"db.internal:5432"}, []string{"db.internal:5432"}},
		{"tcp both", []string{"db.internal:5432!private!tcp"}, []string{"db.internal:5432!tcp"}, []string{"db.internal:5432!tcp"}},
		{"many", []string{"pypi.org", "*.pythonhosted.org:443"}, []string{"files.pythonhosted.org", "github.com"},
			[]string{"files.pythonhosted.org"}},
	} {
		p, q := MustParseEgress(tc.p...), MustParseEgress(tc.q...)
		if diff := cmp.Diff(tc.want, p.Narrow(q).Strings()); diff != "" {
			t.Errorf("%s: Narrow (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(tc.want, q.Narrow(p).Strings()); diff != "" {
			t.Errorf("%s: Narrow is not symmetric (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestEgressWithin(t *testing.T) {
	prof := MustParseEgress("pypi.org", "*.pythonhosted.org:443", "10.0.0.0/8:5432", "db.internal:5432!private!tcp")
	for _, tc := range []struct {
		req  []string
		wide string // "" = allowed
	}{
		{nil, ""},
		{[]string{"pypi.org:443"}, ""},
		{[]string{"files.pythonhosted.org:443", "10.9.9.9:5432"}, ""},
		{[]string{"pypi.org:8080"}, "pypi.org:8080"},
		{[]string{"github.com"}, "github.com"},
		{[]string{"*.org"}, ""}, // parse error, tested apart
		{[]string{"pythonhosted.org:443"}, "pythonhosted.org"},
		{[]string{"10.0.0.0/7:5432"}, "10.0.0.0/7:5432"},
		{[]string{"pypi.org!private"}, "pypi.org!private"},
		{[]string{"pypi.org:80"}, "pypi.org:80"},
		{[]string{"pypi.org!tcp"}, "pypi.org!tcp"},
		{[]string{"db.internal:5432!tcp"}, ""},
		{[]string{"10.0.0.1:5432!tcp"}, "10.0.0.1:5432!tcp"},
		{[]string{"pypi.org", "evil.com:443"}, "evil.com"},
	} {
		q, err := ParseEgressPolicy(tc.req)
		if err != nil {
			continue
		}
		_, err = prof.Within(q, "the profile's egress")
		if tc.wide == "" {
			if err != nil {
				t.Errorf("Within(%q): %v", tc.req, err)
			}
			continue
		}
		if !errors.Is(err, ErrEgressWiden) || !strings.Contains(err.Error(), tc.wide) || !strings.Contains(err.Error(), "[pypi.org, *.pythonhosted.org, 10.0.0.0/8:5432, db.internal:5432!private!tcp]") ||
			!strings.Contains(err.Error(), "the profile's egress") {
			t.Errorf("Within(%q) = %v, want ErrEgressWiden naming %q, the setting and the profile's rules", tc.req, err, tc.wide)
		}
	}
	if _, err := (EgressPolicy{}).Within(MustParseEgress("pypi.org"), "execution.egress"); err == nil || !strings.Contains(err.Error(), "no egress (none)") {
		t.Errorf("widening none: %v", err)
	}
}

// TestEgressConfig: the config's allowlists are checked when it loads, each
// bad rule named by its field path; named profiles inherit the default's
// unless they set their own.
func TestEgressConfig(t *testing.T) {
	c := Default()
	if pol, err := c.EgressPolicy(""); err != nil || !pol.IsNone() {
		t.Errorf("default egress: %v, %v; want none", pol, err)
	}
	c.Execution.Egress = []string{"pypi.org", "bad:port"}
	c.Profiles["pip"] = Profile{Egress: []string{"none", "x.org"}}
	c.Profiles["inherit"] = Profile{Memory: 1 << 20}
	err := c.Validate()
	for _, want := range []string{`execution.egress[1]: invalid egress rule "bad:port"`, `profiles.pip.egress[0]: invalid egress rule "none": "none" allows nothing and must be the only rule`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to contain %q", err, want)
		}
	}
	c.Execution.Egress = []string{"pypi.org"}
	c.Profiles["pip"] = Profile{Egress: []string{"none"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"": "pypi.org", "inherit": "pypi.org", "pip": "none"} {
		pol, err := c.EgressPolicy(name)
		if err != nil || pol.String() != want {
			t.Errorf("EgressPolicy(%q) = %v, %v; want %s", name, pol, err, want)
		}
	}
}
