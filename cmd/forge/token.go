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

	"github.com/mcp-forge/forge/server/auth"
)

const tokenUsage = `Usage: forge token create --tenant T --scopes S[,S...]
       forge token ls [--json]
       forge token revoke ID

Bearer tokens of the HTTP transport (MCP at /mcp, REST under /api/v1).
create prints a new random token once: forge keeps only its SHA-256, in
<state_dir>/tokens.json (0600). Scopes: execute, sessions, environments,
tools, admin (admin implies the others). A running server sees a revoke at
its next request. Tokens can also be given by hash in server.auth.tokens.
`

func cmdToken(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("token: missing subcommand\n\n%s", tokenUsage)
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	store := auth.OpenStore(cfg.StateDir)
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("token "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch sub {
	case "create":
		tenant := fs.String("tenant", "", "")
		scopes := fs.String("scopes", "", "")
		if err := parseFlags(fs, args, 0); err != nil {
			return err
		}
		var list []string
		for s := range strings.SplitSeq(*scopes, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		tok, t, err := store.Create(*tenant, list)
		if err != nil {
			if errors.Is(err, auth.ErrStore) {
				return err
			}
			return usagef("token create: %v\n\n%s", err, tokenUsage)
		}
		fmt.Fprintln(g.stdout, tok)
		fmt.Fprintf(g.stderr, "token %s for tenant %q (scopes %s) stored as its hash in %s; it is not shown again\n",
			t.ID, t.Tenant, strings.Join(t.Scopes, ","), store.Path())
		return nil
	case "ls", "list":
		asJSON := fs.Bool("json", false, "")
		if err := parseFlags(fs, args, 0); err != nil {
			return err
		}
		toks, err := store.List()
		if err != nil {
			return err
		}
		if *asJSON {
			if toks == nil {
				toks = []auth.Token{}
			}
			return json.NewEncoder(g.stdout).Encode(toks)
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTENANT\tSCOPES\tCREATED")
		for _, t := range toks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Tenant, strings.Join(t.Scopes, ","), t.Created.Format("2006-01-02 15:04:05Z"))
		}
		return tw.Flush()
	case "revoke", "rm":
		if err := parseFlags(fs, args, 1); err != nil {
			return err
		}
		if err := store.Revoke(fs.Arg(0)); err != nil {
			if errors.Is(err, auth.ErrTokenNotFound) {
				return usagef("token revoke: %v", err)
			}
			return err
		}
		fmt.Fprintf(g.stderr, "token %s revoked\n", fs.Arg(0))
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(g.stdout, tokenUsage)
		return nil
	}
	return usagef("token: unknown subcommand %q\n\n%s", sub, tokenUsage)
}

// parseFlags parses a token subcommand's flags and wants exactly nargs arguments.
func parseFlags(fs *flag.FlagSet, args []string, nargs int) error {
	if err := fs.Parse(args); err != nil {
		return usagef("%s: %v\n\n%s", fs.Name(), err, tokenUsage)
	}
	if fs.NArg() != nargs {
		return usagef("%s: want %d argument(s), got %d\n\n%s", fs.Name(), nargs, fs.NArg(), tokenUsage)
	}
	return nil
}
