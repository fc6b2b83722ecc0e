// Package profiles is forge's configuration: the YAML schema, its embedded
// defaults, ${VAR} substitution, FORGE_* environment overrides, validation
// with field-path errors, and the named sandbox profiles that requests run
// under. It is pure data: it performs no syscalls beyond reading the config
// file, and the mechanism that enforces these values lives elsewhere.
//
// Every field carries a `doc` tag; docs/configuration.md is generated from
// them (see Schema and Markdown), so a field without a doc cannot be merged.
package profiles

// Config is the whole configuration file. The zero value is not useful; start
// from Default, Parse or Load.
type Config struct {
	StateDir           string                   `yaml:"state_dir" doc:"Directory for images, sandboxes, sessions and the audit log. Empty means /var/lib/forge when running as root, else $XDG_STATE_HOME/forge (~/.local/state/forge); Load fills it in."`
	Server             ServerConfig             `yaml:"server" doc:"How forge talks to MCP clients."`
	Execution          ExecutionConfig          `yaml:"execution" doc:"Limits of one execution (requests may ask for less than the maxima, never more), and how many run at once."`
	Limits             LimitsConfig             `yaml:"limits" doc:"Limits of forge as a whole: what all its sandboxes together may take from the host."`
	Images             ImagesConfig             `yaml:"images" doc:"Which images sandboxes may run."`
	Sessions           SessionsConfig           `yaml:"sessions" doc:"Stateful sessions: a sandbox kept alive (paused while idle) between calls."`
	Volumes            VolumesConfig            `yaml:"volumes" doc:"The per-session /workspace volume."`
	Security           SecurityConfig           `yaml:"security" doc:"Host uid ranges of the user namespaces, seccomp and the audit log. The sandbox's security invariants (namespaces, read-only root, no capabilities, no network) are not configurable."`
	EnvironmentBuilder EnvironmentBuilderConfig `yaml:"environment_builder" doc:"The build_custom_environment tool, which installs packages into a new image."`
	MCPTools           map[string]MCPToolServer `yaml:"mcp_tools" doc:"Downstream MCP servers whose tools sandboxed code may call as Python functions (code mode). Keyed by server name; their credentials (env) never enter the sandbox."`
	Pool               PoolConfig               `yaml:"pool" doc:"The warm pool of pre-started, paused sandboxes that makes stateless runs fast."`
	HostedTools        HostedToolsConfig        `yaml:"hosted_tools" doc:"Hosted tools: @tool functions of a forge_tools module served as MCP tools beside execute_python, each call in a fresh sandbox that already imported the module."`
	Sandbox            SandboxConfig            `yaml:"sandbox" doc:"How sandboxes are made: containers, or children forked from a warm template (zygote)."`
	E2B                E2BConfig                `yaml:"e2b" doc:"The E2B face: the E2B SDKs' protocol on the HTTP listener (docs/e2b.md)."`
	AgentSandbox       AgentSandboxConfig       `yaml:"agent_sandbox" doc:"The agent-sandbox face: the runtime API of kubernetes-sigs/agent-sandbox's python-runtime on the HTTP listener (docs/deploy.md, agent-sandbox)."`
	Cluster            ClusterConfig            `yaml:"cluster" doc:"Several replicas serving the same sessions from a shared directory (docs/deploy.md). Off by default."`
	Profiles           map[string]Profile       `yaml:"profiles" doc:"Named sandbox profiles. The built-in profile \"default\" is derived from execution.* and security.seccomp_profile; a named profile overrides any of its fields and must stay within the execution maxima."`
}

