package policy

import (
	"fmt"
	"slices"
	"strings"
)

// Resolved is one package of a build's full dependency set as the resolver
// reported it: what the build will install, pinned. The resolver runs in
// the build sandbox, so a Resolved is untrusted data; it matters only that
// the build installs exactly the set that was checked.
type Resolved struct {
	Name    string // normalized
	Version string // the pinned version; "" for a direct reference
	URL     string // the direct reference, else ""
	// RequiredBy are the normalized names of the set's packages that
	// require this one (only for messages: the chain of a refusal).
	RequiredBy []string
	// Requested: the build asked for it by name.
	Requested bool
}

// Pin is the requirement that installs exactly this package.
func (p Resolved) Pin() string {
	if p.URL != "" {
		return p.Name + " @ " + p.URL
	}
	return p.Name + "==" + p.Version
}

// maxChain bounds the chain a refusal names.
const maxChain = 8

// Chain is how the build came to want name: the shortest path from a
// requested package, through the packages that require one another, to
// name, such as ["pyjwt[crypto]", "cryptography", "cffi"]. The head is
// spelled as requested (with its extras), since an extra is often why a
// dependency is there. A name nothing leads to is a chain of one.
func Chain(set []Resolved, reqs []Requirement, name string) []string {
	by := make(map[string]Resolved, len(set))
	for _, p := range set {
		by[p.Name] = p
	}
	head := func(n string) (string, bool) {
		for _, q := range reqs {
			if q.Name == n {
				if len(q.Extras) > 0 {
					return n + "[" + strings.Join(q.Extras, ",") + "]", true
				}
				return n, true
			}
		}
		if by[n].Requested {
			return n, true
		}
		return "", false
	}
	// Breadth first from name towards the requested packages.
	next := map[string]string{} // a package → the one it requires on the path
	queue, seen := []string{name}, map[string]bool{name: true}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if h, ok := head(n); ok {
			chain := []string{h}
			for c := next[n]; c != ""; c = next[c] {
				chain = append(chain, c)
			}
			if len(chain) > maxChain {
				chain = append(chain[:maxChain/2], append([]string{"…"}, chain[len(chain)-maxChain/2:]...)...)
			}
			return chain
		}
		parents := slices.Clone(by[n].RequiredBy)
		slices.Sort(parents)
		for _, parent := range parents {
			if !seen[parent] {
				seen[parent], next[parent] = true, n
				queue = append(queue, parent)
			}
		}
	}
	return []string{name}
}

// CheckResolved applies the rules to every package of a build's resolved
// set, dependencies like requested packages: a dependency is installed and
// runs as much as the package that pulled it in. Direct references, the
// blocklist, the allowlist and the approval patterns are each applied to
// the whole set in turn, so the strongest refusal wins (a blocked package
// is reported as blocked, not as missing from the allowlist). reqs are the
// build's requirements, named at the head of a refusal's chain; approved
// as in Check. The error is a *Refusal whose Chain says how the build came
// to want the package: "pyjwt[crypto] requires cryptography, blocked by
// pattern "cryptography"".
func (r Rules) CheckResolved(set []Resolved, reqs []Requirement, approved map[string]bool) error {
	set = slices.Clone(set)
	slices.SortFunc(set, func(a, b Resolved) int { return strings.Compare(a.Name, b.Name) })
	// what completes "goodpkg requires badpkg, ..." and "it ...".
	refuse := func(p Resolved, rule Rule, pattern, setting, what, it string) error {
		chain := Chain(set, reqs, p.Name)
		detail := "it " + it
		if len(chain) > 1 {
			detail = strings.Join(chain, " requires ") + ", " + what
		}
		return &Refusal{Package: p.Name, Rule: rule, Pattern: pattern, Setting: setting, Chain: chain, Detail: detail}
	}
	for _, p := range set {
		if p.URL != "" && !r.AllowDirect {
			d := fmt.Sprintf("a direct reference (%s); only names from the package index are allowed", p.URL)
			return refuse(p, RuleDirect, "", SettingDirect, d, "is "+d)
		}
	}
	for _, p := range set {
		if pat, ok := match(r.Block, p.Name); ok {
			d := fmt.Sprintf("blocked by pattern %q", pat)
			return refuse(p, RuleBlocked, pat, SettingBlock, d, "is "+d)
		}
	}
	for _, p := range set {
		if _, ok := match(r.Allow, p.Name); !ok {
			what, it := "which matches no allowlist pattern (dependencies need one too)", "matches no allowlist pattern"
			if len(r.Allow) == 0 {
				what, it = "and the allowlist is empty, so no package may be installed", "is not allowed: the allowlist is empty, so no package may be installed"
			}
			return refuse(p, RuleNotAllow, "", SettingAllow, what, it)
		}
	}
	for _, p := range set {
		if pat, ok := match(r.Approve, p.Name); ok && !approved[p.Name] {
			if _, ok := match(r.Approved, p.Name); !ok {
				d := fmt.Sprintf("matches the approval pattern %q (%s) and needs a person's approval: add it to %s, or set %s: elicit so that forge asks the person through an MCP client that supports elicitation", pat, SettingApprove, SettingApproved, SettingApproval)
				return refuse(p, RuleApproval, pat, SettingApproved, "which "+d, d)
			}
		}
	}
	return nil
}

// ResolvedNames are the names of set, sorted.
func ResolvedNames(set []Resolved) []string {
	out := make([]string, 0, len(set))
	for _, p := range set {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
