package build_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/test/testenv"
)

// TestPolicyResolvedSetPip: with pip as the installer the full resolved set
// (pip's dry-run report) is checked too: python-dateutil 2.9.0.post0
// requires six, which is blocked, and the build is refused with the chain
// before anything is installed.
func TestPolicyResolvedSetPip(t *testing.T) {
	ctx := context.Background()
	uvEng := testenv.Engine(t, false, pyPIConfig("auto"))
	base, err := uvEng.BuildEnvironment(ctx, local, build.Request{Name: pipBaseName, Packages: []string{"pip==24.3.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := uvEng.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		pyPIConfig("pip")(c)
		c.EnvironmentBuilder.BlockedPackages = []string{"six"}
	})
	name := uniqueName("t-pip-resolved")
	removeEnv(t, eng, name)
	_, err = eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"python-dateutil==2.9.0.post0"}, BaseImage: base.Image})
	const want = `python-dateutil requires six, blocked by pattern "six"`
	if !errors.Is(err, build.ErrRefused) || !strings.Contains(err.Error(), want) {
		t.Fatalf("pip build: %v, want a refusal naming %q", err, want)
	}
	if _, err := eng.Store().Lookup(ctx, build.ImageName(local.Tenant, name)); err == nil {
		t.Errorf("the refused build left an image")
	}
	nothingLeft(t, eng)
}

// TestPolicyResolvedSetCacheHit: a cached environment is checked against
// the policy of the day: once six is blocked, a request that hits the
// cache of an environment holding six as a dependency is refused too.
func TestPolicyResolvedSetCacheHit(t *testing.T) {
	ctx := context.Background()
	eng := testenv.Engine(t, false, pyPIConfig("auto"))
	name := uniqueName("t-resolved-hit")
	if _, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"python-dateutil==2.9.0.post0"}}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	strict := testenv.Engine(t, false, func(c *profiles.Config) {
		pyPIConfig("auto")(c)
		c.EnvironmentBuilder.BlockedPackages = []string{"six"}
	})
	removeEnv(t, strict, name)
	_, err := strict.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"python-dateutil==2.9.0.post0"}})
	if !errors.Is(err, build.ErrRefused) || !strings.Contains(err.Error(), `"six"`) || !strings.Contains(err.Error(), "cached environment") {
		t.Fatalf("cache hit under a policy that blocks six: %v, want a refusal naming six and the cached environment", err)
	}
}

// TestApprovalOfDependency: a dependency that matches approval_packages
// needs the person's approval like a requested package: with approval:
// elicit the person is asked about six (pulled in by python-dateutil), a
// decline refuses the build naming the chain, an accept builds it.
func TestApprovalOfDependency(t *testing.T) {
	ctx := context.Background()
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		pyPIConfig("auto")(c)
		c.EnvironmentBuilder.ApprovalPackages, c.EnvironmentBuilder.Approval = []string{"six"}, "elicit"
	})
	name := uniqueName("t-resolved-approve")
	removeEnv(t, eng, name)
	req := build.Request{Name: name, Packages: []string{"python-dateutil==2.9.0.post0"}}
	no := &person{eng: eng, answer: "decline"}
	req.Approver = no
	_, err := eng.BuildEnvironment(ctx, local, req)
	if !errors.Is(err, build.ErrRefused) || !strings.Contains(err.Error(), "python-dateutil requires six") {
		t.Fatalf("declined: %v, want a refusal naming the chain to six", err)
	}
	if no.count() != 1 || strings.Join(no.asked[0].Packages, ",") != "six" {
		t.Fatalf("asked %+v, want once about six", no.asked)
	}
	yes := &person{eng: eng, answer: "accept"}
	req.Approver = yes
	res, err := eng.BuildEnvironment(ctx, local, req)
	if err != nil {
		t.Fatal(err)
	}
	if yes.count() != 1 || strings.Join(yes.asked[0].Packages, ",") != "six" || strings.Join(res.Approved, ",") != "six" {
		t.Errorf("asked %+v, approved %v, want six asked about and approved", yes.asked, res.Approved)
	}
}