// ServerConfig configures the MCP server.
type ServerConfig struct {
	Name            string        `yaml:"name" doc:"Server name reported to MCP clients."`
	Transport       string        `yaml:"transport" doc:"MCP transport: stdio, or http (streamable HTTP at /mcp plus the REST API)."`
	HTTPAddr        string        `yaml:"http_addr" doc:"host:port the HTTP transport listens on."`
	AllowedOrigins  []string      `yaml:"allowed_origins" doc:"Origins (scheme://host[:port]) allowed to call the HTTP transport from a browser, besides loopback origins (http://localhost, http://127.0.0.1, http://[::1], any port), which are always allowed. Any other Origin is refused with 403."`
	AllowedHosts    []string      `yaml:"allowed_hosts" doc:"Host header values (without port) the HTTP transport accepts; protects against DNS rebinding."`
	LogLevel        string        `yaml:"log_level" doc:"Minimum level logged to stderr: debug, info, warn or error."`
	ShutdownGrace   Duration      `yaml:"shutdown_grace" doc:"How long a shutdown waits for running executions before killing them."`
	DrainDelay      Duration      `yaml:"drain_delay" doc:"How long the HTTP listener keeps serving after SIGTERM before it closes: /readyz fails, and every answer carries Connection: close so that clients move their kept-alive connections to other replicas. 0 closes at once; behind a load balancer, at least the time it takes to stop sending new connections here (docs/deploy.md)."`
	Auth            AuthConfig    `yaml:"auth" doc:"Bearer-token authentication of the HTTP transport (MCP at /mcp and the REST API under /api/v1)."`
	Tenants         TenantsConfig `yaml:"tenants" doc:"Per-tenant rate limits and quotas of the HTTP transport."`
	Tracing         TracingConfig `yaml:"tracing" doc:"OpenTelemetry traces of the HTTP transport, over OTLP/HTTP."`
	MaxConnections  int           `yaml:"max_connections" doc:"Most HTTP connections open at once; further ones wait in the kernel's accept queue. Each open MCP stream (GET /mcp) holds one."`
	MaxBodyInFlight Size          `yaml:"max_body_in_flight" doc:"Most bytes of HTTP request bodies (MCP and REST) being read or handled at once, over every client; a request waits up to 10 s for room, then gets 503 with Retry-After. At least the largest body one request may send (see docs/service.md, \"Request bodies\")."`
}

// ExecutionConfig holds the defaults and maxima of one execution.
type ExecutionConfig struct {
	DefaultTimeout Duration `yaml:"default_timeout" doc:"Wall-clock timeout when the request names none; an integer means seconds. Enforced by the host with SIGKILL."`
	MaxTimeout     Duration `yaml:"max_timeout" doc:"Largest timeout a request may ask for."`
	DefaultMemory  Size     `yaml:"default_memory" doc:"Memory limit (cgroup memory.max) when the request names none."`
	MaxMemory      Size     `yaml:"max_memory" doc:"Largest memory limit a request may ask for."`
	DefaultCPUs    float64  `yaml:"default_cpus" doc:"CPU limit in CPUs when the request names none."`
	MaxCPUs        float64  `yaml:"max_cpus" doc:"Largest CPU limit a request may ask for."`
	MaxPids        int      `yaml:"max_pids" doc:"Process/thread limit (cgroup pids.max) of every sandbox."`
	MaxCodeSize    Size     `yaml:"max_code_size" doc:"Largest code a request may submit."`
	OutputLimit    Size     `yaml:"output_limit" doc:"Cap on captured stdout and on stderr, each; longer output is cut and flagged truncated."`
	TmpSize        Size     `yaml:"tmp_size" doc:"Size of the writable tmpfs at /tmp."`
	Network        Network  `yaml:"network" doc:"Always false (or \"none\"): sandboxes get loopback only. It exists so that a config asking for a network fails loudly instead of being ignored."`
	Egress         []string `yaml:"egress" doc:"Egress allowlist of the default profile: what code may reach through forge's host-side egress proxy (HTTP_PROXY/HTTPS_PROXY inside; the sandbox still has no route and no DNS). Rules are host[:port[,port...]][!private][!tcp]: an exact name (pypi.org), *.suffix (any name below it), an IP or a CIDR (10.0.0.0/8:5432, [::1]:8080); ports default to 443 for a name (name:80 for plain http://) and 80,443 for an IP or a CIDR. Names resolving to loopback, private, link-local, CGNAT or metadata addresses are refused unless an IP/CIDR rule names the address or the name rule ends in !private. A CONNECT tunnel carries only TLS whose ClientHello names the CONNECT host, unless the rule ends in !tcp (any protocol, unread). [none] (the default) allows nothing. A request may narrow it, never widen it."`
	MaxConcurrent  int      `yaml:"max_concurrent" doc:"Most executions (stateless runs and session calls together) running at once; more wait for a free slot."`
	QueueTimeout   Duration `yaml:"queue_timeout" doc:"How long an execution waits for a free slot (see execution.max_concurrent) before it fails with a busy error that asks the caller to retry; 0 fails at once."`
}

