package egress

import "errors"

var (
	// ErrInvalidRule is returned by ParseRule and ParsePolicy for a rule
	// string that is not host[:ports][!private]; the error names the rule.
	ErrInvalidRule = errors.New("invalid egress rule")
	// ErrWiden is returned by Policy.Within for a request that asks for
	// more than the policy it must stay inside.
	ErrWiden = errors.New("egress request widens the policy")
	// ErrClosed is returned by Serve after Proxy.Close.
	ErrClosed = errors.New("egress proxy closed")
)
