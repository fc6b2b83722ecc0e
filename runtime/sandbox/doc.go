// Package sandbox makes forge's sandboxes directly on runc's libcontainer:
// one container per sandbox, whose init process is the in-sandbox agent
// (runtime/kernel) behind a static reaper as pid 1.
//
// NewSpec builds the OCI spec that carries every invariant of DESIGN.md
// (seven namespaces, a read-only root, no capabilities, no-new-privileges,
// seccomp, cgroup limits, tmpfs /tmp and /workspace, no host path but the
// agent's directory and the sandbox's own bridge directory); SpecOpts can
// add to it but never remove one. Each sandbox maps its container ids onto
// a block of host ids of its own, leased from the range the Runtime
// reserves (runtime/idmap) and given back only once the sandbox is
// destroyed and its init reaped; OwnsProcess tells its processes from any
// other (the bridge checks its peers with it). A Runtime starts sandboxes
// from a Config, tracks the live ones and removes what crashed forge
// processes left behind (Cleanup). A Sandbox runs cells (Exec), is paused
// and resumed by the pool and by sessions, has its limits tightened per
// request (SetLimits), and is destroyed exactly once (Destroy), which also
// runs its OnDestroy hook. In ModeZygote (zygote_linux.go) a Sandbox is
// instead a child forked from a warm template container of its image, with
// the same invariants and the same methods.
package sandbox