// LimitsConfig caps forge as a whole on its host.
type LimitsConfig struct {
	MaxSandboxes  int     `yaml:"max_sandboxes" doc:"Most sandboxes alive at once, among which the host's per-user kernel limits (inotify instances and watches, fanotify groups and marks, namespaces: /proc/sys/user) are divided, each sandbox getting its share as user.* sysctls. 0 derives it: sessions.max_concurrent + pool.size for images.default and images.data + execution.max_concurrent."`
	KernelReserve float64 `yaml:"kernel_reserve" doc:"Share of each of the host's per-user kernel limits kept for the host's own use; the sandboxes share the rest. From 0 to 0.9."`
	Memory        Size    `yaml:"memory" doc:"Memory limit of forge's parent cgroup (every sandbox together). 0 derives it: limits.max_sandboxes x execution.max_memory, at most three quarters of the host's memory. At least execution.max_memory."`
	Pids          int     `yaml:"pids" doc:"Process limit (pids.max) of forge's parent cgroup. 0 derives it: limits.max_sandboxes x execution.max_pids. At least execution.max_pids."`
	CgroupParent  string  `yaml:"cgroup_parent" doc:"forge's parent cgroup, below each controller's root, which holds every sandbox's cgroup and carries limits.memory and limits.pids. Empty means forge. Two forge servers on one host with their own caps need two names: a forge process that finds another live one's sandboxes below its parent only raises the limits there, never lowers them (a forge run beside a forge serve leaves the server's caps)."`
}

// ImagesConfig says which images may run.
type ImagesConfig struct {
	Default         string   `yaml:"default" doc:"Image used when the request names none; must match images.allowed."`
	AllowedPatterns []string `yaml:"allowed" doc:"Image name patterns a request may use (path.Match syntax on the whole name: forge/*, forge/custom:*)."`
	Data            string   `yaml:"data" doc:"Image with the data-science stack (numpy, pandas, matplotlib); must match images.allowed. Empty disables it."`
	Preload         []string `yaml:"preload" doc:"Image references (oci:DIR, oci-archive:FILE, ...) imported when forge starts, so a fresh state dir has its images: forge's own OCI image ships the base image's layout and sets FORGE_IMAGES_PRELOAD to it. An image already in the store costs a few milliseconds."`
}

// SessionsConfig configures stateful sessions.
type SessionsConfig struct {
	MaxConcurrent int      `yaml:"max_concurrent" doc:"Most sessions alive at once; creating one more fails."`
	IdleTimeout   Duration `yaml:"idle_timeout" doc:"A session unused for this long is destroyed."`
	MaxLifetime   Duration `yaml:"max_lifetime" doc:"A session is destroyed this long after creation, used or not."`
	Persist       bool     `yaml:"persist" doc:"Keep session metadata and workspaces across server restarts."`
}

// VolumesConfig configures the per-session workspace.
type VolumesConfig struct {
	SessionQuota Size `yaml:"session_quota" doc:"Size cap of a session's /workspace."`
	MaxFileSize  Size `yaml:"max_file_size" doc:"Largest single file written to or read from /workspace through the API."`
}

// SecurityConfig configures the knobs of the sandbox that may vary by host.
type SecurityConfig struct {
	UIDRangeStart   uint32 `yaml:"uid_range_start" doc:"First host uid (and gid) of the range forge reserves for sandboxes: each live sandbox maps its container ids onto its own block of uid_map_size ids from it, never shared with another sandbox. The range must overlap no range in /etc/subuid or /etc/subgid and no uid or gid in /etc/passwd or /etc/group (forge refuses to start otherwise; forge doctor shows it). Every forge process on one state dir must use the same range."`
	UIDRangeSize    uint32 `yaml:"uid_range_size" doc:"Number of host ids reserved from uid_range_start; uid_range_size / uid_map_size sandboxes can live at once. The default, 0x70000000-0x7fffffff, is far above what useradd hands out and below 2^31."`
	UIDMapSize      uint32 `yaml:"uid_map_size" doc:"Number of uids (and gids) each sandbox maps (container ids 0..uid_map_size-1, its block of the reserved range); must cover security.sandbox_uid."`
	SandboxUID      uint32 `yaml:"sandbox_uid" doc:"uid (and gid) the code runs as inside the sandbox; never 0."`
	SeccompProfile  string `yaml:"seccomp_profile" doc:"Seccomp profile: \"default\" (built in) or the absolute path of a JSON profile. There is no unconfined setting."`
	AuditLog        string `yaml:"audit_log" doc:"Absolute path of the JSON-lines audit log. Empty means <state_dir>/audit.log."`
	AuditMaxSize    Size   `yaml:"audit_max_size" doc:"The audit log is rotated when it grows past this size."`
	AuditMaxBackups int    `yaml:"audit_max_backups" doc:"Rotated audit logs kept (audit.log.1 … audit.log.N); older ones are deleted."`
}

