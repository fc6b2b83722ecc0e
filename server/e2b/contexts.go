package e2b

// Code contexts: several Python namespaces in one sandbox, sharing its
// files. A sandbox has one interpreter (forge's agent, the session's
// namespace); a context is a set of variables and a working directory
// that the agent swaps in before a run of that context (contextSnippet)
// and keeps aside, in the agent's memory, while another context runs. So
// contexts cost nothing until used, a switch costs one short run, and the
// sandbox stays exactly as confined as before: no second process, no new
// channel. Contexts separate names, not trust: code of one context can
// reach another's saved variables, as E2B's kernels in one sandbox can
// reach each other's memory (same user). Pausing saves the variables of
// the context that ran last; the others are empty after the resume.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// maxContexts bounds the contexts of one sandbox.
const maxContexts = 64

// contextTable is the contexts of every sandbox; its zero value is ready.
type contextTable struct {
	mu  sync.Mutex
	sbs map[string]*sandboxContexts
}

// sandboxContexts is one sandbox's contexts.
type sandboxContexts struct {
	run  chan struct{} // a token: held from a switch to the end of the run
	mu   sync.Mutex    // guards the fields below
	list []contextInfo // DefaultContext first
	live string        // the context whose variables are in the namespace ("" none)
}

var errNoContext = errors.New("context not found")

func (t *contextTable) of(sandboxID string) *sandboxContexts {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sbs == nil {
		t.sbs = map[string]*sandboxContexts{}
	}
	c := t.sbs[sandboxID]
	if c == nil {
		c = &sandboxContexts{run: make(chan struct{}, 1), live: DefaultContext,
			list: []contextInfo{{ID: DefaultContext, Language: "python", Cwd: HomeDir}}}
		t.sbs[sandboxID] = c
	}
	return c
}

func (t *contextTable) forget(sandboxID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.sbs, sandboxID)
}

func (c *sandboxContexts) find(id string) (contextInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.list {
		if x.ID == id {
			return x, true
		}
	}
	return contextInfo{}, false
}

