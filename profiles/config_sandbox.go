package profiles

// SandboxConfig says how sandboxes are made.
type SandboxConfig struct {
	Mode         string   `yaml:"mode" doc:"How each sandbox is made: zygote (the default: forked in a few milliseconds from a warm template container of its image; each child still gets its own user, mount, pid, net, ipc, uts and cgroup namespaces, cgroup, host uids and the seccomp profile) or container (one libcontainer container per sandbox). Code mode's sandboxes are children too; sandboxes with more mounts (hosted tools, sandboxed servers, builds) stay containers, and so does every sandbox of a rootless forge without a subordinate id range."`
	ZygoteForks  int      `yaml:"zygote_forks" doc:"A zygote template is replaced after this many children: they share its address layout and hash secret."`
	ZygoteMaxAge Duration `yaml:"zygote_max_age" doc:"A zygote template is replaced once this old (on a timer, whether or not it forks)."`
	ZygoteSlots  int      `yaml:"zygote_slots" doc:"Children of one template alive at once (1-256); each maps onto a host uid block of its own (security.uid_map_size ids), so a template leases zygote_slots+1 blocks. Rootless, cut to fit two templates in the user's subordinate range (27 for 65536 ids)."`
}

func (c *Config) validateSandbox(p *problems) {
	s := &c.Sandbox
	switch s.Mode {
	case "container", "zygote":
	default:
		p.add("sandbox.mode", "%q: must be container or zygote", s.Mode)
	}
	positive(p, "sandbox.zygote_forks", s.ZygoteForks)
	positive(p, "sandbox.zygote_max_age", s.ZygoteMaxAge)
	if s.ZygoteSlots < 1 || s.ZygoteSlots > 256 {
		p.add("sandbox.zygote_slots", "%d: must be in 1-256", s.ZygoteSlots)
	}
}
