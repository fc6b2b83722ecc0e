package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
)

const envUsage = `Usage:
  forge env build NAME [--preset P] [--base IMAGE] [--description TEXT] [--json] PKG...
                                    build forge/custom:NAME with the packages (PEP 508 specs),
                                    after those of preset P (environment_builder.presets)
  forge env ls [--json]             list environments
  forge env show NAME               labels, requested and installed packages (JSON)
  forge env rm NAME                 remove an environment (refused while one is in use)
`

func cmdEnv(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("env: missing subcommand\n\n%s", envUsage)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "build":
		return envBuild(ctx, g, args)
	case "ls", "list":
		return envLs(ctx, g, args)
	case "show", "info":
		return envShow(ctx, g, args)
	case "rm", "remove":
		return envRm(ctx, g, args)
	case "help", "-h", "--help":
		fmt.Fprint(g.stdout, envUsage)
		return nil
	}
	return usagef("env: unknown subcommand %q\n\n%s", sub, envUsage)
}

// envEngine opens an engine for the env commands, with the audit log: a
// build from the shell is audited like one from a client.
func envEngine(ctx context.Context, g *globals) (*engine.Engine, *profiles.Config, func(), error) {
	cfg, err := g.loadConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.Pool.Enabled = false
	auditLog, err := openAudit(cfg.StateDir, cfg.Security.AuditLog, int64(cfg.Security.AuditMaxSize), cfg.Security.AuditMaxBackups, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	eng, err := engine.New(ctx, engine.Options{Config: cfg, Logger: g.log, Audit: auditLog, Progress: g.stderr})
	if err != nil {
		auditLog.Close()
		return nil, nil, nil, err
	}
	return eng, cfg, func() {
		eng.Close(5 * time.Second)
		auditLog.Close()
	}, nil
}

func envBuild(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("env build", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	preset := fs.String("preset", "", "")
	template := fs.String("template", "", "") // preset's old name, still accepted for now
	base := fs.String("base", "", "")
	desc := fs.String("description", "", "")
	asJSON := fs.Bool("json", false, "")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return usagef("env build: %v\n\n%s", err, envUsage)
	}
	if len(pos) == 0 {
		return usagef("env build: missing NAME\n\n%s", envUsage)
	}
	name, pkgs := pos[0], pos[1:]
	if *template != "" {
		if *preset != "" {
			return usagef("env build: --template is the old name of --preset, and both are given; give --preset only")
		}
		*preset = *template
		g.log.Warn("env build: --template is the old name of --preset; it still works for now")
	}
	if len(pkgs) == 0 && *preset == "" {
		return usagef("env build: name packages, or a --preset\n\n%s", envUsage)
	}
	eng, _, done, err := envEngine(ctx, g)
	if err != nil {
		return err
	}
	defer done()
	res, err := eng.BuildEnvironment(ctx, engine.LocalPrincipal, build.Request{
		Client: "forge-cli", Name: name, Packages: pkgs, Preset: *preset, BaseImage: *base, Description: *desc,
		Progress: func(step, total int, msg string) { fmt.Fprintf(g.stderr, "[%d/%d] %s\n", step, total, msg) },
	})
	if err != nil {
		return envError(err)
	}
	if *asJSON {
		return json.NewEncoder(g.stdout).Encode(res)
	}
	how := "built"
	if res.Cached {
		how = "cached"
	}
	fmt.Fprintf(g.stdout, "%s %s (%s, %d packages, hash %s)\n", res.Image, how, res.ID[:12], len(res.Installed), res.Hash[:16])
	fmt.Fprintf(g.stdout, "%s\n", res.Scan)
	return nil
}

// envError maps a build's errors onto the exit codes: what the user must
// change is 2, forge's trouble 3.
func envError(err error) error {
	var refused *engine.RefusedError
	if errors.As(err, &refused) {
		return usageError{err}
	}
	return err
}

// openBuilder opens the image store and the environment builder of the
// configuration, without a sandbox runtime: ls, show and rm start none.
func (g *globals) openBuilder(ctx context.Context) (*build.Builder, func(), error) {
	cfg, err := g.loadConfig()
	if err != nil {
		return nil, nil, err
	}
	st, err := g.openStoreFor(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	b, err := build.New(build.Options{Store: st, Config: cfg, Audit: audit.Discard(), Logger: g.log})
	if err != nil {
		st.Close()
		return nil, nil, usageError{err}
	}
	return b, func() { st.Close() }, nil
}

func envLs(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("env ls", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return usagef("env ls: takes only --json\n\n%s", envUsage)
	}
	b, done, err := g.openBuilder(ctx)
	if err != nil {
		return err
	}
	defer done()
	list, err := b.List(ctx, engine.LocalPrincipal.Tenant)
	if err != nil {
		return err
	}
	if *asJSON {
		if list == nil {
			list = []build.Environment{}
		}
		return json.NewEncoder(g.stdout).Encode(list)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	// ADDED is the environment's own layer, TOTAL the image with its base.
	fmt.Fprintln(tw, "NAME\tIMAGE\tPACKAGES\tBASE\tADDED\tTOTAL\tLAST USED")
	for _, e := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.ID[:12], clipList(e.Requested, 40), e.BaseImage,
			humanSize(e.LayerSize), humanSize(e.Size), e.LastUsed.Local().Format("2006-01-02 15:04"))
	}
	return tw.Flush()
}

func clipList(l []string, n int) string {
	s := strings.Join(l, " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

func envShow(ctx context.Context, g *globals, args []string) error {
	if len(args) != 1 {
		return usagef("env show: takes one NAME\n\n%s", envUsage)
	}
	b, done, err := g.openBuilder(ctx)
	if err != nil {
		return err
	}
	defer done()
	env, err := b.Get(ctx, engine.LocalPrincipal.Tenant, args[0])
	if err != nil {
		if errors.Is(err, build.ErrNotFound) || errors.Is(err, build.ErrInvalid) {
			return usageError{err}
		}
		return err
	}
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(env)
}

func envRm(ctx context.Context, g *globals, args []string) error {
	if len(args) != 1 {
		return usagef("env rm: takes one NAME\n\n%s", envUsage)
	}
	b, done, err := g.openBuilder(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := b.Remove(ctx, engine.LocalPrincipal.Tenant, args[0]); err != nil {
		if errors.Is(err, build.ErrNotFound) || errors.Is(err, build.ErrInvalid) || errors.Is(err, build.ErrInUse) {
			return usageError{err}
		}
		return err
	}
	fmt.Fprintf(g.stdout, "removed %s\n", build.ImageName(engine.LocalPrincipal.Tenant, args[0]))
	return nil
}
