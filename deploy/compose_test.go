package deploy

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// TestCompose loads the compose file with compose-go (the library docker
// compose and podman's compose providers use) and checks it against the
// forge configuration it mounts.
func TestCompose(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{"compose/compose.yaml"},
		cli.WithWorkingDirectory("compose"),
		cli.WithEnv([]string{"FORGE_ADMIN_TOKEN_SHA256=" + testTokenSHA256}),
		cli.WithConsistency(true))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose-go refuses compose.yaml: %v", err)
	}
	svc, ok := project.Services["forge"]
	if !ok {
		t.Fatal("no service forge")
	}
	data, err := os.ReadFile("compose/forge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, data, "compose/forge.yaml")
	must(t, svc.Privileged, "forge's container must be privileged to build sandboxes")
	must(t, svc.ReadOnly, "the container's root should be read-only")
	mounted := map[string]types.ServiceVolumeConfig{}
	for _, v := range svc.Volumes {
		mounted[v.Target] = v
	}
	state, ok := mounted[cfg.StateDir]
	must(t, ok && state.Type == types.VolumeTypeVolume, "the state dir %s is not on a named volume: %+v", cfg.StateDir, svc.Volumes)
	if _, ok := project.Volumes[state.Source]; !ok {
		t.Errorf("volume %s is not declared", state.Source)
	}
	conf, ok := mounted["/etc/forge/forge.yaml"]
	must(t, ok && conf.ReadOnly, "forge.yaml is not mounted read-only at /etc/forge/forge.yaml")
	must(t, len(svc.Command) >= 3 && svc.Command[1] == "/etc/forge/forge.yaml", "command %v does not use the mounted config", svc.Command)
	checkServeArgs(t, svc.Command, cfg.Server.HTTPAddr)
	if len(svc.Ports) != 1 {
		t.Fatalf("ports %+v", svc.Ports)
	}
	p := svc.Ports[0]
	must(t, strconv.Itoa(int(p.Target)) == port(t, cfg.Server.HTTPAddr), "port target %d, forge listens on %s", p.Target, cfg.Server.HTTPAddr)
	must(t, p.HostIP == "127.0.0.1", "published on %q: keep it on loopback behind a TLS proxy", p.HostIP)
	must(t, len(cfg.Server.Auth.Tokens) > 0, "no token: forge would refuse to listen beyond loopback")
	must(t, svc.Environment["FORGE_ADMIN_TOKEN_SHA256"] != nil && *svc.Environment["FORGE_ADMIN_TOKEN_SHA256"] == testTokenSHA256, "the token hash does not reach the container")

	// Without the token hash the file refuses to load, naming it.
	opts, _ = cli.NewProjectOptions([]string{"compose/compose.yaml"}, cli.WithWorkingDirectory("compose"), cli.WithEnv([]string{}))
	if _, err := opts.LoadProject(context.Background()); err == nil {
		t.Error("compose.yaml loads without FORGE_ADMIN_TOKEN_SHA256")
	}
}
