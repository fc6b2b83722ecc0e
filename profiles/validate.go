package profiles

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mcp-forge/forge/internal/lazyre"
)

var (
	identRE      = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)
	moduleRE     = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	entryNameRE  = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	maxMappedUID = uint64(1)<<32 - 2 // uid 4294967295 is (uid_t)-1, never valid
)

// problems collects validation errors, each naming its field path.
type problems []error

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, &FieldError{Path: path, Err: fmt.Errorf(format, args...)})
}

// AuditLogPath returns security.audit_log, or <state_dir>/audit.log when it is
// empty ("" when state_dir is not known yet either).
func (c *Config) AuditLogPath() string {
	if c.Security.AuditLog != "" || c.StateDir == "" {
		return c.Security.AuditLog
	}
	return filepath.Join(c.StateDir, "audit.log")
}

// Validate checks every field and every rule between fields. Each error names
// the field path; all problems are returned at once, joined with errors.Join.
// Errors that would weaken a sandbox invariant wrap ErrSecurityInvariant.
func (c *Config) Validate() error {
	var p problems
	if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		p.add("state_dir", "must be an absolute path, got %q", c.StateDir)
	}
	c.validateServer(&p)
	c.validateService(&p)
	c.validateExecution(&p)
	c.validateLimits(&p)
	c.validateImages(&p)
	c.validateSessions(&p)
	c.validateSecurity(&p)
	c.validateBuilder(&p)
	c.validateTools(&p)
	c.validatePool(&p)
	c.validateHosted(&p)
	c.validateSandbox(&p)
	c.validateE2B(&p)
	c.validateAgentSandbox(&p)
	c.validateCluster(&p)
	c.validateProfiles(&p)
	return errors.Join(p...)
}

func (c *Config) validateServer(p *problems) {
	s := &c.Server
	if strings.TrimSpace(s.Name) == "" {
		p.add("server.name", "must not be empty")
	}
	oneOf(p, "server.transport", s.Transport, "stdio", "http")
	if host, port, err := net.SplitHostPort(s.HTTPAddr); err != nil {
		p.add("server.http_addr", "want host:port, got %q", s.HTTPAddr)
	} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && host == "") {
		p.add("server.http_addr", "invalid port in %q", s.HTTPAddr)
	}
	for i, o := range s.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			p.add(fmt.Sprintf("server.allowed_origins[%d]", i), "want scheme://host[:port] (http or https; wildcards are not allowed), got %q", o)
		}
	}
	for i, h := range s.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ \t") {
			p.add(fmt.Sprintf("server.allowed_hosts[%d]", i), "want a host name or address, got %q", h)
		}
	}
	oneOf(p, "server.log_level", s.LogLevel, "debug", "info", "warn", "error")
	positive(p, "server.shutdown_grace", s.ShutdownGrace)
	nonNegative(p, "server.drain_delay", s.DrainDelay)
	positive(p, "server.max_connections", s.MaxConnections)
	positive(p, "server.max_body_in_flight", s.MaxBodyInFlight)
}

func (c *Config) validateExecution(p *problems) {
	e := &c.Execution
	positive(p, "execution.default_timeout", e.DefaultTimeout)
	atLeast(p, "execution.max_timeout", e.MaxTimeout, "execution.default_timeout", e.DefaultTimeout)
	positive(p, "execution.default_memory", e.DefaultMemory)
	atLeast(p, "execution.max_memory", e.MaxMemory, "execution.default_memory", e.DefaultMemory)
	positive(p, "execution.default_cpus", e.DefaultCPUs)
	atLeast(p, "execution.max_cpus", e.MaxCPUs, "execution.default_cpus", e.DefaultCPUs)
	positive(p, "execution.max_pids", e.MaxPids)
	positive(p, "execution.max_code_size", e.MaxCodeSize)
	positive(p, "execution.output_limit", e.OutputLimit)
	positive(p, "execution.tmp_size", e.TmpSize)
	if e.Network != NetworkNone {
		p.add("execution.network", "%w: sandboxes never have a network (loopback only), so the only valid value is false; got %q", ErrSecurityInvariant, string(e.Network))
	}
	egressRules(p, "execution.egress", e.Egress)
}

// egressRules checks an egress allowlist rule by rule, so each error names
// its index; "none" is valid only alone.
func egressRules(p *problems, path string, rules []string) {
	if len(rules) == 1 && strings.TrimSpace(rules[0]) == EgressNone {
		return
	}
	for i, r := range rules {
		if _, err := ParseEgressRule(r); err != nil {
			p.add(fmt.Sprintf("%s[%d]", path, i), "%v", err)
		}
	}
}

