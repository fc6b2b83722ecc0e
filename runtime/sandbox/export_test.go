package sandbox

// AgentDir is where the runtime keeps the agent (and its bytecode), for tests.
func (r *Runtime) AgentDir() string { return r.agentDir }
