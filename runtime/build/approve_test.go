package build_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
)

// person is a build.Approver that answers as a test tells it, and records
// what it was asked and whether a sandbox was running meanwhile. The real
// asking (MCP elicitation through a client) is tested in
// test/clients/sdk-elicitation.mjs.
type person struct {
	eng    *engine.Engine
	answer string // accept, decline, or "" for a client that cannot ask
	mu     sync.Mutex
	asked  []build.Approval
	live   []int
}

func (p *person) ApproveBuild(_ context.Context, a build.Approval) (build.Decision, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, a)
	p.live = append(p.live, p.eng.Runtime().Live())
	if p.answer == "" {
		return build.Decision{}, fmt.Errorf("%w: no elicitation", build.ErrCannotAsk)
	}
	return build.Decision{Approved: p.answer == "accept", Action: p.answer, By: "test-client/1"}, nil
}

func (p *person) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.asked)
}

func auditEvents(t *testing.T, path string) []audit.Event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev audit.Event
		if json.Unmarshal([]byte(line), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}

// TestApprovalElicit: with environment_builder.approval: elicit a package
// of approval_packages is asked about before any sandbox starts; a decline
// or a client that cannot ask is a refusal that builds nothing, an accept
// builds (audited with who approved), and a later request for the same
// environment is not asked again. Other rules still refuse first.
func TestApprovalElicit(t *testing.T) {
	ctx := context.Background()
	logPath := filepath.Join(t.TempDir(), "audit.log")
	lg, err := audit.Open(logPath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	wheels := t.TempDir()
	value := uniqueName("v")
	makeWheel(t, wheels, "forgetestpkg", "1.0", value)
	preset := uniqueName("preset")
	eng := testenv.EngineWith(t, false, func(c *profiles.Config) {
		b := &c.EnvironmentBuilder
		b.Enabled, b.Offline, b.Wheelhouse, b.AllowedPackages = true, true, wheels, []string{"*"}
		b.BlockedPackages = []string{"evil-*"}
		b.ApprovalPackages, b.Approval = []string{"forgetest*"}, "elicit"
		b.Presets = map[string]profiles.Preset{preset: {Packages: []string{"forgetestpkg==1.0"}}} // another hash than name's
	}, engine.Options{Audit: lg})
	name := uniqueName("t-approve")
	removeEnv(t, eng, name)
	removeEnv(t, eng, preset)

	for _, tc := range []struct {
		answer string
		want   []string
	}{
		{"decline", []string{"forgetestpkg", "did not approve", "decline", "environment_builder.approval"}},
		{"cancel", []string{"forgetestpkg", "did not approve", "cancel"}},
		{"", []string{"forgetestpkg", "no elicitation", "environment_builder.approved_packages", "environment_builder.approval"}},
	} {
		p := &person{eng: eng, answer: tc.answer}
		_, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"ForgeTestPkg"}, Approver: p, Client: "test-client/1"})
		if !errors.Is(err, build.ErrRefused) || !errors.As(err, new(*engine.RefusedError)) {
			t.Fatalf("answer %q: %v, want a refusal", tc.answer, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("answer %q: %q does not name %q", tc.answer, err, w)
			}
		}
		if p.count() != 1 || p.live[0] != 0 {
			t.Errorf("answer %q: asked %d times with %v sandboxes alive, want once with none", tc.answer, p.count(), p.live)
		}
		nothingLeft(t, eng)
		if _, err := eng.Environment(ctx, local, name); !errors.Is(err, build.ErrNotFound) {
			t.Fatalf("answer %q: %v, want no environment", tc.answer, err)
		}
	}

	// No approver at all (forge env build, the REST API): the refusal.
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}}); !errors.Is(err, build.ErrRefused) ||
		!strings.Contains(err.Error(), "environment_builder.approved_packages") {
		t.Errorf("no approver: %v, want a refusal naming the setting", err)
	}
	// The blocklist refuses before anyone is asked.
	p := &person{eng: eng, answer: "accept"}
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg", "evil-x"}, Approver: p}); !errors.Is(err, build.ErrRefused) ||
		!strings.Contains(err.Error(), "blocked_packages") || p.count() != 0 {
		t.Errorf("blocked beside approval: %v, asked %d times; want the blocklist's refusal, nobody asked", err, p.count())
	}

	res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}, Approver: p, Client: "test-client/1"})
	if err != nil {
		t.Fatalf("accepted: %v", err)
	}
	if p.count() != 1 || p.live[0] != 0 {
		t.Fatalf("asked %d times with %v sandboxes alive, want once with none", p.count(), p.live)
	}
	a := p.asked[0]
	if a.Environment != name || strings.Join(a.Packages, ",") != "forgetestpkg" || strings.Join(a.Patterns, ",") != "forgetest*" || a.Image != res.Image {
		t.Errorf("asked %+v, want forgetestpkg of %s (pattern forgetest*)", a, name)
	}
	if strings.Join(res.Approved, ",") != "forgetestpkg" {
		t.Errorf("environment approved %v, want [forgetestpkg]", res.Approved)
	}
	// The same environment again: a cache hit of an approved build.
	if res, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}, Approver: p}); err != nil || !res.Cached || p.count() != 1 {
		t.Errorf("again: %+v, %v, asked %d times; want a cache hit, not asked again", res, err, p.count())
	}

	// A preset built on first use by execute_python asks too.
	tp := &person{eng: eng, answer: "decline"}
	req := engine.Request{Principal: local, Code: "import forgetestpkg\nprint(forgetestpkg.VALUE)", Environment: preset, Approver: tp}
	if _, err := eng.Execute(ctx, req); !errors.Is(err, build.ErrRefused) || tp.count() != 1 {
		t.Errorf("preset declined: %v, asked %d times", err, tp.count())
	}
	tp.answer = "accept"
	if out, err := eng.Execute(ctx, req); err != nil || strings.TrimSpace(out.Stdout) != value || tp.count() != 2 || tp.live[1] != 0 {
		t.Fatalf("preset accepted: %+v, %v, asked %d times (%v sandboxes alive)", out, err, tp.count(), tp.live)
	}
	if out, err := eng.Execute(ctx, req); err != nil || strings.TrimSpace(out.Stdout) != value || tp.count() != 2 {
		t.Errorf("preset again: %+v, %v, asked %d times, want not asked again", out, err, tp.count())
	}

	counts := map[string]int{}
	for _, ev := range auditEvents(t, logPath) {
		counts[ev.Event]++
		if ev.Event == audit.EventBuildApproved && (ev.Fields["by"] != "test-client/1" || ev.Fields["packages"] != "forgetestpkg" || ev.Principal != "local") {
			t.Errorf("build.approved %+v, want by test-client/1, packages forgetestpkg, principal local", ev)
		}
	}
	for ev, n := range map[string]int{audit.EventBuildApproved: 2, audit.EventBuildDeclined: 3, audit.EventBuildComplete: 4} {
		if counts[ev] != n {
			t.Errorf("%d %s events, want %d (all: %v)", counts[ev], ev, n, counts)
		}
	}
}

// TestApprovalRefuse: with the default approval: refuse nobody is asked,
// even when the request could ask, and the refusal names both settings.
func TestApprovalRefuse(t *testing.T) {
	eng := offlineEngine(t, "x", func(b *profiles.EnvironmentBuilderConfig) { b.ApprovalPackages = []string{"forgetestpkg"} })
	p := &person{eng: eng, answer: "accept"}
	_, err := eng.BuildEnvironment(context.Background(), local, build.Request{Name: uniqueName("t-refuse"), Packages: []string{"forgetestpkg"}, Approver: p})
	if !errors.Is(err, build.ErrRefused) || p.count() != 0 {
		t.Fatalf("%v, asked %d times; want a refusal, nobody asked", err, p.count())
	}
	for _, w := range []string{"forgetestpkg", "environment_builder.approved_packages", "environment_builder.approval: elicit"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not name %q", err, w)
		}
	}
	nothingLeft(t, eng)
}