func (c *Config) validateLimits(p *problems) {
	e, l := &c.Execution, &c.Limits
	positive(p, "execution.max_concurrent", e.MaxConcurrent)
	nonNegative(p, "execution.queue_timeout", e.QueueTimeout)
	nonNegative(p, "limits.max_sandboxes", l.MaxSandboxes)
	if l.KernelReserve < 0 || l.KernelReserve > 0.9 || math.IsNaN(l.KernelReserve) {
		p.add("limits.kernel_reserve", "must be from 0 to 0.9, got %v", l.KernelReserve)
	}
	if l.Memory != 0 {
		atLeast(p, "limits.memory", l.Memory, "execution.max_memory", e.MaxMemory)
	}
	if l.Pids != 0 {
		atLeast(p, "limits.pids", l.Pids, "execution.max_pids", e.MaxPids)
	}
	if cg := l.CgroupParent; cg != "" && (path.Clean(cg) != cg || path.IsAbs(cg) || cg == "." || strings.HasPrefix(cg, "..")) {
		p.add("limits.cgroup_parent", "must be a clean relative cgroup path such as forge or forge-b, got %q", cg)
	}
}

func (c *Config) validateImages(p *problems) {
	im := &c.Images
	if len(im.AllowedPatterns) == 0 {
		p.add("images.allowed", "must list at least one pattern")
	}
	patterns(p, "images.allowed", im.AllowedPatterns)
	if im.Default == "" {
		p.add("images.default", "must not be empty")
	} else if !im.Allowed(im.Default) {
		p.add("images.default", "%q does not match images.allowed %q", im.Default, im.AllowedPatterns)
	}
	if im.Data != "" && !im.Allowed(im.Data) {
		p.add("images.data", "%q does not match images.allowed %q", im.Data, im.AllowedPatterns)
	}
}

func (c *Config) validateSessions(p *problems) {
	s := &c.Sessions
	positive(p, "sessions.max_concurrent", s.MaxConcurrent)
	positive(p, "sessions.idle_timeout", s.IdleTimeout)
	atLeast(p, "sessions.max_lifetime", s.MaxLifetime, "sessions.idle_timeout", s.IdleTimeout)
	v := &c.Volumes
	positive(p, "volumes.session_quota", v.SessionQuota)
	positive(p, "volumes.max_file_size", v.MaxFileSize)
	if v.MaxFileSize > v.SessionQuota {
		p.add("volumes.max_file_size", "must be <= volumes.session_quota (%v), got %v", v.SessionQuota, v.MaxFileSize)
	}
}

func (c *Config) validateSecurity(p *problems) {
	s := &c.Security
	if s.UIDRangeStart == 0 {
		p.add("security.uid_range_start", "%w: must not be 0: container root would be host root", ErrSecurityInvariant)
	}
	if s.SandboxUID == 0 {
		p.add("security.sandbox_uid", "%w: must not be 0: code runs as a non-root uid", ErrSecurityInvariant)
	}
	if s.SandboxUID >= s.UIDMapSize {
		p.add("security.uid_map_size", "must be > security.sandbox_uid (%d) so that the sandbox uid is mapped, got %d", s.SandboxUID, s.UIDMapSize)
	}
	if s.UIDRangeSize < s.UIDMapSize {
		p.add("security.uid_range_size", "must hold at least one block of security.uid_map_size (%d) ids, got %d", s.UIDMapSize, s.UIDRangeSize)
	}
	if uint64(s.UIDRangeStart)+uint64(s.UIDRangeSize)-1 > maxMappedUID {
		p.add("security.uid_range_size", "security.uid_range_start (%d) + uid_range_size (%d) runs past the last valid uid %d", s.UIDRangeStart, s.UIDRangeSize, maxMappedUID)
	}
	seccomp(p, "security.seccomp_profile", s.SeccompProfile)
	if s.AuditLog != "" && !filepath.IsAbs(s.AuditLog) {
		p.add("security.audit_log", "must be an absolute path or empty, got %q", s.AuditLog)
	}
	positive(p, "security.audit_max_size", s.AuditMaxSize)
	nonNegative(p, "security.audit_max_backups", s.AuditMaxBackups)
}

