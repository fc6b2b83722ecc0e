// Package metrics is forge's Prometheus metrics at /metrics: executions by
// outcome and mode with latency histograms (the engine's Observer), pool
// gauges and session gauges (live and hibernated, by tenant) read at scrape
// time, and counters of security violations, bridge calls, builds and
// egress connections taken from the audit events. Tenant labels are
// bounded: past MaxTenants distinct tenants, the rest count as "other".
package metrics

import (
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/pool"
	"github.com/mcp-forge/forge/runtime/session"
)

// MaxTenants bounds the tenant label's values.
const MaxTenants = 64

// Source is what the gauges read at scrape time (*engine.Engine has it).
type Source interface {
	PoolStats() []pool.Stats
	// SessionCounts is by principal; hibernated counts may be a few
	// seconds old (the engine caches its walk of the state dir).
	SessionCounts() map[string]session.Counts
}

// Metrics holds forge's collectors.
type Metrics struct {
	reg *prometheus.Registry

	executions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	kills      *prometheus.CounterVec
	violations *prometheus.CounterVec
	toolCalls  *prometheus.CounterVec
	builds     *prometheus.CounterVec
	sandboxes  prometheus.Counter
	limited    *prometheus.CounterVec
	egress     *prometheus.CounterVec

	mu      sync.Mutex
	tenants map[string]bool
	src     Source
}

