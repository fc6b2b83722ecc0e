package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/mcp-forge/forge/cmd/forge/internal/early"
	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/internal/startgc"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/server"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/server/metrics"
	"github.com/mcp-forge/forge/server/tenant"
	"github.com/mcp-forge/forge/server/tracing"
)

const serveUsage = `Usage: forge serve [--config FILE] [--http ADDR] [--allow-remote] [--insecure-no-auth] [--tools PATH]

Serves MCP over stdio (the default), or over streamable HTTP at
http://ADDR/mcp with --http (or server.transport: http in the config).

  --config FILE    configuration file (also a global flag; env FORGE_CONFIG)
  --http ADDR      serve HTTP on ADDR: PORT, :PORT or HOST:PORT; the host
                   defaults to 127.0.0.1
  --allow-remote   allow a non-loopback HTTP address; needs a bearer token
                   (forge token create, or server.auth.tokens) and
                   server.allowed_hosts naming the address
  --insecure-no-auth
                   serve HTTP without tokens, every client one principal
                   whichever local account it is (loopback only; logged
                   and audited). Never on a shared host.
  --tools PATH     serve the @tool functions (forge_tools) of a .py file or
                   package directory as MCP tools, every call in a sandbox
                   (hosted_tools.path; hosted_tools.* sets the limits)

With --http, forge also serves the REST API under /api/v1 (OpenAPI document
at /api/v1/openapi.json), /healthz, /readyz and /metrics. Every request but
the probes needs "Authorization: Bearer TOKEN": a token of forge token
create or server.auth.tokens, or, when there is none, the token forge keeps
in <state_dir>/http-token (mode 0600, made at the first start; serve prints
its path).

Logs go to stderr; in stdio mode stdout carries only JSON-RPC. SIGINT,
SIGTERM or (stdio) the end of stdin shut down gracefully: running
executions get server.shutdown_grace, then every sandbox is destroyed.
`