func (c *Config) validateBuilder(p *problems) {
	b := &c.EnvironmentBuilder
	const base = "environment_builder."
	positive(p, base+"build_timeout", b.BuildTimeout)
	positive(p, base+"max_image_size", b.MaxImageSize)
	positive(p, base+"build_memory", b.BuildMemory)
	positive(p, base+"max_packages", b.MaxPackages)
	positive(p, base+"max_concurrent", b.MaxConcurrent)
	nonNegative(p, base+"builds_per_period", b.BuildsPerPeriod)
	nonNegative(p, base+"gc_age", b.GCAge)
	if b.BuildsPerPeriod > 0 {
		positive(p, base+"rate_period", b.RatePeriod)
	}
	for field, list := range map[string][]string{"allowed_packages": b.AllowedPackages, "blocked_packages": b.BlockedPackages,
		"approval_packages": b.ApprovalPackages, "approved_packages": b.ApprovedPackages} {
		patterns(p, base+field, list)
	}
	for field, list := range map[string][]string{"allowed_packages_files": b.AllowedPackagesFiles, "blocked_packages_files": b.BlockedPackagesFiles} {
		for i, f := range list {
			if !filepath.IsAbs(f) {
				p.add(fmt.Sprintf("%s%s[%d]", base, field, i), "must be an absolute path, got %q", f)
			}
		}
	}
	if b.Approval != "refuse" && b.Approval != "elicit" {
		p.add(base+"approval", "%q: want refuse or elicit", b.Approval)
	}
	if b.Enabled && len(b.AllowedPackages) == 0 && len(b.AllowedPackagesFiles) == 0 {
		p.add(base+"allowed_packages", "must not be empty when environment_builder.enabled is true (use [\"*\"] to allow any package)")
	}
	if b.Wheelhouse != "" && !filepath.IsAbs(b.Wheelhouse) {
		p.add(base+"wheelhouse", "must be an absolute path or empty, got %q", b.Wheelhouse)
	}
	if b.CABundle != "" && !filepath.IsAbs(b.CABundle) {
		p.add(base+"ca_bundle", "must be an absolute path or empty, got %q", b.CABundle)
	}
	if b.Offline && b.Wheelhouse == "" {
		p.add(base+"offline", "needs environment_builder.wheelhouse: offline builds install only from it")
	}
	if !b.Offline {
		if u, err := url.Parse(b.IndexURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			p.add(base+"index_url", "must be an http(s) URL of a PEP 503 simple index, got %q", b.IndexURL)
		}
	}
	if !slices.Contains([]string{"auto", "uv", "pip"}, b.Installer) {
		p.add(base+"installer", "must be auto, uv or pip, got %q", b.Installer)
	}
	switch sc := b.Scanner; {
	case slices.Contains([]string{"auto", "none", "pip-audit", "trivy", "grype"}, sc):
	case filepath.IsAbs(sc) && slices.Contains([]string{"pip-audit", "trivy", "grype"}, filepath.Base(sc)):
	default:
		p.add(base+"scanner", "must be auto, none, pip-audit, trivy, grype or the absolute path of one of them, got %q", sc)
	}
	if b.BaseImage != "" && !c.Images.Allowed(b.BaseImage) {
		p.add(base+"base_image", "%q does not match images.allowed", b.BaseImage)
	}
	for _, name := range slices.Sorted(maps.Keys(b.Presets)) {
		if !envNameRE.MatchString(name) {
			p.add(base+"presets."+name, "a preset name is letters, digits and hyphens, at most 63 characters")
		}
		t := b.Presets[name]
		if len(t.Packages) == 0 {
			p.add(base+"presets."+name+".packages", "must not be empty")
		}
		if b.MaxPackages > 0 && len(t.Packages) > b.MaxPackages {
			p.add(base+"presets."+name+".packages", "%d packages, over environment_builder.max_packages (%d)", len(t.Packages), b.MaxPackages)
		}
	}
}

// envNameRE is what an environment or preset name may be: it becomes an
// image tag (forge/custom:NAME).
var envNameRE = lazyre.New(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// ValidEnvironmentName reports whether name can name an environment or a
// preset: letters, digits and hyphens, at most 63 characters, not
// starting or ending with a hyphen.
func ValidEnvironmentName(name string) bool { return envNameRE.MatchString(name) }

func (c *Config) validateTools(p *problems) {
	prefixes := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.MCPTools)) {
		t, base := c.MCPTools[name], "mcp_tools."+name
		if !entryNameRE.MatchString(name) {
			p.add(base, "name must be letters, digits, '_', '-' or '.', starting with a letter or digit")
		}
		if strings.TrimSpace(t.Command) == "" {
			p.add(base+".command", "must not be empty")
		}
		prefix := t.Prefix
		if prefix == "" {
			prefix = name
		}
		if !identRE.MatchString(prefix) {
			p.add(base+".prefix", "%q is not a Python identifier (set prefix when the server's name is not one)", prefix)
		} else if other, dup := prefixes[prefix]; dup {
			p.add(base+".prefix", "%q is also the prefix of mcp_tools.%s", prefix, other)
		}
		prefixes[prefix] = name
		for _, k := range slices.Sorted(maps.Keys(t.Env)) {
			if !isVarName(k) {
				p.add(base+".env."+k, "not a valid environment variable name")
			}
		}
		positive(p, base+".timeout", t.Timeout)
		nonNegative(p, base+".max_calls", t.MaxCalls)
		positive(p, base+".max_response_size", t.MaxResponseSize)
		if !t.Sandbox && (t.Image != "" || t.Mount != "") {
			p.add(base, "image and mount apply only with sandbox: true")
		}
		if t.Mount != "" {
			switch b := filepath.Base(t.Mount); {
			case !filepath.IsAbs(t.Mount):
				p.add(base+".mount", "must be an absolute path, got %q", t.Mount)
			case b == "socket" || b == "sdk" || b == "tools" || strings.HasPrefix(b, "."):
				p.add(base+".mount", "base name %q is taken (socket, sdk, tools) or hidden", b)
			}
		}
	}
}

