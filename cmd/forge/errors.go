package main

import (
	"errors"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/idmap"
)

// isUsage reports errors that are the user's to fix in the command line or
// config (exit 2) rather than failures of the host (exit 3): every refusal
// of the engine, and the errors of what the CLI calls below it.
func isUsage(err error) bool {
	var refused *engine.RefusedError
	if errors.As(err, &refused) {
		return true
	}
	for _, target := range []error{
		rootfs.ErrBadReference,
		rootfs.ErrImageNotFound,
		engine.ErrInvalidRequest,
		cgroups.ErrInvalidLimit,
		cgroups.ErrExceedsMaximum,
		idmap.ErrOverlap, // security.uid_range_* to change
		idmap.ErrGeometry,
		idmap.ErrInvalid,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
