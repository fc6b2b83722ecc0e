package profiles

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/mcp-forge/forge/internal/lazyre"
)

// Scopes a bearer token may carry. admin implies every other one.
const (
	ScopeExecute      = "execute"
	ScopeSessions     = "sessions"
	ScopeEnvironments = "environments"
	ScopeTools        = "tools"
	ScopeAdmin        = "admin"
)

// AllScopes lists the scopes in the order documentation shows them.
var AllScopes = []string{ScopeExecute, ScopeSessions, ScopeEnvironments, ScopeTools, ScopeAdmin}

var (
	tenantRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	sha256RE = lazyre.New(`^[0-9a-f]{64}$`)
)

// AuthConfig is how HTTP clients prove who they are.
type AuthConfig struct {
	Tokens []TokenEntry `yaml:"tokens" doc:"Bearer tokens besides those made with forge token create (kept hashed in <state_dir>/tokens.json). Each is given by its SHA-256, so the file holds no secret; take one from the environment with ${VAR}. With no token at all, the HTTP transport is unauthenticated and forge listens on loopback only."`
}

// TokenEntry is one bearer token given by its hash.
type TokenEntry struct {
	Tenant string   `yaml:"tenant" doc:"Required. Tenant the token acts for: 1 to 64 letters, digits, '_', '.', '-', starting with a letter or digit. Sessions, environments and audit entries belong to it."`
	Scopes []string `yaml:"scopes" doc:"Required. What the token may do: execute, sessions, environments, tools, admin (admin implies the others)."`
	SHA256 string   `yaml:"sha256" doc:"Required. Lower-case hex SHA-256 of the token (printf %s TOKEN | sha256sum)."`
}

// TracingConfig configures OpenTelemetry traces.
type TracingConfig struct {
	OTLPEndpoint string `yaml:"otlp_endpoint" doc:"OTLP/HTTP collector URL (http(s)://host:4318; /v1/traces is appended when no path is given). Each HTTP request and each execution becomes a span. Empty sends no traces."`
}

// TenantsConfig holds the per-tenant rate limits and quotas.
type TenantsConfig struct {
	Default   TenantLimits            `yaml:"default" doc:"Limits of every tenant, unless overridden."`
	Overrides map[string]TenantLimits `yaml:"overrides" doc:"Limits of single tenants, keyed by tenant; a field left at 0 inherits server.tenants.default."`
}

// TenantLimits are one tenant's token buckets and quotas. In Default a 0
// means no per-tenant limit (forge's global limits still apply).
type TenantLimits struct {
	ExecutionsPerMinute float64  `yaml:"executions_per_minute" doc:"Token-bucket refill rate of executions, per minute: every operation that runs in, starts or makes a sandbox counts (execute_python, write_file, read_file, list_files, document_state, fork_session, their REST endpoints, hosted-tool calls). Over it, REST answers 429 with Retry-After and MCP a tool error naming the retry time. 0 = unlimited."`
	ExecutionBurst      int      `yaml:"execution_burst" doc:"Token-bucket size of executions: how many may start at once after a quiet spell. 0 = executions_per_minute / 6, at least 1."`
	BuildsPerHour       float64  `yaml:"builds_per_hour" doc:"Token-bucket refill rate of environment builds, per hour. 0 = unlimited."`
	BuildBurst          int      `yaml:"build_burst" doc:"Token-bucket size of builds. 0 = 1."`
	MaxSessions         int      `yaml:"max_sessions" doc:"Most sessions (running, hibernated or lost) of the tenant; creating one more fails, whichever call makes it (execute_python, write_file to a new id, fork_session, POST /sandboxes). 0 = only sessions.max_concurrent applies."`
	MaxConcurrent       int      `yaml:"max_concurrent" doc:"Most executions of the tenant running at once (every operation that runs in, starts or makes a sandbox); more fail at once with a busy error. 0 = only execution.max_concurrent applies."`
	Egress              []string `yaml:"egress,omitempty" doc:"Egress allowlist of the tenant (rules as in execution.egress), applied on top of the profile's: the tenant gets what both allow, and its requests may narrow that further, never widen it. Unset: the profile's alone; [none]: no egress."`
}

