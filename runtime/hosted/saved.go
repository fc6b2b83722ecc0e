package hosted

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/forge/internal/lazyre"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
)

// save_tool: a function an agent defined in its session becomes a hosted
// tool of that principal. Its source is found inside the session's sandbox
// (source.py), comes back as untrusted, bounded data, and is stored with its
// hash under the state dir, one package per principal, which a Host serves
// like any tools path.

//go:embed source.py
var sourceSnippet string

// ErrSave is a save_tool or remove_tool that cannot be done; the message
// says why.
var ErrSave = errors.New("save_tool")

// maxSavedSource caps one saved function's source (the agent returns
// values up to 64 KiB).
const maxSavedSource = 60 << 10

var identRE = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// SavedTool is one saved function.
type SavedTool struct {
	Name        string    `json:"name"`
	Function    string    `json:"function"`
	Description string    `json:"description,omitempty"`
	SHA256      string    `json:"sha256"` // of the function's source
	SessionID   string    `json:"session_id"`
	SavedAt     time.Time `json:"saved_at"`
	File        string    `json:"file"`
}

// SaverOptions configure a Saver.
type SaverOptions struct {
	Engine   *engine.Engine
	Config   profiles.HostedToolsConfig // limits of the saved tools' Host
	StateDir string
	Logger   *slog.Logger
	// Attach lists a principal's new Host of saved tools (at its first
	// save); an error (a name collision) undoes the save.
	Attach func(p engine.Principal, h *Host) error
}

// Saver keeps the saved tools of every principal.
type Saver struct {
	opts  SaverOptions
	dir   string
	mu    sync.Mutex // one save or removal at a time
	hosts map[string]*Host
}

// NewSaver opens the saved tools under StateDir/hosted/saved.
func NewSaver(opts SaverOptions) *Saver {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Saver{opts: opts, dir: filepath.Join(opts.StateDir, "hosted", "saved"), hosts: map[string]*Host{}}
}

func (s *Saver) pdir(p engine.Principal) string {
	h := sha256.Sum256([]byte(p.Tenant))
	return filepath.Join(s.dir, hex.EncodeToString(h[:8]), "saved_tools")
}

// SetAttach replaces SaverOptions.Attach (the face that serves the Hosts
// sets it when it takes the saver).
func (s *Saver) SetAttach(attach func(p engine.Principal, h *Host) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Attach = attach
}

// List is p's saved tools.
func (s *Saver) List(p engine.Principal) []SavedTool {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx, _ := s.readIndex(p)
	return idx
}

func (s *Saver) readIndex(p engine.Principal) ([]SavedTool, error) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(s.pdir(p)), "index.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var idx []SavedTool
	return idx, json.Unmarshal(b, &idx)
}

// Open serves p's saved tools, if any (at start): the Host, or nil.
func (s *Saver) Open(ctx context.Context, p engine.Principal) (*Host, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.hosts[p.Tenant]; h != nil {
		return h, nil
	}
	idx, err := s.readIndex(p)
	if err != nil || len(idx) == 0 {
		return nil, err
	}
	h, err := s.newHost(ctx)(p)
	if err != nil {
		return nil, err
	}
	s.hosts[p.Tenant] = h
	return h, nil
}

func (s *Saver) newHost(ctx context.Context) func(p engine.Principal) (*Host, error) {
	return func(p engine.Principal) (*Host, error) {
		cfg := s.opts.Config
		cfg.Path, cfg.ReloadInterval = s.pdir(p), 0
		return New(ctx, Options{Engine: s.opts.Engine, Config: cfg, StateDir: s.opts.StateDir, Logger: s.opts.Logger})
	}
}

