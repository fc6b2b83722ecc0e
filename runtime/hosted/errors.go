package hosted

import (
	"errors"
	"fmt"
)

var (
	// ErrTable is a tool table the sandbox sent that forge does not accept
	// (too large, too many tools, a bad name or schema); the message says
	// which limit and setting.
	ErrTable = errors.New("bad hosted tool table")
	// ErrLoad is a tools module that could not be imported in its sandbox.
	ErrLoad = errors.New("loading the hosted tools module failed")
	// ErrSource is a tools path that cannot be snapshotted.
	ErrSource = errors.New("bad hosted tools path")
	// ErrUnknownTool is a call of a name that is not in the table.
	ErrUnknownTool = errors.New("unknown hosted tool")
	// ErrCollision is a hosted tool named like another tool.
	ErrCollision = errors.New("hosted tool name collision")
	// ErrClosed: the host is shutting down.
	ErrClosed = errors.New("hosted tools are shut down")
)

// ArgumentError is a call whose arguments break the tool's inputSchema:
// faces answer it as JSON-RPC invalid params (-32602).
type ArgumentError struct {
	Tool   string
	Path   string // JSON pointer into the arguments, "" for the whole object
	Reason string
}

func (e *ArgumentError) Error() string {
	where := e.Path
	if where == "" {
		where = "/"
	}
	return fmt.Sprintf("invalid arguments for tool %q at %s: %s", e.Tool, where, e.Reason)
}
