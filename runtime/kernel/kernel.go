// Package kernel holds the in-sandbox agent (agent.py, embedded) and the host side of its
// protocol: JSON lines over two pipes, requests on the agent's fd 3 and replies on its fd 4.
//
// The sandbox launcher must start the agent as the sandbox's init with
//
//	argv:  Argv(AgentPath)   (python3 -I -B /opt/forge/agent/agent.py)
//	fd 0:  anything (the agent points it at /dev/null)
//	fd 1, fd 2: anything (the agent replaces them with per-exec capture buffers)
//	fd 3:  read end of the request pipe  (host → agent)
//	fd 4:  write end of the reply pipe   (agent → host)
//
// and hand the other two pipe ends to NewClient. The agent moves fds 3 and 4 to high,
// close-on-exec numbers before running anything, so neither user code's child processes nor
// its ordinary output can reach the reply channel. User code runs in the agent's own process,
// so it could still write to the reply pipe on purpose: the client therefore treats every byte
// as untrusted, and any malformed reply breaks the client for good (the host then kills the
// sandbox).
//
// As pid 1 of its pid namespace the agent forks once, before its imports, and pid 1 re-executes
// itself as a minimal reaper (python3 -I -S, builtin modules only, ~2.4 MB): it only reaps
// orphaned processes (so zombies of background jobs do not pile up against pids.max) and
// forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the agent, which runs as
// pid 2 (Hello.PID). When the agent exits, pid 1 exits with its status and the kernel kills the
// rest of the sandbox.
//
// Interrupts are not requests (the agent's only thread is busy running the code): the host
// sends SIGINT to the sandbox's init process (ExecRequest.Interrupt). During an exec that raises KeyboardInterrupt in the user's
// code, which the agent reports as an error of type KeyboardInterrupt, and the agent survives.
// Between requests the agent ignores SIGINT. Code blocked in os.system() does not see SIGINT
// (system(3) ignores it in the caller); the host's SIGKILL on the wall-clock timeout covers that.
package kernel

import "embed"

// AgentFileName is the agent's file name inside the directory mounted into the sandbox.
const AgentFileName = "agent.py"

// AgentPath is where the sandbox launcher mounts the agent (read-only).
const AgentPath = "/opt/forge/agent/" + AgentFileName

// The fds the agent expects its protocol pipes on (ExtraFiles[0] and ExtraFiles[1] in os/exec).
const (
	RequestFD = 3
	ReplyFD   = 4
)

// AgentSource is agent.py, written into the sandbox's agent directory by the launcher.
//
//go:embed agent.py
var AgentSource []byte

// Argv is the agent's command line. -I isolates it from PYTHON* variables and the user site
// (dist-packages stays on the path, where Debian installs numpy and friends); -B keeps it
// from writing .pyc files into /workspace.
func Argv(agentPath string) []string {
	return []string{"python3", "-I", "-B", agentPath}
}

// ReaperFileName is the static pid-1 reaper's file name beside the agent.
const ReaperFileName = "reaper"

//go:embed reaperbin
var reaperFS embed.FS

// Reaper is the static pid-1 reaper compiled from reaperbin/reaper.c by `make build`,
// or nil when forge was built without it (the agent then reaps with a
// minimal Python interpreter instead).
func Reaper() []byte {
	b, err := reaperFS.ReadFile("reaperbin/" + ReaperFileName)
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// ZForkFileName is the zygote's C helper beside the agent: a self-contained
// shared object (reaperbin/zfork.c) the template loads to make each child.
const ZForkFileName = "zfork.so"

// ZFork is the zygote's C helper compiled from reaperbin/zfork.c by `make
// build`, or nil when forge was built without it (the template then makes
// each child with its Python steps).
func ZFork() []byte {
	b, err := reaperFS.ReadFile("reaperbin/" + ZForkFileName)
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// ZygoteFileName is the zygote's file name beside the agent: the init of a
// zygote-mode template (runtime/sandbox/zygote_linux.go), which imports the
// agent once and forks every sandbox of its image.
const ZygoteFileName = "zygote.py"

// ZygotePath is where the sandbox launcher mounts the zygote (read-only).
const ZygotePath = "/opt/forge/agent/" + ZygoteFileName

// ZygoteSource is zygote.py, written beside the agent.
//
//go:embed zygote.py
var ZygoteSource []byte