// New registers forge's metrics (and the Go and process collectors).
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), tenants: map[string]bool{}}
	m.executions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forge_executions_total",
		Help: "Executions by tenant, mode (warm, cold, session; empty when refused before a sandbox) and outcome."}, []string{"tenant", "mode", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "forge_execution_duration_seconds",
		Help: "Wall-clock time of executions, from the request to the result.", Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"mode", "outcome"})
	m.kills = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forge_sandbox_kills_total",
		Help: "Executions killed by a limit: reason oom or timeout."}, []string{"tenant", "reason"})
	m.violations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forge_security_violations_total",
		Help: "Security violations audited: refused bridge calls and peers (source bridge), rejected HTTP requests (source http), others."}, []string{"source"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forge_bridge_calls_total",
		Help: "Code-mode tool calls through the bridge, by downstream server."}, []string{"server"})
	m.builds = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forge_builds_total",
		Help: "Environment builds finished, by result (ok or failed)."}, []string{"result"})
	m.sandboxes = prometheus.NewCounter(prometheus.CounterOpts{Name: "forge_sandboxes_created_total", Help: "Sandboxes created (pool refills, cold starts, sessions)."})
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forge_tenant_limited_total",
		Help: "Requests refused by a tenant's rate limit or quota."}, []string{"tenant", "limit"})
	m.egress = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "forge_egress_connections_total",
		Help: "Connections out of sandboxes through the egress proxy that were audited, by result (allowed, denied); the proxy caps audits per sandbox."}, []string{"result"})
	m.reg.MustRegister(m.executions, m.latency, m.kills, m.violations, m.toolCalls, m.builds, m.sandboxes, m.limited, m.egress,
		&gauges{m: m}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetSource sets what the gauges read (the engine, once it is up).
func (m *Metrics) SetSource(src Source) {
	m.mu.Lock()
	m.src = src
	m.mu.Unlock()
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// tenant is the label of principal p, bounded.
func (m *Metrics) tenant(p string) string {
	t, ok := strings.CutPrefix(p, "tenant:")
	if !ok {
		if i := strings.IndexByte(p, ':'); i >= 0 {
			t = p[:i] // "listener"
		} else {
			t = p // "local"
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tenants[t] {
		return t
	}
	if len(m.tenants) >= MaxTenants {
		return "other"
	}
	m.tenants[t] = true
	return t
}

// ObserveExecution implements engine.Observer.
func (m *Metrics) ObserveExecution(st engine.ExecutionStats) {
	t := m.tenant(st.Principal.Tenant)
	m.executions.WithLabelValues(t, st.Mode, st.Outcome).Inc()
	m.latency.WithLabelValues(st.Mode, st.Outcome).Observe(st.Duration.Seconds())
	switch st.Outcome {
	case engine.OutcomeOOM, engine.OutcomeTimeout:
		m.kills.WithLabelValues(t, st.Outcome).Inc()
	}
}

// Limited counts a request a tenant limit refused.
func (m *Metrics) Limited(tenant, what string) {
	limit := "rate"
	switch {
	case strings.Contains(what, "concurrent"):
		limit = "concurrency"
	case strings.Contains(what, "sessions"):
		limit = "sessions"
	case strings.Contains(what, "builds"):
		limit = "builds"
	}
	m.limited.WithLabelValues(m.tenant("tenant:"+tenant), limit).Inc()
}

// ObserveAudit counts the audit events that metrics show (audit.Options.Observe).
func (m *Metrics) ObserveAudit(ev audit.Event) {
	switch ev.Event {
	case audit.EventSecurityViolation:
		src := "other"
		switch {
		case ev.Tool != "" || ev.Server != "" || strings.Contains(strings.ToLower(ev.Reason), "bridge"):
			src = "bridge"
		case strings.HasPrefix(ev.Reason, "HTTP"):
			src = "http"
		case ev.SandboxID != "":
			src = "sandbox"
		}
		m.violations.WithLabelValues(src).Inc()
	case audit.EventToolCall:
		m.toolCalls.WithLabelValues(boundedServer(ev.Server)).Inc()
	case audit.EventBuildComplete:
		m.builds.WithLabelValues("ok").Inc()
	case audit.EventBuildFailed:
		m.builds.WithLabelValues("failed").Inc()
	case audit.EventEgressAllow:
		m.egress.WithLabelValues("allowed").Inc()
	case audit.EventEgressDeny:
		m.egress.WithLabelValues("denied").Inc()
	case audit.EventContainerCreate:
		m.sandboxes.Inc()
	}
}

// boundedServer keeps server names (from the configuration) short.
func boundedServer(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// gauges reads the pools and sessions at scrape time.
type gauges struct{ m *Metrics }

var (
	poolDesc = map[string]*prometheus.Desc{
		"ready":       prometheus.NewDesc("forge_pool_ready", "Ready (paused, warm) sandboxes in the pool.", []string{"pool"}, nil),
		"size":        prometheus.NewDesc("forge_pool_size", "Target size of the pool.", []string{"pool"}, nil),
		"starting":    prometheus.NewDesc("forge_pool_starting", "Sandboxes being started for the pool.", []string{"pool"}, nil),
		"hits":        prometheus.NewDesc("forge_pool_hits_total", "Acquisitions served by a ready sandbox.", []string{"pool"}, nil),
		"misses":      prometheus.NewDesc("forge_pool_misses_total", "Acquisitions that found the pool empty.", []string{"pool"}, nil),
		"cold":        prometheus.NewDesc("forge_pool_cold_starts_total", "Sandboxes started on the request path.", []string{"pool"}, nil),
		"starterrs":   prometheus.NewDesc("forge_pool_start_errors_total", "Sandbox starts that failed.", []string{"pool"}, nil),
		"idle_memory": prometheus.NewDesc("forge_pool_idle_memory_bytes", "Mean memory charge of a ready sandbox.", []string{"pool"}, nil),
	}
	sessionsLive       = prometheus.NewDesc("forge_sessions_live", "Sessions with a running (or paused) sandbox in this process, by tenant.", []string{"tenant"}, nil)
	sessionsHibernated = prometheus.NewDesc("forge_sessions_hibernated", "Sessions saved to the state dir with no sandbox, by tenant (counted from the state dir at most every 15 s, and after this process hibernates or restores one).", []string{"tenant"}, nil)
)

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range poolDesc {
		ch <- d
	}
	ch <- sessionsLive
	ch <- sessionsHibernated
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	g.m.mu.Lock()
	src := g.m.src
	g.m.mu.Unlock()
	if src == nil {
		return
	}
	for _, st := range src.PoolStats() {
		gauge := func(k string, v float64) {
			ch <- prometheus.MustNewConstMetric(poolDesc[k], prometheus.GaugeValue, v, st.Name)
		}
		counter := func(k string, v uint64) {
			ch <- prometheus.MustNewConstMetric(poolDesc[k], prometheus.CounterValue, float64(v), st.Name)
		}
		gauge("ready", float64(st.Ready))
		gauge("size", float64(st.Size))
		gauge("starting", float64(st.Starting))
		gauge("idle_memory", float64(st.IdleMemoryBytes))
		counter("hits", st.Hits)
		counter("misses", st.Misses)
		counter("cold", st.ColdStarts)
		counter("starterrs", st.StartErrs)
	}
	// Summed by label: tenants past MaxTenants share "other".
	byTenant := map[string]session.Counts{}
	for owner, c := range src.SessionCounts() {
		t := g.m.tenant(owner)
		sum := byTenant[t]
		sum.Live += c.Live
		sum.Hibernated += c.Hibernated
		byTenant[t] = sum
	}
	for t, c := range byTenant {
		ch <- prometheus.MustNewConstMetric(sessionsLive, prometheus.GaugeValue, float64(c.Live), t)
		ch <- prometheus.MustNewConstMetric(sessionsHibernated, prometheus.GaugeValue, float64(c.Hibernated), t)
	}
}
