package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
)

func TestRefuse(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind RefusalKind // "" = not a refusal
	}{
		{fmt.Errorf("%w: timeout too long", ErrInvalidRequest), RefusedInvalid},
		{fmt.Errorf("pulling: %w", rootfs.ErrBadReference), RefusedInvalid},
		{fmt.Errorf("%w \"../x\"", session.ErrBadID), RefusedInvalid},
		{fmt.Errorf("write_file: %w: path escapes /workspace", kernel.ErrRequest), RefusedInvalid},
		{fmt.Errorf("%w: \"forge/nope:1\"", rootfs.ErrImageNotFound), RefusedNotFound},
		{fmt.Errorf("%w: s-1", session.ErrNotFound), RefusedNotFound},
		{fmt.Errorf("%w: 8 live", session.ErrLimit), RefusedLimit},
		{fmt.Errorf("%w: held by 42", session.ErrBusy), RefusedBusy},
		{&RefusedError{Kind: RefusedBusy, Err: errors.New("busy, retry")}, RefusedBusy},
		{errors.New("libcontainer exploded"), ""},
		{kernel.ErrAgentExited, ""},
		{ErrClosed, ""},
	} {
		err := refuse(tc.err)
		var r *RefusedError
		switch {
		case tc.kind == "" && errors.As(err, &r):
			t.Errorf("refuse(%v) = %v, want no refusal", tc.err, r)
		case tc.kind != "" && (!errors.As(err, &r) || r.Kind != tc.kind):
			t.Errorf("refuse(%v): got %#v, want a refusal of kind %s", tc.err, err, tc.kind)
		case err.Error() != tc.err.Error() || !errors.Is(err, tc.err):
			t.Errorf("refuse(%v) = %v: want the same message and the cause kept", tc.err, err)
		}
	}
	if refuse(nil) != nil {
		t.Error("refuse(nil) != nil")
	}
}
