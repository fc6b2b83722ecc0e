package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/session"
)

// sessionCostBytes is what one live session holding a small DataFrame
// costs the parent cgroup here (forge bench --density 1000: 6.1 MiB), and
// sessionPids the processes it keeps (the agent and its reaper).
const (
	sessionCostBytes = 6 << 20
	sessionPids      = 2
)

// densityCheck says how many live sessions this configuration allows and
// which limit stops them first: sessions.max_concurrent, the host id
// blocks (one per live sandbox), or the parent cgroup's memory and pids.
func densityCheck(cfg *profiles.Config) check {
	_, parent := engine.HostLimits(cfg, nil)
	type cap struct {
		n    int64
		name string
	}
	caps := []cap{{int64(cfg.Sessions.MaxConcurrent), "sessions.max_concurrent"}}
	if cfg.Security.UIDMapSize > 0 {
		caps = append(caps, cap{int64(cfg.Security.UIDRangeSize / cfg.Security.UIDMapSize), "id blocks (security.uid_range_size / security.uid_map_size)"})
	}
	if parent.MemoryBytes > 0 {
		caps = append(caps, cap{(parent.MemoryBytes - session.NewSessionRoom) / sessionCostBytes, "limits.memory at ~6 MiB a session"})
	}
	if parent.Pids > 0 {
		caps = append(caps, cap{parent.Pids / sessionPids, "limits.pids"})
	}
	sort.SliceStable(caps, func(i, j int) bool { return caps[i].n < caps[j].n })
	parts := make([]string, len(caps))
	for i, c := range caps {
		parts[i] = fmt.Sprintf("%s %d", c.name, c.n)
	}
	return check{Name: "live sessions", Found: true, Disables: "more live sessions than the first limit: the next is refused at once, naming it",
		Detail: fmt.Sprintf("at most %d (%s); then %s", caps[0].n, caps[0].name, strings.Join(parts[1:], ", "))}
}
