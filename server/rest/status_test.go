package rest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/server/tenant"
)

// TestStatusOf is the one mapping of refusals to HTTP that the REST, E2B
// and agent-sandbox faces share; wrapped errors map as their cause.
func TestStatusOf(t *testing.T) {
	refused := func(k engine.RefusalKind) error {
		return fmt.Errorf("calling: %w", &engine.RefusedError{Kind: k, Err: errors.New("no")})
	}
	for _, c := range []struct {
		name          string
		err           error
		status, retry int
	}{
		{"tenant limit with a wait", &tenant.LimitError{Tenant: "a", RetryAfter: 1500 * time.Millisecond}, http.StatusTooManyRequests, 2},
		{"tenant quota", fmt.Errorf("x: %w", &tenant.LimitError{Tenant: "a"}), http.StatusTooManyRequests, 0},
		{"not found", refused(engine.RefusedNotFound), http.StatusNotFound, 0},
		{"limit", refused(engine.RefusedLimit), http.StatusTooManyRequests, 0},
		{"busy", refused(engine.RefusedBusy), http.StatusServiceUnavailable, 1},
		{"invalid", refused(engine.RefusedInvalid), http.StatusBadRequest, 0},
		{"closed", fmt.Errorf("x: %w", engine.ErrClosed), http.StatusServiceUnavailable, 0},
		{"storage full", fmt.Errorf("session: %w", &os.PathError{Op: "write", Path: "/s/meta.json", Err: syscall.ENOSPC}), http.StatusInsufficientStorage, 0},
		{"quota", fmt.Errorf("x: %w", syscall.EDQUOT), http.StatusInsufficientStorage, 0},
		{"forge's own failure", errors.New("disk on fire"), 0, 0},
	} {
		if s, r := StatusOf(c.err); s != c.status || r != c.retry {
			t.Errorf("%s: StatusOf = %d, %d; want %d, %d", c.name, s, r, c.status, c.retry)
		}
	}
}
