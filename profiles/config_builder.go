package profiles

// EnvironmentBuilderConfig configures custom environments: build_custom_environment,
// forge env and the presets that execute_python's environment names.
type EnvironmentBuilderConfig struct {
	Enabled               bool              `yaml:"enabled" doc:"Offer the build_custom_environment tool and build presets on first use. forge env build works without it (the person at the terminal decides)."`
	BaseImage             string            `yaml:"base_image" doc:"Image a build starts from when the request names none; empty means images.default. Must match images.allowed."`
	IndexURL              string            `yaml:"index_url" doc:"PEP 503 simple index builds install from. Builds reach it only through forge's egress proxy, which allows the index's host and environment_builder.index_hosts, nothing else."`
	IndexHosts            []string          `yaml:"index_hosts" doc:"More hosts (or egress rules) the proxy allows during a build, where the index keeps its files (files.pythonhosted.org for PyPI)."`
	CABundle              string            `yaml:"ca_bundle" doc:"Absolute path of a PEM bundle of CA certificates that builds trust for the index (SSL_CERT_FILE), mounted read-only into builds; for an index behind a TLS-inspecting proxy or with a private CA. Empty: the host's trust store (the first of /etc/ssl/certs/ca-certificates.crt, /etc/pki/tls/certs/ca-bundle.crt, /etc/ssl/ca-bundle.pem, /etc/pki/tls/cacert.pem, /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem, /etc/ssl/cert.pem that exists), since an operator behind such a proxy configures the host, not forge; the installer's built-in roots only when the host has none."`
	Wheelhouse            string            `yaml:"wheelhouse" doc:"Absolute path of a directory of wheels mounted read-only into builds and searched first (--find-links); empty means none."`
	Offline               bool              `yaml:"offline" doc:"Install only from environment_builder.wheelhouse (--no-index --offline); builds get no network at all."`
	AllowedPackages       []string          `yaml:"allowed_packages" doc:"Package name patterns (shell wildcards on PEP 503 normalized names) a build may install, its dependencies included (the policy applies to the full resolved set, so a dependency needs a pattern too); \"*\" allows any. Must not be empty when enabled."`
	AllowedPackagesFiles  []string          `yaml:"allowed_packages_files" doc:"Absolute paths of files with more allowed patterns, one a line (# comments)."`
	BlockedPackages       []string          `yaml:"blocked_packages" doc:"Package name patterns a build may never install, whatever else allows them: asked for, or as a dependency of what was (refused naming the chain)."`
	BlockedPackagesFiles  []string          `yaml:"blocked_packages_files" doc:"Absolute paths of files with more blocked patterns, one a line."`
	ApprovalPackages      []string          `yaml:"approval_packages" doc:"Package name patterns that need a person's approval: a build asking for one, or pulling one in as a dependency, is refused with a message naming environment_builder.approved_packages, or the person is asked (environment_builder.approval)."`
	ApprovedPackages      []string          `yaml:"approved_packages" doc:"Packages (names or patterns) approved despite environment_builder.approval_packages."`
	Approval              string            `yaml:"approval" doc:"What a build asking for a package of environment_builder.approval_packages gets: refuse (a refusal naming the settings), or elicit (the person is asked through MCP elicitation, for that build only; the approval is audited as build.approved, an answer other than accept is a refusal, and a client without elicitation is refused)."`
	AllowDirectReferences bool              `yaml:"allow_direct_references" doc:"Allow URL, path and VCS requirements (name @ https://...). Off: only names and version specifiers from the index."`
	MaxPackages           int               `yaml:"max_packages" doc:"Most packages one build may ask for (a preset's packages included)."`
	Presets               map[string]Preset `yaml:"presets" doc:"Named package lists: execute_python's environment field and build_custom_environment's preset expand to them; a preset is built on first use when enabled is true. Formerly environment_builder.templates, which still works for now (with a warning at load)."`
	BuildsPerPeriod       int               `yaml:"builds_per_period" doc:"Builds one principal may start per environment_builder.rate_period (cache hits do not count); 0 means unlimited."`
	RatePeriod            Duration          `yaml:"rate_period" doc:"Window of environment_builder.builds_per_period."`
	MaxConcurrent         int               `yaml:"max_concurrent" doc:"Builds running at once; another build is refused with a retry hint."`
	BuildTimeout          Duration          `yaml:"build_timeout" doc:"Wall-clock limit of one build; a build over it is killed and leaves nothing behind."`
	MaxImageSize          Size              `yaml:"max_image_size" doc:"Largest layer a build may add to its base image (uncompressed)."`
	BuildMemory           Size              `yaml:"build_memory" doc:"Memory limit of a build sandbox (the installer, and /tmp, which is memory)."`
	Installer             string            `yaml:"installer" doc:"What builds install with: auto (uv when it is on the host's PATH, else pip), uv (the host's static uv, mounted read-only; an error at start when there is none) or pip (python3 -m pip of the base image, which must have pip: build one with uv first, e.g. an environment of pip, and use it as the base)."`
	Scanner               string            `yaml:"scanner" doc:"Vulnerability scanner run on each new environment: auto (pip-audit, trivy or grype, whichever is on PATH), none, one of those names, or the absolute path of one. A critical finding (or, from pip-audit, any finding: it gives no severity) rejects the build, naming it."`
	GCAge                 Duration          `yaml:"gc_age" doc:"forge gc removes environments unused for this long; 0 keeps them."`
}

// Preset is a named package list (environment_builder.presets).
type Preset struct {
	Packages    []string `yaml:"packages" doc:"PEP 508 requirements."`
	Description string   `yaml:"description" doc:"What the preset is for, shown in forge://environments/list."`
}
