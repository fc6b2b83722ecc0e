package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcp-forge/forge/cmd/forge/internal/early"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/profiles"
)

// Exit codes of the CLI contract (DESIGN.md).
const (
	exitOK       = 0
	exitUserCode = 1
	exitUsage    = 2
	exitInfra    = 3
)

// usageError is a bad flag, argument or config: exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitError carries a specific exit code with an optional message.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}
func (e exitError) Unwrap() error { return e.err }

const topUsage = `forge: run untrusted Python in sandboxes, as an MCP server or from the shell.

Usage:
  forge serve   [--config FILE] [--http ADDR]     MCP over stdio, or streamable HTTP at /mcp
                                                 plus the REST API at /api/v1 and /metrics
  forge token   create|ls|revoke                 bearer tokens of the HTTP transport
  forge run     [flags] [-f FILE | CODE | -]      one stateless run
  forge image   ls [--json] | pull REF | import REF | bootstrap [--packages P,..] | rm REF
  forge env     build NAME [--preset P] [--base IMAGE] PKG... | ls [--json] | show NAME | rm NAME
                                                  custom environments (forge/custom:NAME)
  forge gc                                        remove what a crashed forge left behind, and
                                                  environments unused for environment_builder.gc_age
  forge doctor                                    which kernel features this host has
  forge bench   [--json]                          latency and throughput on this host
  forge version

Global flags (before the command):
  --state-dir DIR   state directory (env FORGE_STATE_DIR; default /var/lib/forge as root)
  --config FILE     configuration file (env FORGE_CONFIG)
  --log-level L     debug|info|warn|error (default warn; logs go to stderr)
`

// globals are the flags shared by every command.
type globals struct {
	stateDir string
	config   string
	logLevel string
	// logExplicit: --log-level or FORGE_LOG_LEVEL was given, so the
	// config's server.log_level does not override it.
	logExplicit bool
	log         *slog.Logger
	stdin       io.Reader
	stdout      io.Writer
	stderr      io.Writer
}

// Main runs the CLI and returns the process exit code.
func Main(args []string) int {
	warmAllowed = true
	return run(args, os.Stdin, os.Stdout, os.Stderr)
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("forge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags := early.GlobalFlags(fs, os.Getenv)
	err := fs.Parse(args)
	g.stateDir, g.config, g.logLevel = flags.StateDir, flags.Config, flags.LogLevel
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, topUsage)
			return exitOK
		}
		fmt.Fprintf(stderr, "forge: %v\n\n%s", err, topUsage)
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	g.logExplicit = g.logLevel != ""
	if !g.logExplicit {
		g.logLevel = "warn"
	}
	if err := g.setLogLevel(g.logLevel); err != nil {
		fmt.Fprintf(stderr, "forge: --log-level: %v\n", err)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmds := map[string]func(context.Context, *globals, []string) error{
		"serve":     cmdServe,
		"run":       cmdRun,
		"image":     cmdImage,
		"env":       cmdEnv,
		"gc":        cmdGC,
		"doctor":    cmdDoctor,
		"bench":     cmdBench,
		"version":   cmdVersion,
		"token":     cmdToken,
		warmCommand: cmdWarmRunner,
	}
	if warmOnly && rest[0] != "run" {
		fastFellBack = true
		return exitOK
	}
	cmd, ok := cmds[rest[0]]
	if !ok {
		if rest[0] == "help" {
			fmt.Fprint(stdout, topUsage)
			return exitOK
		}
		fmt.Fprintf(stderr, "forge: unknown command %q\n\n%s", rest[0], topUsage)
		return exitUsage
	}
	return exitCode(stderr, cmd(ctx, g, rest[1:]))
}

// exitCode prints err and maps it to the CLI's exit codes.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "forge: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "forge: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isUsage(err) {
		return exitUsage
	}
	return exitInfra
}

// loadConfig reads the configuration (file, FORGE_* environment, defaults)
// and applies --state-dir. A renamed key the file still uses is logged as a
// warning, once.
func (g *globals) loadConfig() (*profiles.Config, error) {
	log := g.log
	if log == nil {
		log = slog.Default()
	}
	cfg, err := profiles.LoadFor(g.config, rootless.UID(), func(msg string) { log.Warn(msg) })
	if err != nil {
		return nil, usageError{err}
	}
	if g.stateDir != "" {
		cfg.StateDir = g.stateDir
	}
	return cfg, nil
}

// setLogLevel (re)creates the stderr logger at level.
func (g *globals) setLogLevel(level string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("%q: want debug, info, warn or error", level)
	}
	g.log = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: lvl}))
	slog.SetDefault(g.log)
	return nil
}

func cmdVersion(_ context.Context, g *globals, _ []string) error {
	fmt.Fprintln(g.stdout, "forge", version)
	return nil
}

// version is forge's version, set at build time (see early.Version).
var version = early.Version

// parseInterspersed parses flags that may come before or after positional
// arguments ("forge run CODE --json"); "--" ends flag parsing.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
