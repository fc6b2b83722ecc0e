package profiles

import (
	_ "embed"
	"maps"
	"slices"
	"time"
)

// Defaults of a new mcp_tools entry; Go constants because a map entry has no
// place in defaults.yaml.
const (
	defaultToolTimeout     = 60 * time.Second
	defaultToolMaxCalls    = 100
	defaultToolMaxResponse = Size(1 << 20)
)

//go:embed defaults.yaml
var defaultsYAML []byte

// defaults is defaults.yaml decoded, as Go: builtinDefaults is generated
// from it (defaults_gen.go; TestDefaultsUpToDate checks it and rewrites it
// with FORGE_UPDATE_DOCS=1). Decoding the YAML in an initializer cost
// every forge process about 1 ms and 150 KB before main, which forge
// serve paid before it could answer initialize.
var defaults = &builtinDefaults

// Default returns the built-in configuration. It is valid except that
// StateDir is empty (Load derives it). Each call returns a new deep copy.
func Default() *Config { return defaults.Clone() }

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	d := *c
	d.Server.AllowedOrigins = slices.Clone(c.Server.AllowedOrigins)
	d.Server.AllowedHosts = slices.Clone(c.Server.AllowedHosts)
	d.Server.Auth.Tokens = slices.Clone(c.Server.Auth.Tokens)
	for i := range d.Server.Auth.Tokens {
		d.Server.Auth.Tokens[i].Scopes = slices.Clone(d.Server.Auth.Tokens[i].Scopes)
	}
	d.Server.Tenants.Default.Egress = slices.Clone(c.Server.Tenants.Default.Egress)
	if c.Server.Tenants.Overrides != nil {
		d.Server.Tenants.Overrides = make(map[string]TenantLimits, len(c.Server.Tenants.Overrides))
		for k, v := range c.Server.Tenants.Overrides {
			v.Egress = slices.Clone(v.Egress)
			d.Server.Tenants.Overrides[k] = v
		}
	}
	d.Images.AllowedPatterns = slices.Clone(c.Images.AllowedPatterns)
	d.EnvironmentBuilder.AllowedPackages = slices.Clone(c.EnvironmentBuilder.AllowedPackages)
	d.EnvironmentBuilder.Presets = maps.Clone(c.EnvironmentBuilder.Presets)
	d.Pool.WarmModules = slices.Clone(c.Pool.WarmModules)
	d.Pool.WarmModulesData = slices.Clone(c.Pool.WarmModulesData)
	d.Profiles = maps.Clone(c.Profiles)
	if c.MCPTools != nil {
		d.MCPTools = make(map[string]MCPToolServer, len(c.MCPTools))
		for name, t := range c.MCPTools {
			t.Args = slices.Clone(t.Args)
			t.Env = maps.Clone(t.Env)
			d.MCPTools[name] = t
		}
	}
	return &d
}
