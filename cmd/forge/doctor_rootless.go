package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// rootlessIDCheck says where a rootless forge's sandboxes get their ids:
// blocks of the user's own subordinate range, or, without one, the user's
// own uid for every sandbox.
func rootlessIDCheck(cfg *profiles.Config) check {
	c := check{Name: "sandbox ids (rootless)", Disables: "a uid of each sandbox's own: every sandbox runs as your own uid, so sandbox processes can signal and ptrace each other and your own processes, and files they write in shared places are yours; add a range with usermod --add-subuids 100000-165535 --add-subgids 100000-165535 USER"}
	r, block, err := sandbox.RootlessIDs("/proc", cfg.Security.UIDMapSize, cfg.Security.SandboxUID)
	switch {
	case err != nil:
		c.Detail = err.Error()
	case r.Size == 0:
		c.Detail = "no subordinate range of this user in /etc/subuid and /etc/subgid"
	default:
		sub, _ := rootless.Subordinate("/etc", rootless.UID())
		c.Found = true
		c.Detail = fmt.Sprintf("your subordinate range %s (/etc/subuid, via newuidmap): %d sandboxes of %d ids", sub, r.Size/block, block)
	}
	return c
}

// rootlessHeld is what limits hold rootless, asked once per doctor run: it
// may ask the user's systemd manager for a scope.
var rootlessHeld = sync.OnceValues(func() (sandbox.LimitsHeld, error) {
	return sandbox.RootlessHeld(context.Background(), "/proc", "/sys/fs/cgroup")
})

// rootlessLimitChecks say exactly which sandbox limits hold rootless: the
// cgroup limits of a delegated cgroup v2 subtree forge runs in, or rlimits,
// with what is missing for cgroups.
func rootlessLimitChecks() []check {
	held, err := rootlessHeld()
	f := func(name, how, disables string) check {
		return check{Name: "limit " + name + " (rootless)", Found: how != "", Detail: how, Disables: disables}
	}
	deleg := check{Name: "delegated cgroup v2 (rootless)", Found: err == nil,
		Disables: "cgroup limits for sandboxes: the limits below are rlimits"}
	if err != nil {
		deleg.Detail = err.Error()
	} else {
		deleg.Detail = fmt.Sprintf("%s: forge moves into %s/%s and puts each sandbox's cgroup (%s) in %s/%s",
			held.Delegated, held.Delegated, sandbox.SupervisorCgroup, strings.Join(sandbox.DelegatedControllers, ", "), held.Delegated, sandbox.DefaultCgroupParent)
	}
	src := check{Name: "limits source (rootless)", Found: held.Source != sandbox.SourceRlimits, Detail: string(held.Source),
		Disables: "cgroup limits: run forge in a systemd user session (forge asks the user manager for a scope over D-Bus), in a unit with Delegate=yes, or in a cgroup delegated to you"}
	switch held.Source {
	case sandbox.SourceScopeCreated:
		src.Detail += ": " + held.Unit + ", a transient scope with Delegate=yes that the user's systemd manager (at " + held.Bus + ") made for this forge; it goes when forge exits"
	case sandbox.SourceScopeFound:
		src.Detail += ": " + held.Unit + " has Delegate=yes (the user's systemd manager at " + held.Bus + ")"
	case sandbox.SourceInherited:
		src.Detail += ": the cgroup forge started in is delegated to you, and no systemd unit of yours holds it"
	}
	return []check{
		src,
		deleg,
		f("memory", held.Memory, "a memory limit"),
		f("pids", held.Pids, "a process limit"),
		f("cpu", held.CPU, "a CPU limit: a sandbox can use every core until its execution's timeout"),
		f("pause", held.Freeze, "freezing idle sandboxes: threads that code started keep running between calls of a session"),
		f("parent cgroup", held.Parent, "a cap on all sandboxes together (limits.memory, limits.pids)"),
	}
}

// rootlessZygoteCheck adds to the sandbox mode check what zygote mode is
// rootless: the children's blocks from the user's subordinate range (or a
// refusal without one) and how their limits hold.
func rootlessZygoteCheck(cfg *profiles.Config, c *check) {
	ids, block, err := sandbox.RootlessIDs("/proc", cfg.Security.UIDMapSize, cfg.Security.SandboxUID)
	slots := 0
	if err == nil {
		slots, err = sandbox.RootlessZygoteSlots(ids, block, cfg.Sandbox.ZygoteSlots)
	}
	if err != nil {
		c.Found = false
		c.Detail = "zygote (sandbox.mode) cannot run rootless here, so sandboxes start as containers: " + err.Error()
		return
	}
	held, herr := rootlessHeld()
	how := "each child's limits are rlimits, as a container's are rootless (" + held.Memory + "; " + held.Pids + "): no delegated cgroup v2"
	if herr == nil {
		how = "each child gets a cgroup of its own in the delegated subtree " + held.Delegated
	}
	c.Detail += fmt.Sprintf("; rootless: %d children per template (sandbox.zygote_slots %d, fitted to the blocks of your subordinate range), %s",
		slots, cfg.Sandbox.ZygoteSlots, how)
}
