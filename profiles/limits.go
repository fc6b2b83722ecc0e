package profiles

// MaxSandboxes is limits.max_sandboxes or, when it is 0, the most sandboxes
// the rest of the configuration lets live at once: every session, a full
// warm pool for the default and the data image, and every execution in
// flight (a stateless run holds a sandbox taken from the pool while the
// pool refills).
func (c *Config) MaxSandboxes() int {
	if c.Limits.MaxSandboxes > 0 {
		return c.Limits.MaxSandboxes
	}
	pooled := 0
	if c.Pool.Enabled {
		pooled = c.Pool.Size
		if c.Images.Data != "" {
			pooled *= 2
		}
	}
	return c.Sessions.MaxConcurrent + pooled + c.Execution.MaxConcurrent
}

// ParentLimits returns limits.memory and limits.pids, each derived when 0
// from MaxSandboxes and one sandbox's maxima, the memory at most three
// quarters of hostMemory (the host's size in bytes; 0 when unknown) in
// whole MiB.
func (c *Config) ParentLimits(hostMemory int64) (memory, pids int64) {
	n := int64(c.MaxSandboxes())
	memory, pids = int64(c.Limits.Memory), int64(c.Limits.Pids)
	if memory == 0 {
		memory = n * int64(c.Execution.MaxMemory)
		if share := hostMemory / 4 * 3 &^ (1<<20 - 1); share > 0 {
			memory = max(min(memory, share), int64(c.Execution.MaxMemory))
		}
	}
	if pids == 0 {
		pids = n * int64(c.Execution.MaxPids)
	}
	return memory, pids
}