func cmdServe(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags := early.ServeFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(g.stdout, serveUsage)
			return nil
		}
		return usagef("serve: %v\n\n%s", err, serveUsage)
	}
	if fs.NArg() > 0 {
		return usagef("serve: unexpected argument %q\n\n%s", fs.Arg(0), serveUsage)
	}
	if flags.Config != "" {
		g.config = flags.Config
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	if !g.logExplicit && cfg.Server.LogLevel != "" {
		if err := g.setLogLevel(cfg.Server.LogLevel); err != nil {
			return usageError{fmt.Errorf("server.log_level: %w", err)}
		}
	}
	if flags.Tools != "" {
		cfg.HostedTools.Path = flags.Tools
	}
	addr := flags.HTTP
	if addr == "" && cfg.Server.Transport == "http" {
		addr = cfg.Server.HTTPAddr
	}
	var ln net.Listener
	var authn *auth.Authenticator
	var tokenFile string // the local token's, when forge made or reused one
	if addr != "" {
		if authn, err = auth.NewAuthenticator(auth.OpenStore(cfg.StateDir), cfg.Server.Auth.Tokens); err != nil {
			return err
		}
		if flags.InsecureNoAuth && authn.Enabled() {
			return usageError{errors.New("serve: --insecure-no-auth: bearer tokens are configured (forge token ls, server.auth.tokens), so every client needs one anyway; drop the flag")}
		}
		// Check and bind before the engine starts, so a bad address fails fast.
		if addr, err = server.ListenAddr(addr, flags.AllowRemote, authn.Enabled()); err != nil {
			return usageError{fmt.Errorf("serve: %w", err)}
		}
		if !authn.Enabled() && !flags.InsecureNoAuth {
			// Loopback TCP tells no local account from another: without a
			// configured token, the clients prove they can read a file
			// only forge's own account can.
			tokenFile = filepath.Join(cfg.StateDir, auth.LocalFileName)
			tok, _, err := auth.LocalToken(tokenFile)
			if err != nil {
				return fmt.Errorf("serve: the HTTP token: %w", err)
			}
			authn.AddLocal(tok)
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer ln.Close()
		if cfg.Cluster.Enabled && cfg.Cluster.Advertise == "" {
			cfg.Cluster.Advertise = advertise(ln.Addr())
		}
	}

	met := metrics.New()
	auditLog, err := openAudit(cfg.StateDir, cfg.Security.AuditLog, int64(cfg.Security.AuditMaxSize), cfg.Security.AuditMaxBackups, met.ObserveAudit)
	if err != nil {
		return err
	}
	defer auditLog.Close()
	// The engine (image store, pools, bridge) opens while the client
	// connects: initialize and server/discover need only the configuration,
	// and tool calls wait for it (server.Deferred). If it cannot open, serve
	// stops with its error.
	deferred := server.NewDeferred(cfg)
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	tracer, stopTracing, err := tracing.Setup(ctx, cfg.Server.Tracing.OTLPEndpoint, version)
	if err != nil {
		return usageError{err}
	}
	defer func() { _ = stopTracing(context.Background()) }() // flushes the last spans
	srv := server.New(deferred, server.Options{Version: version, Logger: g.log, Audit: auditLog, Tracer: tracer,
		Host: func() any { return hostChecks() },
		Auth: authn, InsecureNoAuth: flags.InsecureNoAuth, Tenants: tenant.New(cfg.Server.Tenants), Metrics: met.Handler(), OnLimited: met.Limited})
	openEngine := func() (*engine.Engine, error) {
		startgc.Restore()
		// Progress lines (images.preload importing) go to stderr and to the
		// tool calls that wait for the engine with a progressToken.
		eng, err := engine.New(ctx, engine.Options{Config: cfg, Logger: g.log, Audit: auditLog, Progress: io.MultiWriter(g.stderr, deferred), Observer: met})
		if err != nil {
			deferred.Resolve(nil, err)
			return nil, err
		}
		met.SetSource(eng)
		// At the stop signal, no sandbox stays frozen: a kill that comes
		// before the shutdown ends (kubectl delete --force: 2 s) must find
		// none it cannot end (sandbox.Runtime.StopFreezing).
		context.AfterFunc(ctx, eng.Runtime().StopFreezing)
		eng.Prewarm() // the pool fills while the client connects
		deferred.Resolve(eng, nil)
		return eng, nil
	}
	opened := make(chan *engine.Engine, 1)
	var host *hosted.Host
	var saver *hosted.Saver
	// Hosted tools (a file's, or saved ones) load while the client
	// connects: initialize is answered at once, and tools/list, tools/call
	// and resources wait for them (Server.HoldHosted). Their table may come
	// from a sandbox. If they cannot load, serve stops with the error.
	loadHosted := func() error {
		eng, err := openEngine()
		if err != nil {
			opened <- nil
			return err
		}
		fail := func(err error) error {
			_ = eng.Close(0)
			opened <- nil
			return err
		}
		if cfg.HostedTools.SaveTool != "refuse" {
			// AttachSaver makes srv the saver's Attach: saved tools are
			// their principal's, not in the list every client sees.
			saver = hosted.NewSaver(hosted.SaverOptions{Engine: eng, Config: cfg.HostedTools, StateDir: cfg.StateDir, Logger: g.log})
			if err := srv.AttachSaver(ctx, saver); err != nil {
				saver.Close()
				return fail(err)
			}
		}
		if cfg.HostedTools.Path != "" {
			h, err := hosted.New(ctx, hosted.Options{Engine: eng, Config: cfg.HostedTools, StateDir: cfg.StateDir,
				OutputLimit: int(cfg.Execution.OutputLimit), Logger: g.log})
			if err == nil {
				if err = srv.AttachHosted(h); err != nil {
					h.Close()
				}
			}
			if err != nil {
				if saver != nil {
					saver.Close()
				}
				return fail(usageError{fmt.Errorf("hosted tools %s: %w", cfg.HostedTools.Path, err)})
			}
			host = h
			g.log.Info("serving hosted tools", "path", cfg.HostedTools.Path, "tools", len(h.Tools()))
		}
		opened <- eng
		return nil
	}
	loaded := make(chan struct{})
	if cfg.HostedTools.Path != "" || cfg.HostedTools.SaveTool != "refuse" {
		release := srv.HoldHosted()
		go func() {
			defer close(loaded)
			err := loadHosted()
			release(err)
			if err != nil {
				stop(err)
			}
		}()
	} else {
		close(loaded)
		go func() {
			// After the first reply, or openDelay without a client: on a
			// small machine the two compete for the CPU.
			t := time.NewTimer(openDelay)
			select {
			case <-srv.Answered():
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			eng, err := openEngine()
			if err != nil {
				stop(err)
			}
			opened <- eng
		}()
	}

	if ln != nil {
		base := "http://" + ln.Addr().String()
		g.log.Info("serving MCP over streamable HTTP and the REST API", "url", base+server.EndpointPath,
			"api", base+"/api/v1", "auth", authn.Enabled(), "token_file", tokenFile)
		switch {
		case tokenFile != "":
			fmt.Fprintf(g.stderr, "\n    forge's HTTP clients authenticate with the token in %s\n    (readable by this account only). For example:\n\n"+
				"        curl -H \"Authorization: Bearer $(cat %s)\" %s/api/v1/sandboxes\n\n", tokenFile, tokenFile, base)
		case flags.InsecureNoAuth:
			g.log.Warn("INSECURE: serving HTTP without authentication (--insecure-no-auth): every local account can run code, and read and destroy every session, of this listener", "url", base)
			auditLog.Log(audit.Event{Event: audit.EventSecurityViolation, Severity: audit.SeverityCritical,
				Reason: "forge serve --insecure-no-auth: the HTTP listener serves every local account without a token", Fields: map[string]any{"address": ln.Addr().String()}})
		}
		err = srv.ServeHTTP(ctx, ln)
	} else {
		g.log.Info("serving MCP over stdio")
		in := g.stdin
		if p, ok := early.Stdin(); ok {
			in = p // it may have answered initialize already
		}
		err = srv.ServeStdio(ctx, in, g.stdout)
	}
	// The server has answered every request: executions finished within
	// the grace period or were killed. Close destroys whatever is left.
	<-loaded
	if host != nil {
		host.Close() // before the engine: its workers are the engine's sandboxes
	}
	if saver != nil {
		saver.Close()
	}
	if eng := <-opened; eng != nil {
		if cerr := eng.Close(cfg.Server.ShutdownGrace.Std()); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing the engine: %w", cerr))
		}
	} else if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = errors.Join(err, cause)
	}
	g.log.Info("forge serve stopped")
	return err
}

// openDelay is how long serve waits for a client's first request before it
// opens the engine anyway.
const openDelay = 100 * time.Millisecond

// openAudit opens the audit log (default <state_dir>/audit.log).
func openAudit(stateDir, path string, maxSize int64, backups int, observe func(audit.Event)) (*audit.Logger, error) {
	if path == "" {
		path = filepath.Join(stateDir, "audit.log")
	}
	l, err := audit.Open(path, audit.Options{MaxSize: maxSize, MaxBackups: backups, Observe: observe})
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	return l, nil
}

// advertise is where peer replicas reach a listener at addr: the pod's IP
// ($POD_IP, from the downward API) with its port, else addr itself.
func advertise(addr net.Addr) string {
	_, port, err := net.SplitHostPort(addr.String())
	if ip := os.Getenv("POD_IP"); ip != "" && err == nil {
		return net.JoinHostPort(ip, port)
	}
	return addr.String()
}
