package rest

import (
	"errors"
	"net/http"
	"syscall"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/server/tenant"
)

// StatusOf is the HTTP status of a refusal of the engine or the tenant
// gate, with the seconds a client should wait before it retries (0: no
// Retry-After), and 507 for forge's storage being full (a session volume
// or quota: no space, not a bug). It is 0 for any other error: forge's own
// failure, or one its caller maps. Every face (REST, E2B, agent-sandbox) maps these errors
// here, so that one refusal means the same everywhere.
func StatusOf(err error) (status, retryAfter int) {
	var lim *tenant.LimitError
	var refused *engine.RefusedError
	switch {
	case errors.As(err, &lim):
		if lim.RetryAfter > 0 {
			return http.StatusTooManyRequests, lim.RetrySeconds()
		}
		return http.StatusTooManyRequests, 0
	case errors.As(err, &refused):
		switch refused.Kind {
		case engine.RefusedNotFound:
			return http.StatusNotFound, 0
		case engine.RefusedLimit:
			return http.StatusTooManyRequests, 0
		case engine.RefusedBusy:
			return http.StatusServiceUnavailable, 1
		}
		return http.StatusBadRequest, 0
	case errors.Is(err, engine.ErrClosed):
		return http.StatusServiceUnavailable, 0
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage, 0
	}
	return 0, 0
}
