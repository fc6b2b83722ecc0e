// Package policy decides which Python packages a custom-environment build
// may install, before any sandbox starts.
//
// Requirements are parsed as PEP 508 specifications (names normalized per
// PEP 503, extras, PEP 440 version specifiers, environment markers) into a
// canonical form, so that "Requests[Security]>=2" and "requests[security] >= 2"
// are the same request: for the rules and for the content hash of a build
// (Hash). Rules refuse direct references (URLs, paths, VCS) unless allowed,
// apply a blocklist, an allowlist and approval patterns with wildcards, and
// cap the number of packages; every refusal names the package, the rule and
// the setting that decides it (*Refusal).
//
// Everything here is pure data: the specs come from agents and are
// untrusted, so a spec that does not parse is refused, never passed on to
// uv or pip. In particular nothing that could be read as a command-line
// option (a leading '-') survives Parse.
package policy