func (c *Config) validatePool(p *problems) {
	pl := &c.Pool
	nonNegative(p, "pool.size", pl.Size)
	nonNegative(p, "pool.max_size", pl.MaxSize)
	nonNegative(p, "pool.memory_budget", pl.MemoryBudget)
	positive(p, "pool.shrink_after", pl.ShrinkAfter)
	positive(p, "pool.max_idle_age", pl.MaxIdleAge)
	positive(p, "pool.refill_concurrency", pl.RefillConcurrency)
	// The names end up in an import statement inside the sandbox.
	for field, mods := range map[string][]string{"pool.warm_modules": pl.WarmModules, "pool.warm_modules_data": pl.WarmModulesData} {
		for i, m := range mods {
			if !moduleRE.MatchString(m) {
				p.add(fmt.Sprintf("%s[%d]", field, i), "%q is not a Python module name", m)
			}
		}
	}
}

func (c *Config) validateProfiles(p *problems) {
	e := &c.Execution
	for _, name := range slices.Sorted(maps.Keys(c.Profiles)) {
		pr, base := c.Profiles[name], "profiles."+name
		if name == DefaultProfile {
			p.add(base, "the default profile is built in; set execution.* instead")
			continue
		}
		if !entryNameRE.MatchString(name) {
			p.add(base, "name must be letters, digits, '_', '-' or '.', starting with a letter or digit")
		}
		within(p, base+".memory", pr.Memory, "execution.max_memory", e.MaxMemory)
		within(p, base+".cpus", pr.CPUs, "execution.max_cpus", e.MaxCPUs)
		within(p, base+".pids", pr.Pids, "execution.max_pids", e.MaxPids)
		within(p, base+".timeout", pr.Timeout, "execution.max_timeout", e.MaxTimeout)
		within(p, base+".tmp_size", pr.TmpSize, "execution.tmp_size", e.TmpSize)
		if pr.Seccomp != "" {
			seccomp(p, base+".seccomp", pr.Seccomp)
		}
		egressRules(p, base+".egress", pr.Egress)
	}
}

type number interface {
	~int | ~int64 | ~float64
}

func positive[T number](p *problems, path string, v T) {
	if v <= 0 {
		p.add(path, "must be > 0, got %v", v)
	}
}

func nonNegative[T number](p *problems, path string, v T) {
	if v < 0 {
		p.add(path, "must be >= 0, got %v", v)
	}
}

// atLeast checks that a maximum is not below its default.
func atLeast[T number](p *problems, path string, v T, loPath string, lo T) {
	if v < lo {
		p.add(path, "must be >= %s (%v), got %v", loPath, lo, v)
	}
}

// within checks an optional profile field: unset (0), or in (0, max].
func within[T number](p *problems, path string, v T, hiPath string, hi T) {
	switch {
	case v < 0:
		p.add(path, "must be > 0 (or unset to inherit), got %v", v)
	case v > hi:
		p.add(path, "must be <= %s (%v), got %v", hiPath, hi, v)
	}
}

func oneOf(p *problems, path, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		p.add(path, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
}

func patterns(p *problems, field string, list []string) {
	for i, pat := range list {
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			p.add(fmt.Sprintf("%s[%d]", field, i), "%q is not a valid pattern", pat)
		}
	}
}

func seccomp(p *problems, path, v string) {
	switch {
	case strings.EqualFold(v, "unconfined"):
		p.add(path, "%w: seccomp cannot be turned off", ErrSecurityInvariant)
	case v != "default" && !filepath.IsAbs(v):
		p.add(path, "want \"default\" or an absolute path to a JSON profile, got %q", v)
	}
}
