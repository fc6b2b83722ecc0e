package profiles

import (
	"errors"
	"fmt"
)

var (
	// ErrUnknownField is wrapped by errors for keys the schema does not have.
	ErrUnknownField = errors.New("unknown field")
	// ErrInvalidValue is wrapped by errors for values of the wrong type or
	// out of range.
	ErrInvalidValue = errors.New("invalid value")
	// ErrMissingVariable is wrapped by errors for a ${VAR} that is not set
	// and has no default.
	ErrMissingVariable = errors.New("variable not set")
	// ErrSecurityInvariant is wrapped by errors for settings that would
	// weaken an invariant every sandbox keeps (DESIGN.md "Security
	// invariants").
	ErrSecurityInvariant = errors.New("security invariant")
	// ErrUnknownProfile is returned by Config.Profile for a name that is not
	// configured.
	ErrUnknownProfile = errors.New("unknown profile")
	// ErrInvalidEgressRule is wrapped by errors for an egress rule string
	// that is not host[:ports][!private][!tcp]; the error names the rule.
	ErrInvalidEgressRule = errors.New("invalid egress rule")
	// ErrEgressWiden is returned by EgressPolicy.Within for a request that
	// asks for more than the policy it must stay inside.
	ErrEgressWiden = errors.New("egress request widens the policy")
)

// FieldError is a problem with one configuration field. Path is the YAML path
// ("execution.max_timeout"); Line is the line in the file (0 when the value
// did not come from a file); Env is the FORGE_* variable the value came from,
// if any.
type FieldError struct {
	Path string
	Line int
	Env  string
	Err  error
}

func (e *FieldError) Error() string {
	var s string
	if e.Env != "" {
		s = fmt.Sprintf("%s (%s): %v", e.Env, e.Path, e.Err)
	} else {
		s = fmt.Sprintf("%s: %v", e.Path, e.Err)
	}
	if e.Line > 0 {
		s += fmt.Sprintf(" (line %d)", e.Line)
	}
	return s
}

func (e *FieldError) Unwrap() error { return e.Err }
