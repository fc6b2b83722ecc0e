package hosted

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"log/slog"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/internal/proc"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// Result is one call's outcome, as forge sends it: text for the model and,
// when the tool has an outputSchema, the value as structuredContent.
type Result struct {
	Text       string
	Structured json.RawMessage // a JSON object, or nil
	IsError    bool
	// ErrorType and ErrorMessage describe the exception (or the timeout)
	// of an isError result.
	ErrorType    string
	ErrorMessage string
	Duration     time.Duration
}

// ErrTypeTimeout is the ErrorType of a call that ran past its timeout.
const ErrTypeTimeout = "TimeoutError"

// Call runs tool name for p with args: validated against the inputSchema
// (an *ArgumentError), then run in a fresh sandbox that already imported
// the module (or in p's own worker for a persistent tool). Failures of the
// tool are results with IsError; errors are forge's own.
func (h *Host) Call(ctx context.Context, p engine.Principal, name string, args json.RawMessage) (*Result, error) {
	g := h.current()
	if g == nil {
		return nil, ErrClosed
	}
	t := g.byName[name]
	if t == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	if _, err := t.validate(args); err != nil {
		return nil, err
	}
	if isNullOrEmpty(args) {
		args = json.RawMessage("{}")
	}
	h.audit.Log(audit.Event{Event: audit.EventToolCall, Severity: audit.SeverityInfo, Tool: name, Server: "hosted",
		Principal: p.Tenant, Fields: map[string]any{"arguments_sha256": audit.CodeHash(string(args))}})
	release, err := h.eng.Admit(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	timeout := h.eng.CallTimeout(t.Timeout, time.Duration(h.cfg.Timeout))
	if t.Persistent || h.cfg.Persistent {
		return h.callWorker(ctx, g, p, t, args, timeout)
	}
	sb, release, err := h.acquire(ctx, g, p)
	if err != nil {
		return nil, err
	}
	defer h.eng.Discard(sb)
	defer release()
	if err := h.limit(sb, t); err != nil {
		return nil, err
	}
	return h.run(ctx, sb, t, args, timeout)
}

// acquire is a sandbox of p's with the module imported: pooled, else
// booted now. release lets the pool refill what it took
// (pool.Options.RefillHold).
func (h *Host) acquire(ctx context.Context, g *generation, p engine.Principal) (sb *sandbox.Sandbox, release func(), err error) {
	tenant := h.tenantOf(p)
	if pl := h.poolFor(g, tenant); pl != nil {
		sb, _, err := pl.Acquire(ctx)
		return sb, pl.Release, err
	}
	sb, err = h.boot(h.eng.HostedContext(ctx, engine.Principal{Tenant: tenant}), g)
	return sb, func() {}, err
}

// limit applies the tool's memory (or hosted_tools.memory), within the maxima.
func (h *Host) limit(sb *sandbox.Sandbox, t *Tool) error {
	mem := t.Memory
	if mem == 0 {
		mem = int64(h.cfg.Memory)
	}
	if mem == 0 {
		return nil
	}
	lim, err := h.eng.HostedLimits(mem)
	if err != nil {
		return fmt.Errorf("tool %q: %w", t.Name, err)
	}
	return sb.SetLimits(lim)
}

// run calls the tool in sb. Past timeout the sandbox is killed (Exec does)
// and the result says so.
func (h *Host) run(ctx context.Context, sb *sandbox.Sandbox, t *Tool, args json.RawMessage, timeout time.Duration) (*Result, error) {
	marker := newMarker()
	// The module's own timeout is later than the host's: the host kills.
	code := fmt.Sprintf("_forge_call(%s, %s, %s, %s)", pyStr(marker), pyStr(t.Name), pyStr(string(args)),
		strconv.FormatFloat((timeout+time.Second).Seconds(), 'f', 3, 64))
	start := time.Now()
	res, err := sb.Exec(ctx, code, sandbox.ExecOptions{Timeout: timeout, OutputLimit: h.opts.OutputLimit})
	if err != nil {
		return nil, fmt.Errorf("hosted tool %q: %w", t.Name, err)
	}
	d := time.Since(start)
	if res.TimedOut {
		msg := fmt.Sprintf("tool %q did not finish within %s; its sandbox was killed", t.Name, timeout)
		return &Result{Text: ErrTypeTimeout + ": " + msg, IsError: true, ErrorType: ErrTypeTimeout, ErrorMessage: msg, Duration: d}, nil
	}
	var raw []byte
	if v, ok := res.Result.(string); ok && res.Success && strings.HasPrefix(v, marker) {
		raw = []byte(v[len(marker):])
	} else {
		raw, err = replyOf(res, marker)
	}
	if err != nil {
		msg := fmt.Sprintf("tool %q ended without a result: %v", t.Name, err)
		if res.OOMKilled {
			msg += " (out of memory)"
		}
		return &Result{Text: "SandboxError: " + msg, IsError: true, ErrorType: "SandboxError", ErrorMessage: msg, Duration: d}, nil
	}
	r, err := parseResult(raw, t)
	if err != nil {
		return nil, err
	}
	r.Duration = d
	return r, nil
}

// callResult is a CallToolResult as forge_tools writes it, untrusted.
type callResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
	Meta              struct {
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"forge/error"`
	} `json:"_meta"`
	Invalid *string `json:"invalid"`
}

func parseResult(raw []byte, t *Tool) (*Result, error) {
	var c callResult
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("hosted tool %q: the sandbox's reply is not a result: %w", t.Name, err)
	}
	if c.Invalid != nil {
		// The host's schema check passed but the module's did not (a
		// conversion the schema cannot express): still the caller's arguments.
		return nil, &ArgumentError{Tool: t.Name, Reason: clip(*c.Invalid, 1024)}
	}
	r := &Result{IsError: c.IsError}
	var texts []string
	for _, p := range c.Content {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	r.Text = strings.Join(texts, "\n")
	if s := bytes.TrimSpace(c.StructuredContent); len(s) > 0 && string(s) != "null" {
		if s[0] != '{' {
			return nil, fmt.Errorf("hosted tool %q: structuredContent is not a JSON object", t.Name)
		}
		r.Structured = s
	}
	if c.Meta.Error != nil {
		r.ErrorType, r.ErrorMessage = clip(c.Meta.Error.Type, 256), clip(c.Meta.Error.Message, 16<<10)
	}
	return r, nil
}

// Persistent workers ------------------------------------------------------

type workerKey struct{ principal, tool string }

// worker is one principal's sandbox of one persistent tool: its module
// state lives as long as the worker and belongs to that principal only.
type worker struct {
	mu   sync.Mutex // one call at a time
	gen  *generation
	sb   *sandbox.Sandbox
	used uint64
	dead bool
}

func (w *worker) discard(h *Host) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sb != nil {
		h.eng.Discard(w.sb)
		w.sb = nil
	}
	w.dead = true
}

func (h *Host) callWorker(ctx context.Context, g *generation, p engine.Principal, t *Tool, args json.RawMessage, timeout time.Duration) (*Result, error) {
	key := workerKey{p.Tenant, t.Name}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	w := h.workers[key]
	if w == nil || w.gen != g {
		if w != nil {
			go w.discard(h)
		}
		w = &worker{gen: g}
		h.workers[key] = w
		h.evictLocked(key)
	}
	h.lastUse++
	w.used = h.lastUse
	h.mu.Unlock()

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return nil, ErrClosed
	}
	if w.sb == nil {
		sb, release, err := h.acquire(ctx, g, p)
		if err != nil {
			return nil, err
		}
		defer release()
		if err := h.limit(sb, t); err != nil {
			h.eng.Discard(sb)
			return nil, err
		}
		w.sb = sb
	} else if err := w.sb.Resume(); err != nil {
		h.eng.Discard(w.sb)
		w.sb = nil
		return nil, err
	}
	r, err := h.run(ctx, w.sb, t, args, timeout)
	if err != nil || r.ErrorType == ErrTypeTimeout || r.ErrorType == "SandboxError" {
		// Killed or broken: the next call starts a new worker.
		h.eng.Discard(w.sb)
		w.sb = nil
		return r, err
	}
	if err := w.sb.Pause(); err != nil {
		h.eng.Discard(w.sb)
		w.sb = nil
	}
	return r, nil
}

// evictLocked stops the least recently used workers beyond
// hosted_tools.max_workers (never keep).
func (h *Host) evictLocked(keep workerKey) {
	for len(h.workers) > max(h.cfg.MaxWorkers, 1) {
		var oldest workerKey
		var ow *worker
		for k, w := range h.workers {
			if k != keep && (ow == nil || w.used < ow.used) {
				oldest, ow = k, w
			}
		}
		if ow == nil {
			return
		}
		delete(h.workers, oldest)
		go ow.discard(h)
	}
}

// WorkerSandbox is the id of p's worker of tool name, "" if none (tests
// and forge://tools/hosted).
func (h *Host) WorkerSandbox(p engine.Principal, name string) string {
	h.mu.Lock()
	w := h.workers[workerKey{p.Tenant, name}]
	h.mu.Unlock()
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sb == nil {
		return ""
	}
	return w.sb.ID()
}

// Reload ------------------------------------------------------------------

// watch polls the path every iv; a change reloads the table.
func (h *Host) watch(iv time.Duration) {
	defer h.wg.Done()
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		h.mu.Lock()
		prev := h.gen.stamp
		h.mu.Unlock()
		if stamp(h.cfg.Path) == prev {
			continue
		}
		if _, err := h.Reload(context.Background()); err != nil {
			h.log.Warn("reloading hosted tools failed; keeping the previous table", "path", h.cfg.Path, "err", err)
		}
	}
}

// Reload reads the table again. On success the new table (and pool)
// replace the old and OnChange runs; changed says whether the snapshot
// differed. On failure the old table stays.
func (h *Host) Reload(ctx context.Context) (changed bool, err error) {
	g, _, err := h.load(ctx, false)
	h.mu.Lock()
	if err == nil && h.check != nil {
		if err = h.check(g.tools); err != nil {
			h.mu.Unlock()
			h.retire(g)
			h.mu.Lock()
		}
	}
	if err != nil {
		// Do not retry the same broken files at every tick.
		if h.gen != nil {
			h.gen.stamp = stamp(h.cfg.Path)
		}
		h.mu.Unlock()
		return false, err
	}
	if h.closed {
		h.mu.Unlock()
		h.retire(g)
		return false, ErrClosed
	}
	old := h.gen
	changed = old == nil || old.snap.hash != g.snap.hash
	h.gen = g
	onChange := h.onChange
	h.mu.Unlock()
	if old != nil {
		h.retire(old)
	}
	h.log.Info("hosted tools reloaded", "path", h.cfg.Path, "tools", len(g.tools), "changed", changed)
	if onChange != nil {
		onChange()
	}
	return changed, nil
}

// Snapshots ---------------------------------------------------------------

func mkdirAll(dir string) string {
	_ = os.MkdirAll(dir, 0o711)
	return dir
}

func removeSnapshot(s *snapshot) { _ = os.RemoveAll(s.dir) }

// removeDeadSnapshots removes the snapshots of forge processes that are
// gone (their names start with the pid).
func removeDeadSnapshots(dir string, log *slog.Logger) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() && proc.DeadOwner(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				log.Warn("removing a stale hosted tools snapshot", "dir", e.Name(), "err", err)
			}
		}
	}
}