// ValidTenant checks a tenant name (of a token, a config entry or a CLI flag).
func ValidTenant(name string) error {
	if !tenantRE.MatchString(name) {
		return fmt.Errorf("tenant %q: want 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", name)
	}
	return nil
}

// ValidScopes checks a list of scopes: not empty, each known.
func ValidScopes(scopes []string) error {
	if len(scopes) == 0 {
		return fmt.Errorf("no scopes; want some of %s", strings.Join(AllScopes, ", "))
	}
	for _, s := range scopes {
		if !slices.Contains(AllScopes, s) {
			return fmt.Errorf("unknown scope %q; want some of %s", s, strings.Join(AllScopes, ", "))
		}
	}
	return nil
}

// Tenant returns the limits of tenant: its override over the default.
func (t TenantsConfig) Tenant(tenant string) TenantLimits {
	l := t.Default
	o, ok := t.Overrides[tenant]
	if !ok {
		return l
	}
	overlay(&l, o)
	return l
}

func (c *Config) validateService(p *problems) {
	if e := c.Server.Tracing.OTLPEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("server.tracing.otlp_endpoint", "want http(s)://host:port[/path], got %q", e)
		}
	}
	for i, t := range c.Server.Auth.Tokens {
		at := fmt.Sprintf("server.auth.tokens[%d]", i)
		if err := ValidTenant(t.Tenant); err != nil {
			p.add(at+".tenant", "%v", err)
		}
		if err := ValidScopes(t.Scopes); err != nil {
			p.add(at+".scopes", "%v", err)
		}
		if !sha256RE.MatchString(t.SHA256) {
			p.add(at+".sha256", "want 64 lower-case hex digits (the SHA-256 of the token, never the token itself)")
		}
	}
	validateTenantLimits(p, "server.tenants.default", c.Server.Tenants.Default)
	for name, l := range c.Server.Tenants.Overrides {
		at := "server.tenants.overrides." + name
		if err := ValidTenant(name); err != nil {
			p.add(at, "%v", err)
		}
		validateTenantLimits(p, at, l)
	}
}

func validateTenantLimits(p *problems, at string, l TenantLimits) {
	nonNegative(p, at+".executions_per_minute", l.ExecutionsPerMinute)
	nonNegative(p, at+".execution_burst", l.ExecutionBurst)
	nonNegative(p, at+".builds_per_hour", l.BuildsPerHour)
	nonNegative(p, at+".build_burst", l.BuildBurst)
	nonNegative(p, at+".max_sessions", l.MaxSessions)
	nonNegative(p, at+".max_concurrent", l.MaxConcurrent)
	if l.Egress != nil {
		if _, err := ParseEgressPolicy(l.Egress); err != nil {
			p.add(at+".egress", "%v", err)
		}
	}
}

// TenantEgress is the egress policy of tenant on top of the default
// profile's: what both allow. ok is false when the tenant has no policy of
// its own (the profile's applies alone).
func (c *Config) TenantEgress(tenant string) (pol EgressPolicy, setting string, ok bool, err error) {
	l := c.Server.Tenants.Tenant(tenant)
	if l.Egress == nil {
		return EgressPolicy{}, "", false, nil
	}
	setting = "server.tenants.default.egress"
	if o, in := c.Server.Tenants.Overrides[tenant]; in && o.Egress != nil {
		setting = "server.tenants.overrides." + tenant + ".egress"
	}
	t, err := ParseEgressPolicy(l.Egress)
	if err != nil {
		return EgressPolicy{}, setting, true, err
	}
	base, err := c.EgressPolicy("")
	if err != nil {
		return EgressPolicy{}, setting, true, err
	}
	return t.Narrow(base), setting, true, nil
}

// MaxMCPBody is the largest body a POST /mcp may send: twice the largest
// payload one request can carry (code of execution.max_code_size, a file of
// volumes.max_file_size as base64, a tool's source of
// hosted_tools.max_source_size when save_tool is offered), for the JSON
// escapes around it, plus 64 KiB for the rest of the message.
func (c *Config) MaxMCPBody() int64 {
	payload := max(int64(c.Execution.MaxCodeSize), (int64(c.Volumes.MaxFileSize)+2)/3*4)
	if c.HostedTools.SaveTool != "refuse" {
		payload = max(payload, int64(c.HostedTools.MaxSourceSize))
	}
	return 2*payload + 64<<10
}
