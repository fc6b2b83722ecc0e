package seccomp

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	moby "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

var actions = []specs.LinuxSeccompAction{
	specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap,
	specs.ActErrno, specs.ActTrace, specs.ActAllow, specs.ActLog, specs.ActNotify,
}

var operators = []specs.LinuxSeccompOperator{
	specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
	specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual,
}

// validate reports the first problem of a decoded profile, naming the rule,
// so that a bad custom profile fails at load time rather than at the first
// sandbox start (or, for unknown names, never).
func validate(p *moby.Seccomp) error {
	if p.DefaultAction == "" {
		return errors.New(`"defaultAction" is missing (Docker would run without seccomp; forge refuses)`)
	}
	if !slices.Contains(actions, p.DefaultAction) {
		return fmt.Errorf("defaultAction: unknown action %q (want one of %v)", p.DefaultAction, actions)
	}
	for i, r := range p.Syscalls {
		if err := validateRule(r); err != nil {
			return fmt.Errorf("syscalls[%d]: %w", i, err)
		}
	}
	return nil
}

func validateRule(r *moby.Syscall) error {
	switch {
	case r == nil:
		return errors.New("rule is null")
	case r.Name != "" && len(r.Names) > 0:
		return errors.New(`both "name" and "names" are set; use "names"`)
	case r.Name == "" && len(r.Names) == 0:
		return errors.New(`no syscall names ("names" is empty)`)
	case slices.Contains(r.Names, ""):
		return errors.New(`"names" contains an empty name`)
	case !slices.Contains(actions, r.Action):
		return fmt.Errorf("%v: unknown action %q (want one of %v)", r.Names, r.Action, actions)
	}
	for j, a := range r.Args {
		if a.Index > 5 {
			return fmt.Errorf("%v: args[%d]: index %d out of range 0-5", r.Names, j, a.Index)
		}
		if !slices.Contains(operators, a.Op) {
			return fmt.Errorf("%v: args[%d]: unknown operator %q (want one of %v)", r.Names, j, a.Op, operators)
		}
	}
	return nil
}

// jsonProblem describes a decoding error with the line and column it
// happened at, when the decoder says where.
func jsonProblem(data []byte, err error) string {
	var off int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return err.Error()
	}
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("line %d, column %d: %v", line, col, err)
}
