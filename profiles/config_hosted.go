package profiles

// HostedToolsConfig configures hosted tools: the functions of a forge_tools
// module, served as MCP tools with every call in a sandbox.
type HostedToolsConfig struct {
	Path           string   `yaml:"path" doc:"A Python file or package directory whose @tool functions (forge_tools) are served beside execute_python. Empty means none (forge serve --tools sets it). The module is imported only inside sandboxes, from a read-only snapshot of this path."`
	Image          string   `yaml:"image" doc:"Image (or custom environment) the tools run in; empty means images.default. Must be allowed by images.allowed."`
	Timeout        Duration `yaml:"timeout" doc:"Limit of one call when the tool declares no timeout; a tool's own timeout is capped at execution.max_timeout. Past it the call is an isError result and its sandbox is killed."`
	Memory         Size     `yaml:"memory" doc:"Memory limit of a call's sandbox when the tool declares none; 0 means execution.default_memory. Capped at execution.max_memory."`
	MaxTools       int      `yaml:"max_tools" doc:"Most tools the module may define; a larger table is refused."`
	MaxSchemaSize  Size     `yaml:"max_schema_size" doc:"Largest inputSchema (and outputSchema) of one tool, as JSON."`
	MaxTableSize   Size     `yaml:"max_table_size" doc:"Largest tool table read back from the sandbox, as JSON; at most 1m (the agent's output cap)."`
	MaxSourceSize  Size     `yaml:"max_source_size" doc:"Largest tools file or package (all files together) that is snapshotted for the sandboxes."`
	PoolSize       int      `yaml:"pool_size" doc:"Sandboxes kept ready with the module already imported (a pool per tenant when sandboxes are per tenant); under calls back to back the pool grows as execute_python's does (pool.max_size, pool.memory_budget, pool.shrink_after). In zygote mode each is a child of a template that has the module's snapshot mounted (sandbox.zygote_tool_templates). 0 starts (and imports) one per call."`
	Persistent     bool     `yaml:"persistent" doc:"Keep one warm worker per principal and tool for every tool, as if each declared persistent=True. A worker is never shared across principals."`
	MaxWorkers     int      `yaml:"max_workers" doc:"Most persistent workers alive at once; the least recently used is stopped to make room."`
	SaveTool       string   `yaml:"save_tool" doc:"The save_tool and remove_tool tools, which promote a function defined in a session into a hosted tool of that principal: refuse (not listed), approve (the client is asked through elicitation; a client without elicitation is refused), or allow."`
	ReloadInterval Duration `yaml:"reload_interval" doc:"How often the path is checked for changes (polling); a change reloads the table in a sandbox and sends notifications/tools/list_changed. 0 disables reloading. A broken reload keeps the old table and logs why."`
}

func (c *Config) validateHosted(p *problems) {
	h := &c.HostedTools
	positive(p, "hosted_tools.timeout", h.Timeout)
	nonNegative(p, "hosted_tools.memory", h.Memory)
	positive(p, "hosted_tools.max_tools", h.MaxTools)
	positive(p, "hosted_tools.max_schema_size", h.MaxSchemaSize)
	positive(p, "hosted_tools.max_table_size", h.MaxTableSize)
	if h.MaxTableSize > 1<<20 {
		p.add("hosted_tools.max_table_size", "%s is more than 1m (the agent's output cap)", h.MaxTableSize)
	}
	positive(p, "hosted_tools.max_source_size", h.MaxSourceSize)
	nonNegative(p, "hosted_tools.pool_size", h.PoolSize)
	positive(p, "hosted_tools.max_workers", h.MaxWorkers)
	nonNegative(p, "hosted_tools.reload_interval", h.ReloadInterval)
	switch h.SaveTool {
	case "refuse", "approve", "allow":
	default:
		p.add("hosted_tools.save_tool", "%q: want refuse, approve or allow", h.SaveTool)
	}
}
