package profiles

// SandboxConfig says how sandboxes are made.
type SandboxConfig struct {
	Mode                string   `yaml:"mode" doc:"How each sandbox is made: zygote (the default: forked in a few milliseconds from a warm template container of its image; each child still gets its own user, mount, pid, net, ipc, uts and cgroup namespaces, cgroup, host uids and the seccomp profile) or container (one libcontainer container per sandbox). Code mode's sandboxes and hosted tool calls are children too (a hosted tools module gets templates of its own that have its snapshot mounted: sandbox.zygote_tool_templates); sandboxes with other mounts (sandboxed servers, builds) stay containers, and so does every sandbox of a rootless forge without a subordinate id range."`
	ZygoteForks         int      `yaml:"zygote_forks" doc:"A zygote template is replaced after this many children: they share its address layout and hash secret."`
	ZygoteMaxAge        Duration `yaml:"zygote_max_age" doc:"A zygote template is replaced once this old (on a timer, whether or not it forks)."`
	ZygoteSlots         int      `yaml:"zygote_slots" doc:"Children of one template alive at once (1-256); each maps onto a host uid block of its own (security.uid_map_size ids), so a template leases zygote_slots+1 blocks. Rootless, cut to fit two templates in the user's subordinate range (27 for 65536 ids). A template's memory limit is execution.default_memory plus 4 MiB per slot (what its live children are charged in its cgroup). A hosted tools module's template has at most 32 (its children live one call each). More slots share one template's memory among more sessions (at 32, each of 1,000 data sessions carried 2 MiB of templates)."`
	ZygoteToolTemplates int      `yaml:"zygote_tool_templates" doc:"Hosted tools modules (with tenants: module and tenant pairs) whose zygote templates live at once; each such template has the module's snapshot mounted, forks the module's calls and holds a Python and zygote_slots+1 host uid blocks whether it forks or not. Making one more retires the least recently used. 0 derives it: as many as take an eighth of the host uid range (security.uid_range_size), at most 8 (forge doctor prints it)."`
	// ZygotePerTenant: see ZygoteTenants.
	ZygotePerTenant string `yaml:"zygote_per_tenant" doc:"Whether each tenant gets zygote templates (and warm pools) of its own, so that no two tenants' sandboxes are forked from one template: children of one template share its stack canary and pointer guard (AT_RANDOM), Python's hash secret and the address layout of its libraries (docs/security.md). on, off, or auto (the default): on when tokens are configured (server.auth.tokens, or a token store made by forge token create), decided when forge starts. Each tenant's template costs about a sandbox's memory and zygote_slots+1 host uid blocks."`
}

// ZygoteTenants says whether each tenant has zygote templates of its own:
// sandbox.zygote_per_tenant on, or auto with tokens configured (in
// server.auth.tokens, or tokenStore: the token store exists).
func (c *Config) ZygoteTenants(tokenStore bool) bool {
	switch c.Sandbox.ZygotePerTenant {
	case "on", "true":
		return true
	case "off", "false":
		return false
	}
	return len(c.Server.Auth.Tokens) > 0 || tokenStore
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
	nonNegative(p, "sandbox.zygote_tool_templates", s.ZygoteToolTemplates)
	switch s.ZygotePerTenant {
	case "auto", "on", "off", "true", "false":
	default:
		p.add("sandbox.zygote_per_tenant", "%q: must be auto, on or off", s.ZygotePerTenant)
	}
}
