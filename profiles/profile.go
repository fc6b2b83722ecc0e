package profiles

import (
	"fmt"
	"maps"
	"slices"
)

// DefaultProfile is the name of the built-in profile derived from execution.*.
const DefaultProfile = "default"

// Profile returns the resolved limits of the named profile: the default
// profile ("" or "default") is execution.default_memory, default_cpus,
// max_pids, default_timeout, tmp_size and security.seccomp_profile; a named
// profile overrides the fields it sets.
func (c *Config) Profile(name string) (Profile, error) {
	p := Profile{
		Memory:  c.Execution.DefaultMemory,
		CPUs:    c.Execution.DefaultCPUs,
		Pids:    c.Execution.MaxPids,
		Timeout: c.Execution.DefaultTimeout,
		TmpSize: c.Execution.TmpSize,
		Seccomp: c.Security.SeccompProfile,
		Egress:  c.Execution.Egress,
	}
	if name == "" || name == DefaultProfile {
		return p, nil
	}
	o, ok := c.Profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("%w: %q", ErrUnknownProfile, name)
	}
	if len(o.Egress) == 0 {
		o.Egress = nil // egress: [] in a profile inherits, as it always did
	}
	overlay(&p, o)
	return p, nil
}

// EgressPolicy is the parsed egress allowlist of the named profile (see
// Profile); the zero EgressPolicy allows nothing.
func (c *Config) EgressPolicy(profile string) (EgressPolicy, error) {
	p, err := c.Profile(profile)
	if err != nil {
		return EgressPolicy{}, err
	}
	return ParseEgressPolicy(p.Egress)
}

// ProfileNames returns "default" followed by the configured profiles, sorted.
func (c *Config) ProfileNames() []string {
	names := slices.Sorted(maps.Keys(c.Profiles))
	return append([]string{DefaultProfile}, slices.DeleteFunc(names, func(n string) bool { return n == DefaultProfile })...)
}
