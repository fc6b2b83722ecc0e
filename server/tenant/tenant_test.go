package tenant

import (
	"errors"
	"testing"

	"github.com/mcp-forge/forge/profiles"
)

func TestExecutionBucketAndConcurrency(t *testing.T) {
	l := New(profiles.TenantsConfig{
		Default:   profiles.TenantLimits{ExecutionsPerMinute: 60, ExecutionBurst: 2, MaxConcurrent: 5},
		Overrides: map[string]profiles.TenantLimits{"one": {MaxConcurrent: 1}},
	})
	r1, err := l.Execution("a")
	if err != nil {
		t.Fatal(err)
	}
	r1()
	if _, err := l.Execution("a"); err != nil {
		t.Fatal(err)
	}
	_, err = l.Execution("a") // burst of 2 used up
	var le *LimitError
	if !errors.As(err, &le) || le.RetryAfter <= 0 || le.RetrySeconds() < 1 || le.Setting != "server.tenants.default.executions_per_minute" {
		t.Fatalf("third execution: got %v, want a LimitError with a retry time", err)
	}
	if _, err := l.Execution("b"); err != nil {
		t.Errorf("another tenant shares a's bucket: %v", err)
	}
	release, err := l.Execution("one")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Execution("one"); !errors.As(err, &le) || le.Setting != "server.tenants.overrides.one.max_concurrent" {
		t.Errorf("second concurrent execution of one: got %v, want the max_concurrent limit", err)
	}
	release()
	release() // idempotent
	if _, err := l.Execution("one"); err != nil {
		t.Errorf("after release: %v", err)
	}
}

func TestUnlimited(t *testing.T) {
	l := New(profiles.TenantsConfig{})
	for range 1000 {
		r, err := l.Execution("x")
		if err != nil {
			t.Fatal(err)
		}
		r()
	}
	if err := l.Build("x"); err != nil {
		t.Fatal(err)
	}
}
