// Package egress is forge's one way out of a sandbox: a host-side HTTP
// proxy that each sandbox reaches only through its own unix socket
// (bind-mounted at /run/forge/egress.sock), which enforces a per-sandbox
// allowlist of hosts and ports. Sandboxes themselves keep loopback only and
// no DNS; the agent exposes the socket inside as a loopback proxy and sets
// HTTP(S)_PROXY for the code.
//
// The proxy resolves names itself and connects only to the addresses it
// resolved and checked: loopback, private, link-local, CGNAT and metadata
// addresses are refused unless a rule names them (an IP or CIDR rule, or a
// host rule marked !private). A CONNECT tunnel carries TLS only: its first
// bytes must be a ClientHello with the SNI of the CONNECT host, within
// HelloTimeout, unless the rule is marked !tcp. Plain HTTP goes as proxy
// requests with an absolute http:// URI, whose Host header must agree with
// it. Every allowed and denied connection is audited, with a per-sandbox
// cap so a flood cannot fill the audit log.
//
// Policies are pure data and live in profiles (so the config is checked
// when it loads); this package re-exports them: ParsePolicy reads config
// strings, Policy.Narrow gives what two policies both allow (a tenant's
// and a profile's) and Policy.Within checks that a request only narrows
// the policy it runs under.
package egress

import "github.com/mcp-forge/forge/profiles"

// Rule allows connections to one host (or address range) on some ports;
// see profiles.EgressRule.
type Rule = profiles.EgressRule

// Policy is an allowlist of Rules; the zero Policy allows nothing. See
// profiles.EgressPolicy for Narrow, Within, Strings and the matching.
type Policy = profiles.EgressPolicy

// None is the policy string of the zero Policy.
const None = profiles.EgressNone

// Default ports of a rule that names none: 443 for a name, 80 and 443
// for an IP or a CIDR.
var (
	DefaultNamePorts = profiles.DefaultEgressNamePorts
	DefaultAddrPorts = profiles.DefaultEgressAddrPorts
)

// ParseRule parses one rule: "pypi.org", "*.pythonhosted.org:443",
// "10.0.0.0/8:5432", "[::1]:8080", "db.internal:5432!private!tcp".
func ParseRule(s string) (Rule, error) { return profiles.ParseEgressRule(s) }

// ParsePolicy parses rule strings; a lone "none", or none at all, is the
// zero Policy. Errors (ErrInvalidRule) name each bad rule and the syntax.
func ParsePolicy(rules []string) (Policy, error) { return profiles.ParseEgressPolicy(rules) }

// MustParse is ParsePolicy for literals in code and tests; it panics on an error.
func MustParse(rules ...string) Policy { return profiles.MustParseEgress(rules...) }

func describe(p Policy) string {
	if p.IsNone() {
		return "no egress (none)"
	}
	return "[" + p.String() + "]"
}