// lock takes the sandbox's run token (until ctx ends).
func (c *sandboxContexts) lock(ctx context.Context) error {
	select {
	case c.run <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *sandboxContexts) unlock() { <-c.run }

// enter makes id the live context of sb, and holds it so until unlock.
func (t *contextTable) enter(ctx context.Context, h *Handler, sb *Sandbox, id string) (unlock func(), err error) {
	c := t.of(sb.ID)
	info, ok := c.find(id)
	if !ok {
		return nil, fmt.Errorf("%w: %q (sandbox %s)", errNoContext, truncate(id, 80), sb.ID)
	}
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	live := c.live
	c.mu.Unlock()
	if live != id {
		if err := h.contextOp(ctx, sb, map[string]any{"op": "switch", "to": id, "live": live, "cwd": info.Cwd}); err != nil {
			c.unlock()
			return nil, err
		}
		c.mu.Lock()
		c.live = id
		c.mu.Unlock()
	}
	return c.unlock, nil
}

// contextSnippet keeps the contexts that are not live in a module of the
// agent (sys.modules, outside the user's namespace). The user's part of
// the namespace is every name but the dunders and display(), as in a
// restart.
const contextSnippet = `
import os, sys, types

def main(a):
    ns = sys.modules["__main__"].__dict__
    m = sys.modules.get("_forge_e2b_contexts")
    if m is None:  # a fresh agent (a new or restored sandbox): its namespace is a's live one
        m = types.ModuleType("_forge_e2b_contexts")
        m.saved, m.live = {}, a["live"]
        sys.modules[m.__name__] = m
    mine = [k for k in ns if not k.startswith("__") and k != "display"]
    if a["op"] == "switch":
        if m.live:
            m.saved[m.live] = ({k: ns.pop(k) for k in mine}, os.getcwd())
        else:
            for k in mine:
                del ns[k]
        values, cwd = m.saved.pop(a["to"], ({}, a["cwd"]))
        ns.update(values)
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/home/user")
        m.live = a["to"]
    elif a["id"] == m.live:  # restart or remove the live context: empty it
        for k in mine:
            del ns[k]
        os.chdir(a.get("cwd") or "/home/user")
        if a["op"] == "remove":
            m.live = ""
    elif a["op"] == "remove":
        m.saved.pop(a["id"], None)
    else:
        m.saved[a["id"]] = ({}, a["cwd"])
`

// contextOp runs one op of contextSnippet in sb's session.
func (h *Handler) contextOp(ctx context.Context, sb *Sandbox, args map[string]any) error {
	res, err := h.runSnippet(ctx, sb, contextSnippet, args, opTimeout, nil)
	switch {
	case err != nil:
		return err
	case res.Error != nil:
		return connectErrorf(codeInternal, "switching Python contexts in the sandbox: %s: %s", res.Error.Type, truncate(res.Error.Message, 300))
	}
	return nil
}

// contextError answers an error of a context operation.
func (h *Handler) contextError(w http.ResponseWriter, r *http.Request, err error, sb *Sandbox) {
	var ce *ConnectError
	switch {
	case errors.Is(err, errNoContext):
		writeError(w, http.StatusNotFound, err.Error()+": create it with create_code_context")
	case errors.As(err, &ce) && connectStatus[ce.Code] != 0:
		writeError(w, connectStatus[ce.Code], ce.Message)
	default:
		h.engineError(w, r, err, "switching the Python context of sandbox "+sb.ID)
	}
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	c := h.ctxs.of(sb.ID)
	c.mu.Lock()
	list := append([]contextInfo(nil), c.list...)
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

// createContext adds an empty Python context working in cwd (in
// /home/user); nothing runs until its first run.
func (h *Handler) createContext(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Language != "" && req.Language != "python" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("language %q: forge sandboxes run Python only; run other languages through commands.run", truncate(req.Language, 40)))
		return
	}
	cwd := HomeDir
	if req.Cwd != "" {
		if _, err := workspacePath(req.Cwd); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("cwd %q: a context works inside %s, the sandbox's workspace", truncate(req.Cwd, 100), HomeDir))
			return
		}
		cwd = strings.TrimSuffix(req.Cwd, "/")
		if !strings.HasPrefix(cwd, "/") {
			cwd = HomeDir + "/" + cwd
		}
	}
	var b [16]byte
	rand.Read(b[:])
	info := contextInfo{ID: hex.EncodeToString(b[:]), Language: "python", Cwd: cwd}
	c := h.ctxs.of(sb.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.list) >= maxContexts {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("sandbox %s has %d contexts, forge's limit: remove one first", sb.ID, maxContexts))
		return
	}
	c.list = append(c.list, info)
	writeJSON(w, http.StatusOK, info)
}

// restartContext empties a context's namespace (files stay), as a kernel
// restart.
func (h *Handler) restartContext(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	h.resetContext(w, r, sb, "restart")
}

// removeContext forgets a context and its variables; the default one
// stays.
func (h *Handler) removeContext(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	if r.PathValue("ctx") == DefaultContext {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("context %q is the one runs without a context use; it cannot be removed (restart it to empty it)", DefaultContext))
		return
	}
	h.resetContext(w, r, sb, "remove")
}

func (h *Handler) resetContext(w http.ResponseWriter, r *http.Request, sb *Sandbox, op string) {
	id := r.PathValue("ctx")
	c := h.ctxs.of(sb.ID)
	info, ok := c.find(id)
	if !ok {
		h.contextError(w, r, fmt.Errorf("%w: %q (sandbox %s)", errNoContext, truncate(id, 80), sb.ID), sb)
		return
	}
	if err := c.lock(r.Context()); err != nil {
		h.engineError(w, r, err, "waiting for the run of sandbox "+sb.ID)
		return
	}
	defer c.unlock()
	c.mu.Lock()
	live := c.live
	c.mu.Unlock()
	args := map[string]any{"op": op, "id": id, "live": live, "cwd": info.Cwd}
	if err := h.contextOp(r.Context(), sb, args); err != nil {
		h.contextError(w, r, err, sb)
		return
	}
	if id == live || op == "remove" {
		c.mu.Lock()
		if id == c.live && op == "remove" {
			c.live = ""
		}
		if op == "remove" {
			for i, x := range c.list {
				if x.ID == id {
					c.list = append(c.list[:i], c.list[i+1:]...)
					break
				}
			}
		}
		c.mu.Unlock()
	}
	w.WriteHeader(http.StatusNoContent)
}
