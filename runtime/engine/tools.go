package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcp-forge/forge/internal/proc"
	"github.com/mcp-forge/forge/runtime/bridge"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// preludeTimeout bounds the generated code that defines the tool functions.
const preludeTimeout = 10 * time.Second

// Bridge is the code-mode bridge, nil when no mcp_tools are configured.
func (e *Engine) Bridge() *bridge.Bridge { return e.bridge }

// ToolCatalog lists the code-mode tools; nil when none are configured.
func (e *Engine) ToolCatalog() []bridge.Tool {
	if e.bridge == nil {
		return nil
	}
	return e.bridge.Catalog()
}

// newBridgeDir makes the per-sandbox directory mounted at /run/forge: never
// shared, traversable by the sandbox user (the socket itself is 0600 and
// owned by that user). Its name starts with this process's pid, so that
// a later forge process can remove it if this one is killed
// (removeDeadBridgeDirs).
func (e *Engine) newBridgeDir() (string, error) {
	base := filepath.Join(e.cfg.StateDir, "bridge")
	if err := os.MkdirAll(base, 0o711); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%d-", os.Getpid()))
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o711)
}

// openGrant opens the sandbox's bridge socket for names and runs the
// prelude that defines them as Python functions and the mcp_tools module.
func (e *Engine) openGrant(ctx context.Context, sb *sandbox.Sandbox, names []string) (*bridge.Grant, error) {
	if sb.BridgeDir() == "" {
		return nil, fmt.Errorf("sandbox %s has no bridge directory", sb.ID())
	}
	g, err := e.bridge.Grant(ctx, sb, names)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	res, err := sb.Exec(ctx, g.Prelude(), sandbox.ExecOptions{Timeout: preludeTimeout, KeepAlive: true})
	if err == nil && !res.Success {
		err = fmt.Errorf("defining the tools in the sandbox: %s: %s", res.Error.Type, res.Error.Message)
	}
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// grants keeps the grant of each sandbox that has one, until the sandbox
// ends (dropGrant).
type grants struct {
	mu sync.Mutex
	m  map[string]*grant // by sandbox id
}

type grant struct {
	g     *bridge.Grant
	names string
}

// grantTools makes names callable in sb, reusing the grant of an earlier
// call in the same sandbox (a session's) when the tools are the same
// (resetting its per-execution counters) and replacing it when they differ.
// The grant is closed when the sandbox ends.
func (e *Engine) grantTools(ctx context.Context, sb *sandbox.Sandbox, names []string) error {
	key := fmt.Sprint(names)
	e.grants.mu.Lock()
	if e.grants.m == nil {
		e.grants.m = make(map[string]*grant)
	}
	old := e.grants.m[sb.ID()]
	e.grants.mu.Unlock()
	if old != nil && old.names == key {
		old.g.Reset()
		return nil
	}
	if old != nil {
		old.g.Close()
	}
	g, err := e.openGrant(ctx, sb, names)
	e.grants.mu.Lock()
	defer e.grants.mu.Unlock()
	if err != nil {
		delete(e.grants.m, sb.ID())
		return err
	}
	e.grants.m[sb.ID()] = &grant{g: g, names: key}
	return nil
}

// dropGrant closes the grant of a destroyed sandbox.
func (e *Engine) dropGrant(id string) {
	e.grants.mu.Lock()
	sg := e.grants.m[id]
	delete(e.grants.m, id)
	e.grants.mu.Unlock()
	if sg != nil {
		sg.g.Close()
	}
}

// removeDeadBridgeDirs removes the bridge directories of forge processes
// that are gone: a killed process never ran its sandboxes' OnDestroy. Their
// sandboxes were removed before (sandbox.NewRuntime), so nothing mounts them.
func removeDeadBridgeDirs(stateDir string, log *slog.Logger) {
	base := filepath.Join(stateDir, "bridge")
	ents, _ := os.ReadDir(base)
	for _, d := range ents {
		if !proc.DeadOwner(d.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(base, d.Name())); err != nil {
			log.Warn("removing a dead forge process's bridge directory", "dir", d.Name(), "err", err)
		}
	}
}
