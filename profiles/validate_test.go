package profiles

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // the error must contain this
		is     error  // and wrap this, when set
	}{
		{"relative state_dir", func(c *Config) { c.StateDir = "var/forge" }, "state_dir: must be an absolute path", nil},
		{"agent_sandbox prefix under /api", func(c *Config) { c.AgentSandbox.PathPrefix = "/api/x" }, `agent_sandbox.path_prefix: "/api/x" is under forge's own /api`, nil},
		{"agent_sandbox prefix trailing slash", func(c *Config) { c.AgentSandbox.PathPrefix = "/as/" }, `agent_sandbox.path_prefix: "/as/": want`, nil},
		{"agent_sandbox prefix empty when on", func(c *Config) { c.AgentSandbox.Enabled, c.AgentSandbox.PathPrefix = true, "" }, `agent_sandbox.path_prefix: "": want`, nil},
		{"agent_sandbox image", func(c *Config) { c.AgentSandbox.Image = "docker.io/evil:1" }, `agent_sandbox.image: "docker.io/evil:1": want an image`, nil},
		{"empty name", func(c *Config) { c.Server.Name = " " }, "server.name: must not be empty", nil},
		{"transport", func(c *Config) { c.Server.Transport = "sse" }, `server.transport: must be one of stdio, http, got "sse"`, nil},
		{"http_addr", func(c *Config) { c.Server.HTTPAddr = "8080" }, "server.http_addr: want host:port", nil},
		{"http_addr port", func(c *Config) { c.Server.HTTPAddr = "localhost:http" }, "server.http_addr: invalid port", nil},
		{"origin wildcard", func(c *Config) { c.Server.AllowedOrigins = []string{"*"} }, "server.allowed_origins[0]:", nil},
		{"origin with path", func(c *Config) { c.Server.AllowedOrigins = []string{"https://a/b"} }, "server.allowed_origins[0]:", nil},
		{"host", func(c *Config) { c.Server.AllowedHosts = []string{""} }, "server.allowed_hosts[0]:", nil},
		{"log level", func(c *Config) { c.Server.LogLevel = "trace" }, "server.log_level:", nil},
		{"shutdown grace", func(c *Config) { c.Server.ShutdownGrace = 0 }, "server.shutdown_grace: must be > 0", nil},
		{"default timeout", func(c *Config) { c.Execution.DefaultTimeout = -1 }, "execution.default_timeout: must be > 0", nil},
		{"max timeout below default", func(c *Config) { c.Execution.MaxTimeout = Duration(10 * time.Second) },
			"execution.max_timeout: must be >= execution.default_timeout (30s), got 10s", nil},
		{"max memory below default", func(c *Config) { c.Execution.MaxMemory = 256 << 20 },
			"execution.max_memory: must be >= execution.default_memory (512m), got 256m", nil},
		{"max cpus below default", func(c *Config) { c.Execution.MaxCPUs = 0.5 }, "execution.max_cpus: must be >= execution.default_cpus (1), got 0.5", nil},
		{"cpus", func(c *Config) { c.Execution.DefaultCPUs = 0 }, "execution.default_cpus: must be > 0", nil},
		{"pids", func(c *Config) { c.Execution.MaxPids = 0 }, "execution.max_pids: must be > 0", nil},
		{"code size", func(c *Config) { c.Execution.MaxCodeSize = 0 }, "execution.max_code_size: must be > 0", nil},
		{"output limit", func(c *Config) { c.Execution.OutputLimit = 0 }, "execution.output_limit: must be > 0", nil},
		{"tmp size", func(c *Config) { c.Execution.TmpSize = 0 }, "execution.tmp_size: must be > 0", nil},
		{"network", func(c *Config) { c.Execution.Network = "true" }, "execution.network: security invariant: sandboxes never have a network", ErrSecurityInvariant},
		{"network host", func(c *Config) { c.Execution.Network = "host" }, "execution.network:", ErrSecurityInvariant},
		{"execution cap", func(c *Config) { c.Execution.MaxConcurrent = 0 }, "execution.max_concurrent: must be > 0", nil},
		{"queue timeout", func(c *Config) { c.Execution.QueueTimeout = -1 }, "execution.queue_timeout: must be >= 0", nil},
		{"max sandboxes", func(c *Config) { c.Limits.MaxSandboxes = -1 }, "limits.max_sandboxes: must be >= 0", nil},
		{"kernel reserve", func(c *Config) { c.Limits.KernelReserve = 1 }, "limits.kernel_reserve: must be from 0 to 0.9, got 1", nil},
		{"parent memory", func(c *Config) { c.Limits.Memory = 1 << 30 }, "limits.memory: must be >= execution.max_memory (2g), got 1g", nil},
		{"parent pids", func(c *Config) { c.Limits.Pids = 100 }, "limits.pids: must be >= execution.max_pids (128), got 100", nil},
		{"no allowed images", func(c *Config) { c.Images.AllowedPatterns = nil }, "images.allowed: must list at least one pattern", nil},
		{"bad pattern", func(c *Config) { c.Images.AllowedPatterns = append(c.Images.AllowedPatterns, "forge/[") }, `images.allowed[1]: "forge/[" is not a valid pattern`, nil},
		{"default not allowed", func(c *Config) { c.Images.Default = "python:3.12" }, `images.default: "python:3.12" does not match images.allowed`, nil},
		{"data not allowed", func(c *Config) { c.Images.Data = "jupyter/scipy" }, `images.data: "jupyter/scipy" does not match`, nil},
		{"max concurrent", func(c *Config) { c.Sessions.MaxConcurrent = 0 }, "sessions.max_concurrent: must be > 0", nil},
		{"lifetime below idle", func(c *Config) { c.Sessions.MaxLifetime = Duration(time.Minute) }, "sessions.max_lifetime: must be >= sessions.idle_timeout (30m), got 1m", nil},
		{"file above quota", func(c *Config) { c.Volumes.MaxFileSize = 1 << 30 }, "volumes.max_file_size: must be <= volumes.session_quota (256m), got 1g", nil},
		{"uid range start 0", func(c *Config) { c.Security.UIDRangeStart = 0 }, "security.uid_range_start:", ErrSecurityInvariant},
		{"uid range below one block", func(c *Config) { c.Security.UIDRangeSize = 1000 }, "security.uid_range_size: must hold at least one block", nil},
		{"sandbox uid 0", func(c *Config) { c.Security.SandboxUID = 0 }, "security.sandbox_uid:", ErrSecurityInvariant},
		{"sandbox uid unmapped", func(c *Config) { c.Security.UIDMapSize = 1000 }, "security.uid_map_size: must be > security.sandbox_uid (1000)", nil},
		{"uid overflow", func(c *Config) { c.Security.UIDRangeStart = 1<<32 - 100 }, "security.uid_range_size: security.uid_range_start", nil},
		{"seccomp unconfined", func(c *Config) { c.Security.SeccompProfile = "unconfined" }, "security.seccomp_profile:", ErrSecurityInvariant},
		{"seccomp relative", func(c *Config) { c.Security.SeccompProfile = "my.json" }, "security.seccomp_profile: want", nil},
		{"audit log relative", func(c *Config) { c.Security.AuditLog = "audit.log" }, "security.audit_log: must be an absolute path", nil},
		{"audit size", func(c *Config) { c.Security.AuditMaxSize = 0 }, "security.audit_max_size: must be > 0", nil},
		{"audit backups", func(c *Config) { c.Security.AuditMaxBackups = -1 }, "security.audit_max_backups: must be >= 0", nil},
		{"builder without packages", func(c *Config) { c.EnvironmentBuilder.Enabled = true }, "environment_builder.allowed_packages: must not be empty", nil},
		{"build timeout", func(c *Config) { c.EnvironmentBuilder.BuildTimeout = 0 }, "environment_builder.build_timeout: must be > 0", nil},
		{"installer", func(c *Config) { c.EnvironmentBuilder.Installer = "conda" }, "environment_builder.installer: must be auto, uv or pip, got \"conda\"", nil},
		{"tool without command", func(c *Config) { c.MCPTools["gh"] = tool("") }, "mcp_tools.gh.command: must not be empty", nil},
		{"tool name not identifier", func(c *Config) { c.MCPTools["my-gh"] = tool("x") }, `mcp_tools.my-gh.prefix: "my-gh" is not a Python identifier`, nil},
		{"tool bad name", func(c *Config) { c.MCPTools["a b"] = tool("x") }, "mcp_tools.a b: name must be", nil},
		{"tool duplicate prefix", func(c *Config) {
			c.MCPTools["a"] = tool("x")
			b := tool("x")
			b.Prefix = "a"
			c.MCPTools["b"] = b
		}, `mcp_tools.b.prefix: "a" is also the prefix of mcp_tools.a`, nil},
		{"tool env key", func(c *Config) { tl := tool("x"); tl.Env = map[string]string{"A=B": "x"}; c.MCPTools["gh"] = tl }, "mcp_tools.gh.env.A=B:", nil},
		{"tool timeout", func(c *Config) { tl := tool("x"); tl.Timeout = 0; c.MCPTools["gh"] = tl }, "mcp_tools.gh.timeout: must be > 0", nil},
		{"tool max calls", func(c *Config) { tl := tool("x"); tl.MaxCalls = -1; c.MCPTools["gh"] = tl }, "mcp_tools.gh.max_calls: must be >= 0", nil},
		{"tool response size", func(c *Config) { tl := tool("x"); tl.MaxResponseSize = 0; c.MCPTools["gh"] = tl }, "mcp_tools.gh.max_response_size: must be > 0", nil},
		{"pool size", func(c *Config) { c.Pool.Size = -1 }, "pool.size: must be >= 0", nil},
		{"pool idle age", func(c *Config) { c.Pool.MaxIdleAge = 0 }, "pool.max_idle_age: must be > 0", nil},
		{"pool refill", func(c *Config) { c.Pool.RefillConcurrency = 0 }, "pool.refill_concurrency: must be > 0", nil},
		{"module injection", func(c *Config) { c.Pool.WarmModules = []string{"os; os.system('x')"} }, "pool.warm_modules[0]: ", nil},
		{"data module", func(c *Config) { c.Pool.WarmModulesData = []string{"numpy", ""} }, "pool.warm_modules_data[1]: ", nil},
		{"profile named default", func(c *Config) { c.Profiles["default"] = Profile{} }, "profiles.default: the default profile is built in", nil},
		{"profile memory", func(c *Config) { c.Profiles["big"] = Profile{Memory: 4 << 30} }, "profiles.big.memory: must be <= execution.max_memory (2g), got 4g", nil},
		{"profile cpus", func(c *Config) { c.Profiles["big"] = Profile{CPUs: 8} }, "profiles.big.cpus: must be <= execution.max_cpus (2), got 8", nil},
		{"profile pids", func(c *Config) { c.Profiles["big"] = Profile{Pids: 1000} }, "profiles.big.pids: must be <= execution.max_pids (128)", nil},
		{"profile timeout", func(c *Config) { c.Profiles["big"] = Profile{Timeout: Duration(time.Hour)} }, "profiles.big.timeout: must be <= execution.max_timeout (5m), got 1h", nil},
		{"profile tmp", func(c *Config) { c.Profiles["big"] = Profile{TmpSize: 1 << 30} }, "profiles.big.tmp_size: must be <= execution.tmp_size (64m)", nil},
		{"profile negative", func(c *Config) { c.Profiles["p"] = Profile{CPUs: -1} }, "profiles.p.cpus: must be > 0 (or unset to inherit)", nil},
		{"profile seccomp", func(c *Config) { c.Profiles["p"] = Profile{Seccomp: "unconfined"} }, "profiles.p.seccomp:", ErrSecurityInvariant},
	}
	for _, tt := range tests {
		c := Default()
		tt.mutate(c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
			continue
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("%s: got %v, want errors.Is %v", tt.name, err, tt.is)
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Path == "" {
			t.Errorf("%s: got %v, want a *FieldError with a path", tt.name, err)
		}
	}
}

