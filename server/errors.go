package server

import "errors"

var (
	// ErrInvalidArguments is matched by every *ArgumentError: tool arguments
	// of the wrong shape, answered with a JSON-RPC invalid-params error.
	ErrInvalidArguments = errors.New("invalid arguments")
	// ErrNotAvailable marks a feature of the tool interface that this build
	// does not have yet (sessions, environment, mcp_tools); a tool error.
	ErrNotAvailable = errors.New("not available in this build")
	// ErrRemoteBind refuses an HTTP listen address that is not loopback
	// unless remote access was allowed explicitly.
	ErrRemoteBind = errors.New("refusing to listen on a non-loopback address")
)
