package agentsandbox

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mcp-forge/forge/server/tenant"
)

func TestCleanRel(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"a.txt", "a.txt", true},
		{"/data/in.csv", "data/in.csv", true},
		{"./x/./y", "x/y", true},
		{"../etc/passwd", "", false},
		{"a/../../b", "", false},
		{"a/..", "", false},
		{"/", "", false},
		{"", "", false},
		{"dir/", "", false},
		{"bad\x00name", "", false},
		{"tab\tname", "", false},
	} {
		got, ok := cleanRel(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("cleanRel(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestOwnsPath(t *testing.T) {
	for _, c := range []struct {
		prefix, path string
		want         bool
	}{
		{"/agent-sandbox", "/agent-sandbox/execute", true},
		{"/agent-sandbox", "/agent-sandbox", true},
		{"/agent-sandbox", "/agent-sandboxes", false},
		{"/agent-sandbox", "/api/v1/execute", false},
		{"/", "/execute", true},
		{"/", "/download/a%2Fb", true},
		{"/", "/", true},
		{"/", "/mcp", false},
		{"/", "/api/v1/execute", false},
	} {
		if got := OwnsPath(c.prefix, c.path); got != c.want {
			t.Errorf("OwnsPath(%q, %q) = %v, want %v", c.prefix, c.path, got, c.want)
		}
	}
}

// TestFailRetryAfter: a tenant's rate limit answers 429 with the
// Retry-After the limit names, as on the REST API.
func TestFailRetryAfter(t *testing.T) {
	h := &Handler{}
	rec := httptest.NewRecorder()
	h.fail(rec, fmt.Errorf("execute: %w", &tenant.LimitError{Tenant: "a", What: "executions", RetryAfter: 3 * time.Second}))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "3" {
		t.Fatalf("got %d Retry-After %q, want 429 and 3", rec.Code, rec.Header().Get("Retry-After"))
	}
}
