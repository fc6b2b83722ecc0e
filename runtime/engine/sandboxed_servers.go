package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/bridge"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/sandbox"
	pysdk "github.com/mcp-forge/forge/sdk/python"
)

// Untrusted downstream MCP servers (mcp_tools.NAME.sandbox): the server
// runs as a second process of a sandbox of its own, its stdio piped through
// libcontainer; the bridge talks MCP to it exactly as to a host process, so
// its tools reach code mode like any other server's.

// sandboxServers gives every sandboxed entry of servers its SpawnFunc.
func (e *Engine) sandboxServers(servers map[string]bridge.ServerConfig, cfg map[string]profiles.MCPToolServer) {
	for name, c := range cfg {
		if !c.Sandbox {
			continue
		}
		sc := servers[name]
		sc.Spawn = e.spawner(name, c)
		servers[name] = sc
	}
}

func (e *Engine) spawner(name string, c profiles.MCPToolServer) bridge.SpawnFunc {
	return func(ctx context.Context) (*bridge.Spawned, error) {
		image := c.Image
		if image == "" {
			image = e.cfg.Images.Default
		}
		// A bare name is a custom environment of the operator, whose
		// configuration this is: the local principal's.
		if build.ValidName(image) == nil {
			img, err := e.builder.Resolve(ctx, LocalPrincipal.Tenant, image)
			if err != nil {
				return nil, fmt.Errorf("mcp_tools.%s.image: %w", name, err)
			}
			image = img
		}
		if err := e.CheckImage(image); err != nil {
			return nil, fmt.Errorf("mcp_tools.%s.image: %w", name, err)
		}
		if isEnvironment(image) {
			e.builder.Touch(image) // in use: forge gc keeps it
		}
		sdk, err := pysdk.Write(filepath.Join(e.cfg.StateDir, "hosted"))
		if err != nil {
			return nil, err
		}
		binds := []sandbox.Bind{{Source: sdk, Name: "sdk"}}
		if c.Mount != "" {
			if _, err := os.Stat(c.Mount); err != nil {
				return nil, fmt.Errorf("mcp_tools.%s.mount: %w", name, err)
			}
			binds = append(binds, sandbox.Bind{Source: c.Mount, Name: filepath.Base(c.Mount)})
		}
		sb, err := e.startSandbox(ctx, image, binds...)
		if err != nil {
			return nil, err
		}
		env := []string{"PYTHONPATH=/run/forge/sdk"}
		for _, k := range slices.Sorted(maps.Keys(c.Env)) {
			env = append(env, k+"="+c.Env[k])
		}
		p, err := sb.Spawn(append([]string{c.Command}, c.Args...), env)
		if err != nil {
			e.destroy(sb)
			return nil, fmt.Errorf("mcp_tools.%s: %w", name, err)
		}
		log := e.log.With("mcp_server", name, "sandbox", sb.ID())
		go func() { // stderr stays on the host, in the debug log, bounded per line
			sc := bufio.NewScanner(io.LimitReader(p.Stderr, 1<<20))
			for sc.Scan() {
				log.Debug("sandboxed MCP server stderr", "text", strings.ToValidUTF8(sc.Text(), "?"))
			}
			_, _ = io.Copy(io.Discard, p.Stderr)
		}()
		return &bridge.Spawned{
			Stdin: p.Stdin, Stdout: p.Stdout, Stderr: io.NopCloser(strings.NewReader("")),
			Alive: func() bool {
				select {
				case <-p.Done():
					return false
				default:
					return sb.Alive()
				}
			},
			Stop: func() {
				p.Kill()
				p.Stdin.Close()
				e.destroy(sb)
			},
		}, nil
	}
}
