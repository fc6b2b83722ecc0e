package bridge

import "errors"

var (
	// ErrUnknownTool is returned by Grant for a tool name the catalog lacks.
	ErrUnknownTool = errors.New("unknown MCP tool")
	// ErrDuplicateTool is returned by New when two servers offer the same
	// tool name and no prefix separates them.
	ErrDuplicateTool = errors.New("MCP tool offered by two servers")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("bridge closed")
)

// Kinds of error replies sent to the sandbox; the prelude maps each to a
// Python exception class (see prelude.py).
const (
	kindToolError  = "tool_error"  // the tool reported isError: mcp_tools.ToolError
	kindNotGranted = "not_granted" // mcp_tools.ToolNotGranted
	kindLimit      = "limit"       // max calls, response size: mcp_tools.ToolLimitError
	kindTimeout    = "timeout"     // mcp_tools.ToolTimeout
	kindBadRequest = "bad_request" // malformed request line: ToolError
	kindUnavail    = "unavailable" // downstream server down: ToolError
)

// callError is a failed call as the sandbox sees it: a kind and a message
// that is safe to show there (never a raw transport error, which could
// carry host details).
type callError struct {
	kind, msg string
}

func (e *callError) Error() string { return e.msg }
