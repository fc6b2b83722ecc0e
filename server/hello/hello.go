// Package hello is what forge says of itself when an MCP client connects,
// from its configuration: the server's name and instructions, and the
// initialize reply (server/hello/wire) they make. It does not import
// mcp-go, so that `forge serve` can answer a stdio client's initialize
// before the rest of the binary has initialized (cmd/forge/internal/early);
// the server package's tests hold the reply to mcp-go's bytes.
package hello

import (
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/server/hello/wire"
)

// Name is the server's name (serverInfo.name): server.name, or "forge".
func Name(cfg *profiles.Config) string {
	if cfg.Server.Name != "" {
		return cfg.Server.Name
	}
	return "forge"
}

// Reply is the line that answers req for a server of configuration cfg at
// version.
func Reply(req wire.Request, cfg *profiles.Config, version string) ([]byte, error) {
	return wire.Reply(req, Name(cfg), version, Instructions(cfg))
}