// Save takes function's source in p's session sessionID and serves it as
// the hosted tool name (default: the function's name).
func (s *Saver) Save(ctx context.Context, p engine.Principal, sessionID, function, name, description string) (SavedTool, error) {
	if !identRE.MatchString(function) {
		return SavedTool{}, fmt.Errorf("%w: function %q: want a Python identifier (the name the function has in the session)", ErrSave, clip(function, 64))
	}
	if name == "" {
		name = function
	}
	if !toolNameRE.MatchString(name) {
		return SavedTool{}, fmt.Errorf("%w: name %q: want 1-128 of A-Z a-z 0-9 _ - . (MCP tool names)", ErrSave, clip(name, 64))
	}
	if len(description) > maxDescription {
		return SavedTool{}, fmt.Errorf("%w: description of %d bytes, more than %d", ErrSave, len(description), maxDescription)
	}
	if _, err := s.opts.Engine.SessionState(ctx, p, sessionID); err != nil {
		return SavedTool{}, err
	}
	src, err := s.source(ctx, p, sessionID, function)
	if err != nil {
		return SavedTool{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	idx, err := s.readIndex(p)
	if err != nil {
		return SavedTool{}, fmt.Errorf("%w: reading the saved tools: %w", ErrSave, err)
	}
	sum := sha256.Sum256([]byte(src))
	fh := sha256.Sum256([]byte(name))
	st := SavedTool{Name: name, Function: function, Description: description, SHA256: hex.EncodeToString(sum[:]),
		SessionID: sessionID, SavedAt: time.Now().UTC(), File: "t_" + hex.EncodeToString(fh[:8]) + ".py"}
	next := slices.DeleteFunc(slices.Clone(idx), func(t SavedTool) bool { return t.Name == name })
	next = append(next, st)
	body := fmt.Sprintf("# Saved by forge save_tool from session %s; sha256 of the function: %s\nfrom forge_tools import tool\n\n%s\n\n\ntool(name=%s, description=%s)(%s)\n",
		sessionID, st.SHA256, src, pyStr(name), pyOrNone(description), function)
	undo, err := s.write(p, next, map[string]string{st.File: body})
	if err != nil {
		return SavedTool{}, err
	}
	if err := s.apply(ctx, p); err != nil {
		undo()
		if h := s.hosts[p.Tenant]; h != nil {
			_, _ = h.Reload(ctx)
		}
		return SavedTool{}, fmt.Errorf("%w: %s: %w", ErrSave, name, err)
	}
	return st, nil
}

func pyOrNone(s string) string {
	if s == "" {
		return "None"
	}
	return pyStr(s)
}

// source runs source.py in the session, privately (nothing is left in
// its namespace), and returns the function's source.
func (s *Saver) source(ctx context.Context, p engine.Principal, sessionID, function string) (string, error) {
	code := fmt.Sprintf(`(lambda d: (exec(%s, d), {"source": d["out"]})[1])({"f": %s, "name": %s, "cells": getattr(__import__("builtins"), "display", None).__globals__.get("_CELLS", []) if hasattr(getattr(__import__("builtins"), "display", None), "__globals__") else [], "__builtins__": __builtins__})`,
		pyStr(sourceSnippet), function, pyStr(function))
	res, err := s.opts.Engine.Execute(ctx, engine.Request{Principal: p, SessionID: sessionID, Code: code, Timeout: 10 * time.Second, Client: "save_tool"})
	if err != nil {
		return "", err
	}
	if !res.Success {
		if res.Error != nil {
			return "", fmt.Errorf("%w: taking the source of %s in session %s: %s: %s", ErrSave, function, sessionID, res.Error.Type, clip(res.Error.Message, 1024))
		}
		return "", fmt.Errorf("%w: taking the source of %s in session %s failed", ErrSave, function, sessionID)
	}
	m, _ := res.Result.(map[string]any)
	src, ok := m["source"].(string)
	if !ok || src == "" {
		return "", fmt.Errorf("%w: the source of %s is larger than %d bytes or not text", ErrSave, function, maxSavedSource)
	}
	if len(src) > maxSavedSource {
		return "", fmt.Errorf("%w: the source of %s is %d bytes, more than %d", ErrSave, function, len(src), maxSavedSource)
	}
	if !strings.HasPrefix(src, "def ") && !strings.HasPrefix(src, "async def ") {
		return "", fmt.Errorf("%w: the source of %s does not start with def", ErrSave, function)
	}
	return src, nil
}

// write replaces p's index and package files; undo restores the previous.
func (s *Saver) write(p engine.Principal, idx []SavedTool, files map[string]string) (undo func(), err error) {
	pkg := s.pdir(p)
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSave, err)
	}
	indexPath := filepath.Join(filepath.Dir(pkg), "index.json")
	saved := map[string][]byte{}
	for _, f := range append([]string{indexPath, filepath.Join(pkg, "__init__.py")}, keys(files, pkg)...) {
		if b, err := os.ReadFile(f); err == nil {
			saved[f] = b
		} else {
			saved[f] = nil
		}
	}
	undo = func() {
		for f, b := range saved {
			if b == nil {
				os.Remove(f)
			} else {
				_ = os.WriteFile(f, b, 0o644)
			}
		}
	}
	var init strings.Builder
	init.WriteString("# The saved tools of one principal (forge save_tool). Generated; do not edit.\n")
	for i, t := range idx {
		fmt.Fprintf(&init, "from .%s import %s as _forge_saved_%d\n", strings.TrimSuffix(t.File, ".py"), t.Function, i)
	}
	ib, _ := json.MarshalIndent(idx, "", "  ")
	writes := map[string]string{indexPath: string(ib), filepath.Join(pkg, "__init__.py"): init.String()}
	for f, body := range files {
		writes[filepath.Join(pkg, f)] = body
	}
	for f, body := range writes {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			undo()
			return nil, fmt.Errorf("%w: %w", ErrSave, err)
		}
	}
	return undo, nil
}

func keys(m map[string]string, dir string) []string {
	var out []string
	for k := range m {
		out = append(out, filepath.Join(dir, k))
	}
	return out
}

// apply reloads p's Host (making and attaching it at the first save).
func (s *Saver) apply(ctx context.Context, p engine.Principal) error {
	if h := s.hosts[p.Tenant]; h != nil {
		_, err := h.Reload(ctx)
		return err
	}
	h, err := s.newHost(ctx)(p)
	if err != nil {
		return err
	}
	if s.opts.Attach != nil {
		if err := s.opts.Attach(p, h); err != nil {
			h.Close()
			return err
		}
	}
	s.hosts[p.Tenant] = h
	return nil
}

// Remove stops serving p's saved tool name and deletes it.
func (s *Saver) Remove(ctx context.Context, p engine.Principal, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx, err := s.readIndex(p)
	if err != nil {
		return fmt.Errorf("%w: reading the saved tools: %w", ErrSave, err)
	}
	i := slices.IndexFunc(idx, func(t SavedTool) bool { return t.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: no saved tool %q (see forge://tools/hosted)", ErrSave, clip(name, 128))
	}
	file := idx[i].File
	next := slices.Delete(slices.Clone(idx), i, i+1)
	undo, err := s.write(p, next, nil)
	if err != nil {
		return err
	}
	if err := s.apply(ctx, p); err != nil {
		undo()
		return fmt.Errorf("%w: %w", ErrSave, err)
	}
	os.Remove(filepath.Join(s.pdir(p), file))
	return nil
}

// Close stops every principal's Host.
func (s *Saver) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.hosts {
		h.Close()
	}
	s.hosts = map[string]*Host{}
}
