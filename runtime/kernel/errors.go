package kernel

import (
	"errors"
	"fmt"
)

var (
	// ErrProtocol means the agent sent something that breaks the protocol: an over-long line,
	// invalid JSON, a wrong id or field type. The client is broken afterwards; kill the sandbox.
	ErrProtocol = errors.New("kernel: agent protocol violation")
	// ErrAgentExited means the reply stream ended: the agent died (os._exit, OOM, kill).
	ErrAgentExited = errors.New("kernel: agent exited")
	// ErrTimeout means the context's deadline passed before the agent replied.
	ErrTimeout = errors.New("kernel: timed out waiting for the agent")
	// ErrClosed is returned by calls on a closed client.
	ErrClosed = errors.New("kernel: client closed")
	// ErrRequest marks a well-formed refusal by the agent (ok:false); see RequestError.
	ErrRequest = errors.New("kernel: agent refused the request")
)

// ProtocolError carries the detail of an ErrProtocol.
type ProtocolError struct {
	Detail string
	Err    error // the underlying decode error, if any
}

func (e *ProtocolError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: %s: %v", ErrProtocol, e.Detail, e.Err)
	}
	return fmt.Sprintf("%v: %s", ErrProtocol, e.Detail)
}

// Is makes errors.Is(err, ErrProtocol) true.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

func (e *ProtocolError) Unwrap() error { return e.Err }

func protocolErrorf(err error, format string, args ...any) error {
	return &ProtocolError{Detail: fmt.Sprintf(format, args...), Err: err}
}

// RequestError is an ok:false reply: the agent understood the line but refused or failed the
// request (ProtocolError type for a bad request, AgentError for a bug in the agent). The
// client stays usable.
type RequestError struct {
	Type      string
	Message   string
	Traceback string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrRequest, e.Type, e.Message)
}

// Is makes errors.Is(err, ErrRequest) true.
func (e *RequestError) Is(target error) bool { return target == ErrRequest }
