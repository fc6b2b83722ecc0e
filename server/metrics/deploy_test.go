package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

var (
	metricRE = regexp.MustCompile(`\bforge_[a-z_]+`)
	descRE   = regexp.MustCompile(`fqName: "([^"]+)"`)
)

// names are the metric names forge exports (histograms with their series).
func names(t *testing.T) map[string]bool {
	m := New()
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		for _, c := range []prometheus.Collector{m.executions, m.latency, m.kills, m.violations, m.toolCalls, m.builds, m.sandboxes, m.limited, &gauges{m: m}} {
			c.Describe(ch)
		}
		close(ch)
	}()
	out := map[string]bool{}
	for d := range ch {
		sm := descRE.FindStringSubmatch(d.String())
		if sm == nil {
			t.Fatalf("cannot read the name of %v", d)
		}
		out[sm[1]] = true
		if sm[1] == "forge_execution_duration_seconds" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[sm[1]+s] = true
			}
		}
	}
	return out
}

func checkExpr(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	if strings.TrimSpace(expr) == "" {
		t.Errorf("%s: empty expression", where)
	}
	used := metricRE.FindAllString(expr, -1)
	if len(used) == 0 {
		t.Errorf("%s: %q uses no forge metric", where, expr)
	}
	for _, n := range used {
		if !known[n] {
			t.Errorf("%s: %q uses %s, which forge does not export", where, expr, n)
		}
	}
	if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
		t.Errorf("%s: unbalanced brackets in %q", where, expr)
	}
}

func TestAlertRules(t *testing.T) {
	known := names(t)
	raw, err := os.ReadFile("../../deploy/prometheus/forge-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			checkExpr(t, r.Alert, r.Expr, known)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: wants a summary and a description", r.Alert)
			}
		}
	}
	for _, a := range []string{"ForgeMemoryPressure", "ForgeSandboxStartFailures", "ForgeSecurityViolations", "ForgeBuildFailures"} {
		if !alerts[a] {
			t.Errorf("alert %s is missing", a)
		}
	}
}

func TestDashboard(t *testing.T) {
	known := names(t)
	raw, err := os.ReadFile("../../deploy/grafana/forge-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, p.Title, q.Expr, known)
		}
	}
}

func TestTenantLabelBounded(t *testing.T) {
	m := New()
	for i := range MaxTenants + 10 {
		m.tenant("tenant:t" + strings.Repeat("x", i))
	}
	if got := m.tenant("tenant:newcomer"); got != "other" {
		t.Errorf("tenant past the bound: %q, want other", got)
	}
	if got := m.tenant("listener:127.0.0.1:1"); got != "other" && got != "listener" {
		t.Errorf("listener label %q", got)
	}
}
