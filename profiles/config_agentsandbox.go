package profiles

import "strings"

// AgentSandboxConfig configures the agent-sandbox face (server/agentsandbox):
// the runtime API that kubernetes-sigs/agent-sandbox's Python client
// (k8s-agent-sandbox) speaks to a sandbox pod.
type AgentSandboxConfig struct {
	Enabled    bool   `yaml:"enabled" doc:"Serve the runtime API of kubernetes-sigs/agent-sandbox's python-runtime (POST execute and upload, GET download/, list/ and exists/) on the HTTP listener, so that the k8s-agent-sandbox client runs commands and moves files in forge sandboxes (docs/deploy.md, agent-sandbox). Requests need a forge bearer token like the rest of the listener (the client's direct mode sends it through extra_headers); each X-Sandbox-Namespace/X-Sandbox-ID pair (or, without them, the listener's one default) is a session of the token's tenant, and every command runs in that session's sandbox."`
	PathPrefix string `yaml:"path_prefix" doc:"Where the API is mounted on the listener: the client's api_url is the listener's URL plus this prefix. \"/\" mounts it at the root, which the client's in-cluster mode (SandboxInClusterConnectionConfig, no headers, so no token: forge serve --insecure-no-auth) needs."`
	Image      string `yaml:"image" doc:"Image (or custom environment name) the sessions run; empty means images.default."`
}

// reservedPrefixes are the listener's own paths, which the face may not shadow.
var reservedPrefixes = []string{"/mcp", "/api", "/healthz", "/readyz", "/metrics", "/sandboxes", "/v2"}

func (c *Config) validateAgentSandbox(p *problems) {
	a := &c.AgentSandbox
	switch pre := a.PathPrefix; {
	case pre == "/" || pre == "" && !a.Enabled:
	case !strings.HasPrefix(pre, "/") || strings.HasSuffix(pre, "/") || strings.ContainsAny(pre, " ?#{}%") || strings.Contains(pre, "//"):
		p.add("agent_sandbox.path_prefix", "%q: want \"/\" or a path like /agent-sandbox (leading slash, no trailing slash, no ?, #, %%, braces or spaces)", pre)
	default:
		for _, r := range reservedPrefixes {
			if pre == r || strings.HasPrefix(pre, r+"/") {
				p.add("agent_sandbox.path_prefix", "%q is under forge's own %s", pre, r)
			}
		}
	}
	if a.Image != "" && !c.Images.Allowed(a.Image) && !entryNameRE.MatchString(a.Image) {
		p.add("agent_sandbox.image", "%q: want an image matching images.allowed %q or a custom environment name", a.Image, c.Images.AllowedPatterns)
	}
}
