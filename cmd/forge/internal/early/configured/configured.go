// Package configured gives package early the configuration's initialize
// reply when forge does not run on its built-in configuration: it loads the
// configuration as cmd/forge does, which needs the config parser and so
// initializes later than early (still before mcp-go's and the image
// store's packages). main imports it for its init.
package configured

import (
	"log/slog"

	"github.com/mcp-forge/forge/cmd/forge/internal/early"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/server/hello"
)

func init() { early.Configure(Load) }

// Load is the server's name and instructions for a serving forge, as
// cmd/forge would load its configuration; false when cmd/forge would stop
// with an error, or serve HTTP, instead.
func Load(s early.Serving) (name, instructions string, ok bool) {
	if s.LogLevel != "" && !validLevel(s.LogLevel) {
		return "", "", false
	}
	cfg, err := profiles.LoadFor(s.Config, rootless.UID(), nil) // cmd/forge warns: it loads again
	if err != nil || cfg.Server.Transport == "http" {
		return "", "", false
	}
	if s.LogLevel == "" && cfg.Server.LogLevel != "" && !validLevel(cfg.Server.LogLevel) {
		return "", "", false
	}
	return hello.Name(cfg), hello.Instructions(cfg), true
}

func validLevel(level string) bool {
	var l slog.Level
	return l.UnmarshalText([]byte(level)) == nil
}
