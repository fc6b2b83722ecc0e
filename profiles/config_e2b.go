package profiles

import "time"

// E2BConfig configures the E2B face (server/e2b): the E2B SDKs' protocol
// on the HTTP listener.
type E2BConfig struct {
	Enabled         bool     `yaml:"enabled" doc:"Serve the E2B protocol on the HTTP listener beside /mcp and /api/v1, so that programs written for the E2B SDKs run against forge with E2B_API_URL and E2B_SANDBOX_URL set to the listener's URL and E2B_API_KEY to a forge token (docs/e2b.md). Each E2B sandbox is a session of the token's tenant."`
	DefaultTemplate string   `yaml:"default_template" doc:"Image (or custom environment name) that the E2B SDKs' own templates (E2B's word for what a sandbox starts from), base and code-interpreter-v1, run. Empty means images.data when that image is present, else images.default. Any other E2B template name is a forge image or custom environment name."`
	DefaultTimeout  Duration `yaml:"default_timeout" doc:"Lifetime of a sandbox whose create names no timeout; at its end the sandbox (the session) is destroyed. set_timeout moves the end."`
	MaxTimeout      Duration `yaml:"max_timeout" doc:"Largest timeout create, connect and set_timeout may ask for; at most sessions.max_lifetime, which ends every session anyway."`
}

func (c *Config) validateE2B(p *problems) {
	e := &c.E2B
	positive(p, "e2b.default_timeout", e.DefaultTimeout)
	positive(p, "e2b.max_timeout", e.MaxTimeout)
	atLeast(p, "e2b.max_timeout", e.MaxTimeout, "e2b.default_timeout", e.DefaultTimeout)
	if c.Sessions.MaxLifetime > 0 && time.Duration(e.MaxTimeout) > time.Duration(c.Sessions.MaxLifetime) {
		p.add("e2b.max_timeout", "must be <= sessions.max_lifetime (%v), got %v", c.Sessions.MaxLifetime, e.MaxTimeout)
	}
	if e.DefaultTemplate != "" && !c.Images.Allowed(e.DefaultTemplate) && !entryNameRE.MatchString(e.DefaultTemplate) {
		p.add("e2b.default_template", "%q: want an image matching images.allowed %q or a custom environment name", e.DefaultTemplate, c.Images.AllowedPatterns)
	}
}
