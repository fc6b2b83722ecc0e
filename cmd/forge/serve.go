package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/server"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/server/metrics"
	"github.com/mcp-forge/forge/server/tenant"
)

const serveUsage = `Usage: forge serve [--config FILE] [--http ADDR] [--allow-remote]

Serves MCP over stdio (the default), or over streamable HTTP at
http://ADDR/mcp with --http (or server.transport: http in the config).

  --config FILE    configuration file (also a global flag; env FORGE_CONFIG)
  --http ADDR      serve HTTP on ADDR: PORT, :PORT or HOST:PORT; the host
                   defaults to 127.0.0.1
  --allow-remote   allow a non-loopback HTTP address; needs a bearer token
                   (forge token create, or server.auth.tokens) and
                   server.allowed_hosts naming the address

With --http, forge also serves the REST API under /api/v1 (OpenAPI document
at /api/v1/openapi.json), /healthz, /readyz and /metrics. Once any token
exists, every request but the probes needs "Authorization: Bearer TOKEN".

Logs go to stderr; in stdio mode stdout carries only JSON-RPC. SIGINT,
SIGTERM or (stdio) the end of stdin shut down gracefully: running
executions get server.shutdown_grace, then every sandbox is destroyed.
`

func cmdServe(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configFile := fs.String("config", "", "")
	httpAddr := fs.String("http", "", "")
	allowRemote := fs.Bool("allow-remote", false, "")
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
	if *configFile != "" {
		g.config = *configFile
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
	addr := *httpAddr
	if addr == "" && cfg.Server.Transport == "http" {
		addr = cfg.Server.HTTPAddr
	}
	var ln net.Listener
	var authn *auth.Authenticator
	if addr != "" {
		if authn, err = auth.NewAuthenticator(auth.OpenStore(cfg.StateDir), cfg.Server.Auth.Tokens); err != nil {
			return err
		}
		// Check and bind before the engine starts, so a bad address fails fast.
		if addr, err = server.ListenAddr(addr, *allowRemote, authn.Enabled()); err != nil {
			return usageError{fmt.Errorf("serve: %w", err)}
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer ln.Close()
	}

	met := metrics.New()
	auditLog, err := openAudit(cfg.StateDir, cfg.Security.AuditLog, int64(cfg.Security.AuditMaxSize), cfg.Security.AuditMaxBackups, met.ObserveAudit)
	if err != nil {
		return err
	}
	defer auditLog.Close()
	eng, err := engine.New(ctx, engine.Options{Config: cfg, Logger: g.log, Audit: auditLog, Progress: g.stderr, Observer: met})
	if err != nil {
		return err
	}
	met.SetSource(eng)
	eng.Prewarm() // the pool fills while the client connects
	srv := server.New(eng, server.Options{Version: version, Logger: g.log, Audit: auditLog,
		Host: func() any { return hostChecks() },
		Auth: authn, Tenants: tenant.New(cfg.Server.Tenants), Metrics: met.Handler(), OnLimited: met.Limited})

	if ln != nil {
		g.log.Info("serving MCP over streamable HTTP and the REST API", "url", "http://"+ln.Addr().String()+server.EndpointPath,
			"api", "http://"+ln.Addr().String()+"/api/v1", "auth", authn.Enabled())
		err = srv.ServeHTTP(ctx, ln)
	} else {
		g.log.Info("serving MCP over stdio")
		err = srv.ServeStdio(ctx, g.stdin, g.stdout)
	}
	// The server has answered every request: executions finished within
	// the grace period or were killed. Close destroys whatever is left.
	if cerr := eng.Close(cfg.Server.ShutdownGrace.Std()); cerr != nil {
		err = errors.Join(err, fmt.Errorf("closing the engine: %w", cerr))
	}
	g.log.Info("forge serve stopped")
	return err
}

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
