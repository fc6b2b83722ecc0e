package egress

import (
	"errors"

	"github.com/mcp-forge/forge/profiles"
)

var (
	// ErrInvalidRule is wrapped by ParseRule and ParsePolicy errors for a
	// rule string that is not host[:ports][!private][!tcp].
	ErrInvalidRule = profiles.ErrInvalidEgressRule
	// ErrWiden is returned by Policy.Within for a request that asks for
	// more than the policy it must stay inside.
	ErrWiden = profiles.ErrEgressWiden
	// ErrClosed is returned by Serve after Proxy.Close.
	ErrClosed = errors.New("egress proxy closed")
)
