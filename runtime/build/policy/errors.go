package policy

import (
	"errors"
	"fmt"
)

// ErrInvalidSpec is wrapped by every parse error of a requirement.
var ErrInvalidSpec = errors.New("invalid package specification")

// ErrRefused is wrapped by every *Refusal.
var ErrRefused = errors.New("package refused by policy")

// SpecError is a requirement that is not a valid PEP 508 specification.
type SpecError struct {
	Spec   string // as given (truncated to 200 bytes)
	Offset int    // byte offset of the problem in Spec
	Reason string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("%v %q: %s (at byte %d); expected a PEP 508 requirement such as \"requests>=2.31\" or \"pandas[excel]==2.2.*\"", ErrInvalidSpec, e.Spec, e.Reason, e.Offset)
}

func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

// Rule names a rule of Rules that refused a package.
type Rule string

// The rules, in the order Check applies them.
const (
	RuleCount    Rule = "max_packages"
	RuleDirect   Rule = "direct_reference"
	RuleBlocked  Rule = "blocklist"
	RuleNotAllow Rule = "allowlist"
	RuleApproval Rule = "approval"
)

// Refusal is a package the rules refuse.
type Refusal struct {
	Package string // the normalized name, or the spec as given when it has none
	Rule    Rule
	Pattern string // the pattern that matched (blocklist, approval)
	Setting string // the configuration setting that decides this rule
	// Chain is how the build came to want a dependency: a requested
	// package first, Package last (CheckResolved); nil from Check.
	Chain  []string
	Detail string // a sentence for the person: what to do
}

func (r *Refusal) Error() string {
	msg := fmt.Sprintf("package %q refused: ", r.Package)
	switch r.Rule {
	case RuleCount:
		msg = "build refused: "
	}
	msg += r.Detail
	if r.Setting != "" {
		msg += " (setting " + r.Setting + ")"
	}
	return msg
}

func (r *Refusal) Unwrap() error { return ErrRefused }

// NeedsApproval reports whether a person may approve the package instead
// (an approval pattern matched, nothing else refused it).
func (r *Refusal) NeedsApproval() bool { return r.Rule == RuleApproval }
