// Egress policies are pure data here, so the config (execution.egress,
// profiles.*.egress, and the tenants' policies) is checked with field paths
// when it is loaded; runtime/egress enforces them and re-exports these
// types under shorter names (egress.Policy, egress.Rule, ...).
package profiles

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Default ports of a rule that names none: a name rule allows HTTPS only
// (plain http:// to a name must be asked for, as name:80 or name:80,443);
// an IP or CIDR rule allows 80 and 443.
var (
	DefaultEgressNamePorts = []int{443}
	DefaultEgressAddrPorts = []int{80, 443}
)

// EgressNone is the policy string of the zero EgressPolicy (deny everything).
const EgressNone = "none"

// EgressRule allows connections to one host (or address range) on some ports.
type EgressRule struct {
	// Host is an exact DNS name ("pypi.org"), a wildcard "*.suffix" (any
	// name below suffix, not suffix itself), an IP literal or a CIDR.
	// Names are lower case without a trailing dot.
	Host string
	// Ports are the allowed ports, sorted; empty means the defaults
	// (DefaultEgressNamePorts for a name, DefaultEgressAddrPorts for an IP
	// or a CIDR).
	Ports []int
	// Private lets a name rule reach the loopback, private, link-local and
	// metadata addresses its name resolves to ("!private" in the string
	// form). IP and CIDR rules allow the addresses they name anyway.
	Private bool
	// RawTCP lets a CONNECT tunnel under this rule carry any TCP protocol
	// ("!tcp" in the string form): the proxy forwards its bytes unread.
	// Without it a tunnel must open with a TLS ClientHello whose SNI is the
	// CONNECT host, and plain HTTP goes as proxy requests (absolute
	// http:// URIs), whose Host is checked.
	RawTCP bool
}

// EgressPolicy is an allowlist: a connection is allowed when a rule allows it.
// The zero EgressPolicy allows nothing.
type EgressPolicy struct {
	Rules []EgressRule
}

// IsNone reports whether p allows nothing.
func (p EgressPolicy) IsNone() bool { return len(p.Rules) == 0 }

// ParseEgressPolicy parses rule strings (see ParseEgressRule). A lone "none", or no
// strings, is the zero EgressPolicy. Errors name each bad rule and what is allowed.
func ParseEgressPolicy(rules []string) (EgressPolicy, error) {
	if len(rules) == 1 && strings.TrimSpace(rules[0]) == EgressNone {
		return EgressPolicy{}, nil
	}
	var p EgressPolicy
	var bad []error
	for _, s := range rules {
		r, err := ParseEgressRule(s)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		p.Rules = append(p.Rules, r)
	}
	if len(bad) > 0 {
		return EgressPolicy{}, errors.Join(bad...)
	}
	return p.Normalize(), nil
}

// MustParseEgress is ParseEgressPolicy for literals in code and tests; it panics on an error.
func MustParseEgress(rules ...string) EgressPolicy {
	p, err := ParseEgressPolicy(rules)
	if err != nil {
		panic(err)
	}
	return p
}

const egressRuleSyntax = `want host[:port[,port...]][!private][!tcp], where host is a DNS name, *.suffix, an IP or a CIDR (IPv6 in brackets when a port follows: [2001:db8::/32]:443), ports are 1-65535 and default to 443 for a name and 80,443 for an IP or a CIDR, !private lets a name reach private addresses and !tcp lets a tunnel carry any protocol, not only TLS; or "none" alone`

// ParseEgressRule parses "pypi.org", "*.pythonhosted.org:443",
// "10.0.0.0/8:5432", "[::1]:8080", "db.internal:5432!private!tcp".
func ParseEgressRule(s string) (EgressRule, error) {
	bad := func(why string) (EgressRule, error) {
		return EgressRule{}, fmt.Errorf("%w %q: %s; %s", ErrInvalidEgressRule, s, why, egressRuleSyntax)
	}
	in, flags, hasFlags := strings.Cut(strings.TrimSpace(s), "!")
	var r EgressRule
	for f := range strings.SplitSeq(flags, "!") {
		switch {
		case !hasFlags:
		case f == "private" && !r.Private:
			r.Private = true
		case f == "tcp" && !r.RawTCP:
			r.RawTCP = true
		default:
			return bad(fmt.Sprintf("flag %q is not !private or !tcp, or is repeated", "!"+f))
		}
	}
	if in == "" {
		return bad("empty host")
	}
	if in == EgressNone {
		return bad(`"none" allows nothing and must be the only rule`)
	}
	if strings.Contains(in, "://") {
		return bad("a rule names a host, not a URL")
	}
	host, ports := in, ""
	switch {
	case strings.HasPrefix(in, "["):
		end := strings.Index(in, "]")
		if end < 0 {
			return bad("unclosed [")
		}
		host, ports = in[1:end], in[end+1:]
		if ports != "" && !strings.HasPrefix(ports, ":") {
			return bad("want :port after ]")
		}
		ports = strings.TrimPrefix(ports, ":")
		if ports == "" && strings.HasSuffix(in, ":") {
			return bad("empty port list")
		}
	case strings.Count(in, ":") == 1:
		host, ports, _ = strings.Cut(in, ":")
		if ports == "" {
			return bad("empty port list")
		}
	}
	var err error
	if r.Host, err = normalizeEgressHost(host); err != nil {
		return bad(err.Error())
	}
	if ports != "" {
		for p := range strings.SplitSeq(ports, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || n < 1 || n > 65535 {
				return bad(fmt.Sprintf("port %q is not a number in 1-65535", p))
			}
			r.Ports = append(r.Ports, n)
		}
	}
	if r.Private && r.isAddr() {
		return bad("!private is for names; an IP or CIDR rule allows the addresses it names anyway")
	}
	return r.normalize(), nil
}

