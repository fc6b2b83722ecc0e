package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
)

const runUsage = `Usage: forge run [--image REF] [--timeout SECONDS] [--memory SIZE] [--cpus N] [--json] [-f FILE | CODE | -]

Runs CODE (or the file, or stdin with "-") once in a fresh sandbox.
The first run starts a warm runner of this user that makes later runs fast
and exits after FORGE_RUN_WARM (default 30s) without a run; FORGE_RUN_WARM=0
runs every call in this process alone.
Exit codes: 0 ok, 1 the code failed, 2 usage/config error, 3 sandbox/infrastructure error.
`

func cmdRun(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	image := fs.String("image", "", "")
	timeout := fs.Float64("timeout", 0, "")
	memory := fs.String("memory", "", "")
	cpus := fs.String("cpus", "", "")
	asJSON := fs.Bool("json", false, "")
	file := fs.String("f", "", "")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(g.stdout, runUsage)
			return nil
		}
		return usagef("run: %v\n\n%s", err, runUsage)
	}
	code, err := readCode(g.stdin, *file, pos)
	if err != nil {
		return err
	}
	req := engine.Request{Principal: engine.LocalPrincipal, Code: code, Image: *image, Timeout: time.Duration(*timeout * float64(time.Second)), Client: "cli"}
	if *timeout < 0 {
		return usagef("run: --timeout %v: must be a positive number of seconds", *timeout)
	}
	if *memory != "" {
		if req.Memory, err = cgroups.ParseMemory(*memory); err != nil {
			return usagef("run: --memory: %v", err)
		}
	}
	if *cpus != "" {
		if req.CPUs, err = cgroups.ParseCPUs(*cpus); err != nil {
			return usagef("run: --cpus: %v", err)
		}
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	res, err := runCode(ctx, g, cfg, req)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(g.stdout)
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printResult(g.stdout, g.stderr, res)
	}
	if !res.Success {
		return exitError{code: exitUserCode}
	}
	return nil
}

// runCode runs req through the warm runner (warm.go) when it is on, else,
// or when the runner cannot be used, in a one-shot engine of this process.
func runCode(ctx context.Context, g *globals, cfg *profiles.Config, req engine.Request) (*kernel.Result, error) {
	if warmAllowed {
		idle, err := warmIdle()
		if err != nil {
			return nil, err
		}
		if idle > 0 {
			res, ok, err := runWarm(ctx, g, cfg, req)
			if errors.Is(err, errNoRunner) {
				fastFellBack = true
				return nil, err
			}
			if ok || err != nil {
				return res, err
			}
		}
	}
	if warmOnly {
		fastFellBack = true
		return nil, errNoRunner
	}
	cfg.Pool.Enabled = false
	eng, err := engine.New(ctx, engine.Options{Config: cfg, Logger: g.log, Progress: g.stderr})
	if err != nil {
		return nil, err
	}
	defer eng.Close(0)
	if _, err := eng.Validate(req); err != nil {
		return nil, usageError{err}
	}
	return eng.Execute(ctx, req)
}

// warmAllowed is set by Main: only a forge process (not a test calling run
// in-process) can start the warm runner, which re-executes the binary.
var warmAllowed bool

// readCode takes the code from -f FILE, the single argument, or stdin ("-").
func readCode(stdin io.Reader, file string, args []string) (string, error) {
	switch {
	case file != "" && len(args) > 0:
		return "", usagef("run: give either -f FILE or CODE, not both")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usagef("run: reading code: %v", err)
		}
		return string(b), nil
	case len(args) == 1 && args[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return "", usagef("run: reading stdin: %v", err)
		}
		return string(b), nil
	case len(args) == 1:
		return args[0], nil
	case len(args) == 0:
		return "", usagef("run: no code given\n\n%s", runUsage)
	default:
		return "", usagef("run: expected one CODE argument, got %d (quote the code)\n\n%s", len(args), runUsage)
	}
}

// printResult writes a result for a person: the code's stdout to stdout,
// everything else to stderr.
func printResult(stdout, stderr io.Writer, r *kernel.Result) {
	io.WriteString(stdout, r.Stdout)
	io.WriteString(stderr, r.Stderr)
	if r.Result != nil {
		if s, ok := r.Result.(string); ok {
			fmt.Fprintln(stdout, s)
		} else if b, err := json.Marshal(r.Result); err == nil {
			fmt.Fprintln(stdout, string(b))
		}
	}
	for _, d := range r.Display {
		fmt.Fprintf(stderr, "[display %s, %d bytes; use --json to get it]\n", d.MimeType, len(d.Data))
	}
	if r.Truncated {
		fmt.Fprintln(stderr, "[output truncated]")
	}
	if r.Error != nil {
		if r.Error.Traceback != "" {
			fmt.Fprint(stderr, strings.TrimRight(r.Error.Traceback, "\n")+"\n")
		} else {
			fmt.Fprintf(stderr, "%s: %s\n", r.Error.Type, r.Error.Message)
		}
	}
}
