package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// limitChecks show what the configuration asks of this host: each
// sandbox's share of the per-user kernel limits, and the parent cgroup's
// limits, configured and in force.
func limitChecks(cfg *profiles.Config) []check {
	budget, parent := engine.HostLimits(cfg, nil)
	bc := check{Name: "kernel budgets per sandbox", Disables: "per-sandbox kernel budgets: one sandbox could use up host root's inotify instances"}
	if host, err := sandbox.ReadUserLimits("/proc"); err != nil {
		bc.Detail = err.Error()
	} else {
		share := budget.Divide(host)
		parts := []string{fmt.Sprintf("%d sandboxes share %.0f%% (limits.max_sandboxes, limits.kernel_reserve):", budget.Among(), 100*(1-budget.Reserve))}
		for _, k := range slices.Sorted(maps.Keys(share)) {
			parts = append(parts, fmt.Sprintf("%s %d/%d", strings.TrimPrefix(k, "max_"), share[k], host[k]))
		}
		bc.Found, bc.Detail = true, strings.Join(parts, " ")
	}
	if rootless.Active() {
		return append([]check{bc}, rootlessLimitChecks()...)
	}
	name := cfg.Limits.CgroupParent
	if name == "" {
		name = sandbox.DefaultCgroupParent
	}
	pc := check{Name: "parent cgroup limits (" + name + ")", Disables: "a cap on all sandboxes together"}
	now, err := sandbox.ReadParentLimits(name)
	pc.Found = err == nil
	pc.Detail = fmt.Sprintf("configured memory %s, pids %d (limits.memory, limits.pids); in force: memory %s, pids %s",
		cgroups.FormatMemory(parent.MemoryBytes), parent.Pids, limitString(now.MemoryBytes, cgroups.FormatMemory), limitString(now.Pids, itoa))
	if err != nil {
		pc.Detail += ": " + err.Error()
	}
	if now == (sandbox.ParentLimits{}) {
		pc.Detail += " (not created yet: forge serve sets the limits at start)"
	}
	return []check{bc, pc}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// limitString formats a limit read back: -1 is no limit, 0 not set.
func limitString(v int64, format func(int64) string) string {
	switch v {
	case -1:
		return "max"
	case 0:
		return "unset"
	}
	return format(v)
}
