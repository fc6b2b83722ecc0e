package sandbox

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Bind is one more host path mounted read-only into a sandbox, under
// BridgeMountPoint (/run/forge/Name). Only forge's own snapshots go there
// (the forge_tools sources, a hosted tools module): never a path a client
// names.
type Bind struct {
	Source string // host file or directory
	Name   string // one path element: the mount point is /run/forge/Name
}

// bindOpts makes the mount point of each bind in the sandbox's bridge
// directory (the shared rootfs is read-only, but /run/forge is the
// sandbox's own host directory) and returns the mounts.
func bindOpts(cfg *Config) ([]SpecOpt, error) {
	if len(cfg.Binds) == 0 {
		return nil, nil
	}
	if cfg.BridgeDir == "" {
		return nil, fmt.Errorf("binds need a bridge directory: %w", ErrInvalidConfig)
	}
	var opts []SpecOpt
	for _, b := range cfg.Binds {
		if b.Name == "" || b.Name != path.Base(b.Name) || strings.HasPrefix(b.Name, ".") || b.Name == "socket" {
			return nil, fmt.Errorf("bind name %q: want one path element, not the socket: %w", b.Name, ErrInvalidConfig)
		}
		st, err := os.Stat(b.Source)
		if err != nil {
			return nil, fmt.Errorf("bind %s: %w", b.Name, err)
		}
		mp := filepath.Join(cfg.BridgeDir, b.Name)
		if st.IsDir() {
			err = os.MkdirAll(mp, 0o755)
		} else {
			var f *os.File
			if f, err = os.OpenFile(mp, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("bind %s: mount point: %w", b.Name, err)
		}
		opts = append(opts, WithReadOnlyBind(b.Source, path.Join(BridgeMountPoint, b.Name)))
	}
	return opts, nil
}
