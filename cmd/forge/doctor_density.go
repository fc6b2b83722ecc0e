package main

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/runtime/session"
)

// sessionCostBytes is what one live session holding a small DataFrame
// costs the parent cgroup here (forge bench --density 1000 on the data
// image, Python 3.13: 2.94 MiB; 4.9 on 3.11's), and sessionPids the tasks it keeps (its reaper, the
// agent and the agent's output watcher, a thread: each takes a pid).
const (
	sessionCostBytes = 3 << 20
	sessionPids      = 3
)

// pidMaxFile is the kernel's bound on pids, which every task of every
// process on the host takes one of.
var pidMaxFile = "/proc/sys/kernel/pid_max"

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
	if n, name := idBlockSessions(cfg); n > 0 {
		caps = append(caps, cap{n, name})
	}
	if parent.MemoryBytes > 0 {
		caps = append(caps, cap{(parent.MemoryBytes - session.NewSessionRoom) / sessionCostBytes, "limits.memory at ~3 MiB a session"})
	}
	if parent.Pids > 0 {
		caps = append(caps, cap{parent.Pids / sessionPids, "limits.pids at 3 a session"})
	}
	// forge raises its limit to what its sandboxes need (root: up to
	// fs.nr_open; else the hard limit): the most it can reach.
	if reach := sandbox.OpenFilesReach(math.MaxInt64); reach > 0 {
		caps = append(caps, cap{int64(reach-min(reach, sandbox.OpenFilesFor(0))) / sandbox.FilesPerSandbox,
			fmt.Sprintf("open files (RLIMIT_NOFILE, which forge raises as far as %d, %d a session)", reach, sandbox.FilesPerSandbox)})
	}
	if b, err := os.ReadFile(pidMaxFile); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			caps = append(caps, cap{n / sessionPids, "the kernel's pids (sysctl kernel.pid_max, 3 a session)"})
		}
	}
	sort.SliceStable(caps, func(i, j int) bool { return caps[i].n < caps[j].n })
	parts := make([]string, len(caps))
	for i, c := range caps {
		parts[i] = fmt.Sprintf("%s %d", c.name, c.n)
	}
	return check{Name: "live sessions", Found: true, Disables: "more live sessions than the first limit: the next is refused at once, naming it",
		Detail: fmt.Sprintf("at most %d (%s); then %s", caps[0].n, caps[0].name, strings.Join(parts[1:], ", "))}
}

// idBlockSessions is how many live sessions the host id range holds: a
// block of security.uid_map_size ids per sandbox, and in zygote mode one
// more per template of sandbox.zygote_slots children (each template leases
// zygote_slots+1 blocks). Smaller blocks hold more: security.uid_map_size
// 16384 makes the default range hold 16,384 blocks (16,256 zygote
// children) instead of 4,096 (3,968).
func idBlockSessions(cfg *profiles.Config) (int64, string) {
	s := cfg.Security
	if s.UIDMapSize == 0 {
		return 0, ""
	}
	blocks := int64(s.UIDRangeSize / s.UIDMapSize)
	if slots := int64(cfg.Sandbox.ZygoteSlots); cfg.Sandbox.Mode == string(sandbox.ModeZygote) && slots > 0 {
		return blocks / (slots + 1) * slots, fmt.Sprintf("id blocks (%d of security.uid_map_size %d ids in security.uid_range_size; a zygote template takes sandbox.zygote_slots+1 = %d for %d children)",
			blocks, s.UIDMapSize, slots+1, slots)
	}
	return blocks, fmt.Sprintf("id blocks (%d of security.uid_map_size %d ids in security.uid_range_size)", blocks, s.UIDMapSize)
}