func tool(cmd string) MCPToolServer {
	t := MCPToolServer{Command: cmd}
	t.setDefaults()
	return t
}

func TestValidateReportsAllProblems(t *testing.T) {
	c := Default()
	c.Pool.Size = -1
	c.Execution.MaxTimeout = 1
	c.Server.Transport = "carrier-pigeon"
	err := c.Validate()
	for _, path := range []string{"pool.size:", "execution.max_timeout:", "server.transport:"} {
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("got %v, want it to mention %s", err, path)
		}
	}
	if got := len(err.(interface{ Unwrap() []error }).Unwrap()); got != 3 {
		t.Errorf("got %v errors, want %v", got, 3)
	}
}

func TestNetworkTrueRejected(t *testing.T) {
	for _, in := range []string{"execution:\n  network: true\n", "execution:\n  network: host\n", "execution:\n  network: \"bridge\"\n"} {
		c, err := Parse([]byte(in), nil)
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		err = c.Validate()
		if !errors.Is(err, ErrSecurityInvariant) || !strings.Contains(err.Error(), "execution.network") {
			t.Errorf("Parse(%q).Validate(): got %v, want an execution.network security invariant error", in, err)
		}
	}
	for _, in := range []string{"execution:\n  network: false\n", "execution:\n  network: none\n", "execution:\n  network:\n"} {
		c, err := Parse([]byte(in), nil)
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Parse(%q).Validate(): got %v, want nil", in, err)
		}
	}
}
