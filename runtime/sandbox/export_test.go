package sandbox

import "os"

// AgentDir is where the runtime keeps the agent (and its bytecode), for tests.
func (r *Runtime) AgentDir() string { return r.agentDir }

// SetInitFile replaces the slim init handed to init processes, for tests.
func (r *Runtime) SetInitFile(f *os.File) { r.initFile = f }

// WaitSlimInit waits until the process's slim init memfd is made.
func WaitSlimInit() { waitSlimInit() }

// InCgroup is inCgroup, for tests.
var InCgroup = inCgroup

// CloseTemplateSockets closes the host's end of each template's control
// socket: to a fork, a template that is gone but whose exit is not seen yet.
func (r *Runtime) CloseTemplateSockets() {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	for _, t := range r.templates {
		t.ctl.Close()
	}
}

// WithoutZygoteHelper makes the runtime install its agent without the
// zygote's C helper (zfork.so), as a forge built without `make build` does.
func WithoutZygoteHelper(o *Options) { o.withoutZygoteHelper = true }