// normalizeEgressHost checks a rule's host and returns its canonical form.
func normalizeEgressHost(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("empty host")
	}
	if strings.Contains(h, "/") {
		pfx, err := netip.ParsePrefix(h)
		if err != nil {
			return "", fmt.Errorf("bad CIDR %q", h)
		}
		return pfx.Masked().String(), nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("an IP with a zone (%q) is not allowed", h)
		}
		return a.Unmap().String(), nil
	}
	if strings.Contains(h, ":") {
		return "", fmt.Errorf("%q is neither a name nor an IP (an IPv6 address with a port goes in brackets)", h)
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	labels := name
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		labels = rest
		if !strings.Contains(labels, ".") {
			return "", fmt.Errorf("wildcard %q covers a whole top-level domain; name at least two labels after *.", h)
		}
	}
	if err := CheckHostName(labels); err != nil {
		return "", err
	}
	return name, nil
}

// CheckHostName accepts LDH labels (and underscores, which some services use).
func CheckHostName(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("name longer than 253 characters")
	}
	for l := range strings.SplitSeq(name, ".") {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("name %q has an empty or over-long label", name)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("name %q has character %q (only letters, digits, - and _ are allowed; * only as a leading \"*.\")", name, c)
			}
		}
	}
	return nil
}

// defaultPorts are the ports of r when it names none.
func (r EgressRule) defaultPorts() []int {
	if r.isAddr() {
		return DefaultEgressAddrPorts
	}
	return DefaultEgressNamePorts
}

func (r EgressRule) normalize() EgressRule {
	if len(r.Ports) == 0 {
		r.Ports = slices.Clone(r.defaultPorts())
	}
	slices.Sort(r.Ports)
	r.Ports = slices.Compact(r.Ports)
	return r
}

// Normalize gives every rule its default ports, sorts them and drops
// duplicate rules; the parsers return normalized policies, and every
// method accepts a hand-built one.
func (p EgressPolicy) Normalize() EgressPolicy {
	var out []EgressRule
	for _, r := range p.Rules {
		r = r.normalize()
		if !slices.ContainsFunc(out, func(o EgressRule) bool { return o.equal(r) }) {
			out = append(out, r)
		}
	}
	return EgressPolicy{Rules: out}
}

func (r EgressRule) equal(o EgressRule) bool {
	return r.Host == o.Host && r.Private == o.Private && r.RawTCP == o.RawTCP && slices.Equal(r.Ports, o.Ports)
}

// isAddr reports whether the rule names an IP or a CIDR rather than a name.
func (r EgressRule) isAddr() bool {
	_, err := netip.ParsePrefix(r.Host)
	if err == nil {
		return true
	}
	_, err = netip.ParseAddr(r.Host)
	return err == nil
}

// prefix is the rule's address range (an IP is a /32 or /128).
func (r EgressRule) prefix() (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(r.Host); err == nil {
		return p, true
	}
	if a, err := netip.ParseAddr(r.Host); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// String is the rule in ParseEgressRule's syntax; ports are omitted when they
// are the defaults.
func (r EgressRule) String() string {
	r = r.normalize()
	var b strings.Builder
	host := r.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	b.WriteString(host)
	if !slices.Equal(r.Ports, r.defaultPorts()) {
		b.WriteByte(':')
		for i, p := range r.Ports {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(p))
		}
	}
	if r.Private {
		b.WriteString("!private")
	}
	if r.RawTCP {
		b.WriteString("!tcp")
	}
	return b.String()
}

// Strings is the policy in ParseEgressPolicy's syntax: ["none"] for the zero EgressPolicy.
func (p EgressPolicy) Strings() []string {
	if p.IsNone() {
		return []string{EgressNone}
	}
	out := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		out[i] = r.String()
	}
	return out
}

// String joins Strings with ", ".
func (p EgressPolicy) String() string { return strings.Join(p.Strings(), ", ") }