// MCPToolServer is one downstream MCP server, started by forge over stdio.
type MCPToolServer struct {
	Command         string            `yaml:"command" doc:"Required. Executable that runs the server (looked up in PATH)."`
	Args            []string          `yaml:"args" doc:"Its arguments."`
	Env             map[string]string `yaml:"env" doc:"Extra environment of the server process, e.g. its API token via ${VAR}. Never visible inside the sandbox."`
	Prefix          string            `yaml:"prefix" doc:"Python module name the tools appear under inside the sandbox; empty means the server's name. Must be a Python identifier."`
	Timeout         Duration          `yaml:"timeout" doc:"Limit of one tool call."`
	MaxCalls        int               `yaml:"max_calls" doc:"Most calls to this server's tools in one execution; 0 means unlimited."`
	MaxResponseSize Size              `yaml:"max_response_size" doc:"Largest tool response passed back into the sandbox."`
	Sandbox         bool              `yaml:"sandbox" doc:"Run this (untrusted) server inside a sandbox of its own instead of as a host process: command and args are run there, with the forge_tools sources importable (PYTHONPATH=/run/forge/sdk), env set, and the network the egress policy allows (none by default)."`
	Image           string            `yaml:"image" doc:"With sandbox: the image (or custom environment) the server runs in; empty means images.default."`
	Mount           string            `yaml:"mount" doc:"With sandbox: a host file or directory (the server's code) mounted read-only at /run/forge/<its base name>; it must be readable by others (the sandbox user is an unprivileged host id)."`
}

// setDefaults fills in the defaults of a new mcp_tools entry before the file's
// values are decoded over it.
func (m *MCPToolServer) setDefaults() {
	m.Timeout = Duration(defaultToolTimeout)
	m.MaxCalls = defaultToolMaxCalls
	m.MaxResponseSize = defaultToolMaxResponse
}

// PoolConfig configures the warm pool.
type PoolConfig struct {
	Enabled           bool     `yaml:"enabled" doc:"Keep pre-started sandboxes ready; without it every stateless run starts a sandbox cold."`
	Size              int      `yaml:"size" doc:"Warm sandboxes kept per image and profile while requests are served from the pool; it grows past this after misses (max_size) and shrinks back when idle."`
	MaxSize           int      `yaml:"max_size" doc:"Most warm sandboxes per image the pool grows to while requests find it empty (one more per miss); at most size keeps the pool fixed. Pooled sandboxes run no user code, so growth takes no share of the per-sandbox kernel limits (limits.max_sandboxes)."`
	MemoryBudget      Size     `yaml:"memory_budget" doc:"Memory the ready sandboxes of one pool may hold together (measured cgroup charge, about 5-8 MiB each for images.default, more for images.data); growth stops there. size is kept even over it. 0: max_size alone bounds the pool."`
	ShrinkAfter       Duration `yaml:"shrink_after" doc:"After this long without a miss, a grown pool gives back half of its growth, and again after each further period, down to size."`
	MaxIdleAge        Duration `yaml:"max_idle_age" doc:"A warm sandbox older than this is replaced."`
	RefillConcurrency int      `yaml:"refill_concurrency" doc:"Sandboxes started in parallel while refilling."`
	WarmModules       []string `yaml:"warm_modules" doc:"Python modules imported in every warm sandbox before it is paused (while requests outrun the pool, later: once it is calm)."`
	WarmModulesData   []string `yaml:"warm_modules_data" doc:"Extra modules imported in sandboxes of images.data, when the image has them."`
}

// Profile is a named set of sandbox limits. In the configuration file a zero
// field means "inherit from the default profile"; Config.Profile returns the
// resolved values.
type Profile struct {
	Memory  Size     `yaml:"memory" doc:"Memory limit; unset inherits execution.default_memory. At most execution.max_memory."`
	CPUs    float64  `yaml:"cpus" doc:"CPU limit; unset inherits execution.default_cpus. At most execution.max_cpus."`
	Pids    int      `yaml:"pids" doc:"Process limit; unset inherits execution.max_pids, which is also its maximum."`
	Timeout Duration `yaml:"timeout" doc:"Default timeout; unset inherits execution.default_timeout. At most execution.max_timeout."`
	TmpSize Size     `yaml:"tmp_size" doc:"Size of /tmp; unset inherits execution.tmp_size, which is also its maximum."`
	Seccomp string   `yaml:"seccomp" doc:"Seccomp profile, \"default\" or an absolute path; unset inherits security.seccomp_profile."`
	Egress  []string `yaml:"egress,omitempty" doc:"Egress allowlist (rules as in execution.egress); unset inherits execution.egress, [none] allows nothing. A request may narrow it, never widen it."`
}
