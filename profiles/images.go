package profiles

import "path"

// Allowed reports whether the image reference ref matches one of the allowed
// patterns. Patterns use path.Match syntax against the whole reference, so
// "*" does not cross a "/": "forge/*" allows "forge/python:3.11" but not
// "forge/x/y". ref is compared as written; callers pass the name the user
// asked for, not a resolved registry location.
func (c *ImagesConfig) Allowed(ref string) bool {
	if ref == "" {
		return false
	}
	for _, p := range c.AllowedPatterns {
		if ok, err := path.Match(p, ref); err == nil && ok {
			return true
		}
	}
	return false
}

// matchesAny is Allowed for other pattern lists (environment_builder).
func matchesAny(patterns []string, s string) bool {
	c := ImagesConfig{AllowedPatterns: patterns}
	return c.Allowed(s)
}

// PackageAllowed reports whether build_custom_environment may install pkg.
func (c *EnvironmentBuilderConfig) PackageAllowed(pkg string) bool {
	return matchesAny(c.AllowedPackages, pkg)
}
