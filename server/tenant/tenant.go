// Package tenant enforces the per-tenant rate limits and quotas of
// server.tenants: token buckets for executions and builds, and a cap on
// each tenant's concurrent executions. The session quota is counted by the
// caller (it needs the engine), against MaxSessions.
package tenant

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcp-forge/forge/profiles"
)

// ErrLimited is wrapped by every *LimitError.
var ErrLimited = errors.New("tenant limit reached")

// LimitError says which limit refused a request and when to retry (0: not
// until something is released, e.g. a session destroyed).
type LimitError struct {
	Tenant     string
	What       string // "executions", "builds", "concurrent executions", "sessions"
	Setting    string // the config field, e.g. server.tenants.default.executions_per_minute
	RetryAfter time.Duration
}

func (e *LimitError) Error() string {
	msg := fmt.Sprintf("tenant %q is over its limit of %s (%s)", e.Tenant, e.What, e.Setting)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf("; retry in %.1fs", e.RetryAfter.Seconds())
	}
	return msg
}

func (e *LimitError) Unwrap() error { return ErrLimited }

// RetrySeconds is RetryAfter rounded up to whole seconds (for Retry-After).
func (e *LimitError) RetrySeconds() int {
	return int(math.Ceil(e.RetryAfter.Seconds()))
}

// Limits holds every tenant's buckets. Tenants come from tokens and
// listeners, a set the configuration bounds.
type Limits struct {
	cfg profiles.TenantsConfig

	mu      sync.Mutex
	tenants map[string]*state
}

type state struct {
	lim   profiles.TenantLimits
	exec  *rate.Limiter // nil = unlimited
	build *rate.Limiter
	// running counts executions in flight (guarded by Limits.mu).
	running int
}

// New returns the limits of cfg.
func New(cfg profiles.TenantsConfig) *Limits {
	return &Limits{cfg: cfg, tenants: map[string]*state{}}
}

func (l *Limits) stateLocked(tenant string) *state {
	st := l.tenants[tenant]
	if st != nil {
		return st
	}
	lim := l.cfg.Tenant(tenant)
	st = &state{lim: lim}
	if lim.ExecutionsPerMinute > 0 {
		b := lim.ExecutionBurst
		if b == 0 {
			b = max(1, int(lim.ExecutionsPerMinute/6))
		}
		st.exec = rate.NewLimiter(rate.Limit(lim.ExecutionsPerMinute/60), b)
	}
	if lim.BuildsPerHour > 0 {
		st.build = rate.NewLimiter(rate.Limit(lim.BuildsPerHour/3600), max(1, lim.BuildBurst))
	}
	l.tenants[tenant] = st
	return st
}

func (l *Limits) setting(tenant, field string) string {
	if _, ok := l.cfg.Overrides[tenant]; ok {
		return "server.tenants.overrides." + tenant + "." + field
	}
	return "server.tenants.default." + field
}

// Execution admits one execution of tenant, or says which limit refused
// it. release must be called when the execution is over.
func (l *Limits) Execution(tenant string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stateLocked(tenant)
	if n := st.lim.MaxConcurrent; n > 0 && st.running >= n {
		return nil, &LimitError{Tenant: tenant, What: fmt.Sprintf("%d concurrent executions", n), Setting: l.setting(tenant, "max_concurrent"), RetryAfter: time.Second}
	}
	if err := take(st.exec, tenant, "executions", l.setting(tenant, "executions_per_minute")); err != nil {
		return nil, err
	}
	st.running++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			st.running--
			l.mu.Unlock()
		})
	}, nil
}

// Build admits one environment build of tenant.
func (l *Limits) Build(tenant string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return take(l.stateLocked(tenant).build, tenant, "builds", l.setting(tenant, "builds_per_hour"))
}

// MaxSessions is the tenant's session quota; 0 = none.
func (l *Limits) MaxSessions(tenant string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stateLocked(tenant).lim.MaxSessions
}

// SessionsError is the refusal of one session over the quota.
func (l *Limits) SessionsError(tenant string, n int) error {
	return &LimitError{Tenant: tenant, What: fmt.Sprintf("%d live sessions", n), Setting: l.setting(tenant, "max_sessions")}
}

// take takes a token from lim or says how long until there is one.
func take(lim *rate.Limiter, tenant, what, setting string) error {
	if lim == nil {
		return nil
	}
	r := lim.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return &LimitError{Tenant: tenant, What: what, Setting: setting, RetryAfter: d}
	}
	return nil
}
