package e2b

import (
	"context"
	"errors"
	"time"

	"github.com/mcp-forge/forge/runtime/session"
)

// reapEvery is how often the reaper looks for sandboxes past their end: a
// sandbox outlives its timeout by at most this much.
var reapEvery = time.Second

// reaper kills sandboxes past their end time (their timeout): the session,
// its sandbox and files, and the record. Paused sandboxes are kept until
// killed or connected, as E2B keeps them.
func (h *Handler) reaper() {
	defer h.reaped.Done()
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.reap()
		}
	}
}

// reap kills every running sandbox whose end has come.
func (h *Handler) reap() {
	now := h.opts.Now()
	for _, sb := range h.reg.list("") {
		if sb.Paused || sb.EndAt.After(now) {
			continue
		}
		h.reg.remove(sb.ID)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		h.cmds.stopSandbox(ctx, sb.ID, "its sandbox reached its timeout")
		h.ctxs.forget(sb.ID)
		err := h.opts.Engine.DestroySession(ctx, sb.Principal(), sb.ID)
		cancel()
		if err != nil && !errors.Is(err, session.ErrNotFound) {
			h.log.Warn("killing a sandbox past its timeout", "sandbox", sb.ID, "err", err)
			continue
		}
		h.log.Info("sandbox reached its timeout; killed", "sandbox", sb.ID, "principal", sb.Owner, "end_at", sb.EndAt)
	}
}
