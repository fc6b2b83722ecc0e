package engine

import (
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// parentCgroupName is limits.cgroup_parent, or the runtime's default.
func parentCgroupName(cfg *profiles.Config) string {
	if cfg.Limits.CgroupParent != "" {
		return cfg.Limits.CgroupParent
	}
	return sandbox.DefaultCgroupParent
}