// matchEgressName reports whether a name rule's host covers name.
func matchEgressName(rule, name string) bool {
	if suffix, ok := strings.CutPrefix(rule, "*."); ok {
		return strings.HasSuffix(name, "."+suffix)
	}
	return rule == name
}

// AllowsHost returns the first rule that allows host (a name in canonical
// form, or an IP literal) on port, if any. An IP literal is matched by IP
// and CIDR rules only, a name by name rules only.
func (p EgressPolicy) AllowsHost(host string, port int) (EgressRule, bool) {
	rules := p.RulesFor(host, port)
	if len(rules) == 0 {
		return EgressRule{}, false
	}
	return rules[0], true
}

// RulesFor returns every rule that allows host on port, in policy order,
// normalized: what a connection may do is what one of them allows (its
// flags, !private and !tcp, come from the same rule).
func (p EgressPolicy) RulesFor(host string, port int) []EgressRule {
	a, err := netip.ParseAddr(host)
	var out []EgressRule
	for _, r := range p.Rules {
		r = r.normalize()
		if !slices.Contains(r.Ports, port) {
			continue
		}
		pfx, isAddr := r.prefix()
		if err == nil && isAddr && pfx.Contains(a.Unmap()) || err != nil && !isAddr && matchEgressName(r.Host, host) {
			out = append(out, r)
		}
	}
	return out
}

// AllowsAddr reports whether an IP or CIDR rule names addr on port: what
// lets a connection reach a special (loopback, private, ...) address.
func (p EgressPolicy) AllowsAddr(addr netip.Addr, port int) bool {
	for _, r := range p.Rules {
		r = r.normalize()
		if pfx, ok := r.prefix(); ok && slices.Contains(r.Ports, port) && pfx.Contains(addr.Unmap()) {
			return true
		}
	}
	return false
}

// Narrow returns what both p and q allow: each pair of rules intersected
// (hosts, ports and the private and tcp flags). Use it to apply a tenant's policy
// on top of a profile's.
func (p EgressPolicy) Narrow(q EgressPolicy) EgressPolicy {
	var out EgressPolicy
	for _, a := range p.Rules {
		for _, b := range q.Rules {
			if r, ok := intersectEgress(a.normalize(), b.normalize()); ok {
				out.Rules = append(out.Rules, r)
			}
		}
	}
	return out.Normalize()
}

func intersectEgress(a, b EgressRule) (EgressRule, bool) {
	var ports []int
	for _, x := range a.Ports {
		if slices.Contains(b.Ports, x) {
			ports = append(ports, x)
		}
	}
	if len(ports) == 0 {
		return EgressRule{}, false
	}
	var host string
	switch {
	case egressHostWithin(a.Host, b.Host):
		host = a.Host
	case egressHostWithin(b.Host, a.Host):
		host = b.Host
	default:
		return EgressRule{}, false
	}
	return EgressRule{Host: host, Ports: ports, Private: a.Private && b.Private, RawTCP: a.RawTCP && b.RawTCP}, true
}

// egressHostWithin reports whether every host that rule host a covers is
// covered by b.
func egressHostWithin(a, b string) bool {
	pa, aAddr := (EgressRule{Host: a}).prefix()
	pb, bAddr := (EgressRule{Host: b}).prefix()
	switch {
	case aAddr && bAddr:
		return pb.Bits() <= pa.Bits() && pb.Contains(pa.Addr())
	case aAddr || bAddr:
		return false
	case strings.HasPrefix(a, "*."):
		return strings.HasPrefix(b, "*.") && (a == b || strings.HasSuffix(a, b[1:]))
	default:
		return matchEgressName(b, a)
	}
}

// Within checks that every rule of q is inside one rule of p (its host
// covered, its ports a subset, !private and !tcp only where p has them) and
// returns q.
// A request's policy must be Within the one it runs under: it may narrow,
// never widen. The error (ErrEgressWiden) names the rules that widen and p's
// rules, and says which setting grants them.
func (p EgressPolicy) Within(q EgressPolicy, setting string) (EgressPolicy, error) {
	var wide []string
	for _, r := range q.Normalize().Rules {
		if !slices.ContainsFunc(p.Rules, func(o EgressRule) bool {
			in, ok := intersectEgress(r, o.normalize())
			return ok && in.equal(r)
		}) {
			wide = append(wide, r.String())
		}
	}
	if len(wide) > 0 {
		return EgressPolicy{}, fmt.Errorf("%w: %s not allowed by %s, which allows %s; a request may only narrow it",
			ErrEgressWiden, strings.Join(wide, ", "), setting, describeEgress(p))
	}
	return q.Normalize(), nil
}

func describeEgress(p EgressPolicy) string {
	if p.IsNone() {
		return "no egress (none)"
	}
	return "[" + p.String() + "]"
}
