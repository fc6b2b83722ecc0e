package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mcp-forge/forge/runtime/build/policy"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// A build resolves, checks, then installs pinned: the installer first
// resolves the request's full dependency set (extras included) without
// installing anything, the host checks every package of that set against
// the policy, and only then does the installer install exactly that set,
// pinned, with no dependency resolution of its own (--no-deps). What is
// installed is what was checked; the installed list is compared with the
// set once more before anything is committed.

// reqFile is where the resolve script writes the request for uv pip
// compile (the sandbox's /tmp).
const reqFile = "/tmp/forge-requirements.in"

// reportFile is where pip writes its dry-run report.
const reportFile = "/tmp/forge-report.json"

// resolveScript runs the resolver in the build sandbox and prints what it
// resolved: uv pip compile's requirements, or pip's dry-run report cut down
// to names, versions, direct URLs and the names each package requires
// (the full report holds every package's README).
const resolveScript = `
import json as _j, subprocess as _s, sys as _y, os as _o, re as _r
_c = _j.loads(%q)
for _k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"):
    if _k in _o.environ:
        _c["env"][_k] = _o.environ[_k]
if _c["reqfile"]:
    with open(_c["reqfile"], "w") as _f:
        _f.write("\n".join(_c["specs"]) + "\n")
_p = _s.run(_c["resolve"], env=_c["env"], stdin=_s.DEVNULL, stdout=_s.PIPE, stderr=_s.STDOUT if _c["report"] else _s.PIPE)
_out = _p.stdout.decode("utf-8", "replace")
if _c["report"]:
    _y.stderr.write(_out[-60000:])
    _out = ""
    if _p.returncode == 0:
        _n = _r.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
        _rep = _j.load(open(_c["report"]))
        _out = _j.dumps([{"name": _i["metadata"]["name"], "version": _i["metadata"]["version"],
            "requested": bool(_i.get("requested")),
            "url": _i.get("download_info", {}).get("url", "") if _i.get("is_direct") else "",
            "requires": [_m.group(0) for _m in (_n.match(_d) for _d in _i["metadata"].get("requires_dist") or []) if _m]}
            for _i in _rep.get("install", [])])
else:
    _y.stderr.write(_p.stderr.decode("utf-8", "replace")[-60000:])
_y.stdout.write(_out)
{"rc": _p.returncode}
`

type resolveConfig struct {
	Env     map[string]string `json:"env"`
	Resolve []string          `json:"resolve"`
	ReqFile string            `json:"reqfile"`
	Specs   []string          `json:"specs"`
	Report  string            `json:"report"`
}

// resolve asks the installer in sb for the plan's full dependency set,
// installing nothing.
func (b *Builder) resolve(ctx context.Context, p *plan, sb *sandbox.Sandbox) ([]policy.Resolved, error) {
	env, index := b.installerEnv()
	rc := resolveConfig{Env: env}
	if b.uv != "" {
		rc.ReqFile, rc.Specs = reqFile, p.specs
		rc.Resolve = append([]string{uvMount, "pip", "compile", "--python", "/usr/bin/python3", "--no-header",
			"--annotation-style", "line", "--no-strip-extras"}, index...)
		rc.Resolve = append(rc.Resolve, "--", reqFile)
	} else {
		rc.Report = reportFile
		rc.Resolve = append([]string{"/usr/bin/python3", "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
			"--report", reportFile, "--target", p.target}, index...)
		rc.Resolve = append(rc.Resolve, "--")
		rc.Resolve = append(rc.Resolve, p.specs...)
	}
	cfg, err := json.Marshal(rc)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	res, err := sb.Exec(ctx, fmt.Sprintf(resolveScript, string(cfg)), sandbox.ExecOptions{Timeout: time.Until(deadline), OutputLimit: outputLimit})
	if err != nil {
		return nil, fmt.Errorf("running the resolver: %w", err)
	}
	if res.TimedOut {
		return nil, fmt.Errorf("%w after %s (environment_builder.build_timeout)", ErrTimeout, time.Duration(b.cfg.BuildTimeout))
	}
	if res.Error != nil {
		return nil, fmt.Errorf("%w: the resolve script failed: %s: %s", ErrInstall, res.Error.Type, clip(res.Error.Message, 2000))
	}
	var out struct {
		RC int `json:"rc"`
	}
	raw, _ := json.Marshal(res.Result)
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: the resolve script's result: %w", ErrInstall, err)
	}
	if out.RC != 0 {
		log := trimLog(res.Stderr)
		return nil, &InstallError{Tool: b.Installer(), Status: out.RC, Output: log, Unresolvable: unresolvable(log)}
	}
	if res.Truncated {
		return nil, fmt.Errorf("%w: the resolver's output is over %d bytes", ErrInstall, outputLimit)
	}
	var set []policy.Resolved
	if b.uv != "" {
		set, err = parseCompiled(res.Stdout)
	} else {
		set, err = parsePipReport(res.Stdout)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading the resolved set: %w", ErrInstall, err)
	}
	for i := range set {
		if slices.ContainsFunc(p.reqs, func(q policy.Requirement) bool { return q.Name == set[i].Name }) {
			set[i].Requested = true
		}
	}
	return set, nil
}

// parseCompiled reads uv pip compile's output with --annotation-style
// line: "name[extras]==version  # via a, b, -r file" or "name @ URL  # via
// …". Every package must be pinned; the resolver's output is untrusted.
func parseCompiled(out string) ([]policy.Resolved, error) {
	var set []policy.Resolved
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		spec, comment, _ := strings.Cut(line, " #")
		q, err := policy.Parse(strings.TrimSpace(spec))
		if err != nil {
			return nil, err
		}
		r := policy.Resolved{Name: q.Name, URL: q.URL}
		if q.URL == "" {
			if len(q.Specifiers) != 1 || q.Specifiers[0].Op != "==" || strings.Contains(q.Specifiers[0].Version, "*") {
				return nil, fmt.Errorf("%q is not pinned to one version", clip(spec, 200))
			}
			r.Version = q.Specifiers[0].Version
		}
		if via, ok := strings.CutPrefix(strings.TrimSpace(comment), "via "); ok {
			for v := range strings.SplitSeq(via, ",") {
				v = strings.TrimSpace(v)
				switch {
				case strings.HasPrefix(v, "-"): // -r file, -c file: the request itself
					r.Requested = true
				case v != "":
					r.RequiredBy = append(r.RequiredBy, policy.NormalizeName(v))
				}
			}
		}
		set = append(set, r)
	}
	return checkSet(set)
}

// parsePipReport reads the resolve script's summary of pip's dry-run
// report. A package's parents are those whose requirements name it
// (markers not evaluated: the parents only explain a refusal).
func parsePipReport(out string) ([]policy.Resolved, error) {
	var raw []struct {
		Name      string   `json:"name"`
		Version   string   `json:"version"`
		Requested bool     `json:"requested"`
		URL       string   `json:"url"`
		Requires  []string `json:"requires"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &raw); err != nil {
		return nil, err
	}
	set := make([]policy.Resolved, 0, len(raw))
	for _, e := range raw {
		r := policy.Resolved{Name: policy.NormalizeName(e.Name), Version: e.Version, Requested: e.Requested}
		if e.URL != "" {
			q, err := policy.Parse(e.Name + " @ " + e.URL)
			if err != nil {
				return nil, err
			}
			r.URL, r.Version = q.URL, ""
		}
		set = append(set, r)
	}
	for _, e := range raw {
		for _, dep := range e.Requires {
			for i := range set {
				if set[i].Name == policy.NormalizeName(dep) {
					set[i].RequiredBy = append(set[i].RequiredBy, policy.NormalizeName(e.Name))
				}
			}
		}
	}
	return checkSet(set)
}

// checkSet bounds the set and checks each name and version the way the
// installed list is checked.
func checkSet(set []policy.Resolved) ([]policy.Resolved, error) {
	if len(set) > maxInstalled {
		return nil, fmt.Errorf("%d packages, more than %d", len(set), maxInstalled)
	}
	for _, r := range set {
		if len(r.Name) > maxPackageName || !distNameRE.MatchString(r.Name) ||
			(r.URL == "" && (len(r.Version) > maxVersion || !versionRE.MatchString(r.Version))) {
			return nil, fmt.Errorf("malformed entry %q %q", clip(r.Name, 60), clip(r.Version, 40))
		}
	}
	return set, nil
}

// checkResolved applies the policy to the resolved set; packages of the
// set that need a person's approval are asked about first (approval:
// elicit), as the requested ones were.
func (b *Builder) checkResolved(ctx context.Context, p *plan, set []policy.Resolved) error {
	asked := map[string]bool{}
	for _, n := range p.approved {
		asked[n] = true
	}
	if b.cfg.Approval == "elicit" {
		var names, patterns []string
		all, pats := b.rules.PendingNames(policy.ResolvedNames(set))
		for i, n := range all {
			if !asked[n] {
				names, patterns = append(names, n), append(patterns, pats[i])
			}
		}
		if len(names) > 0 {
			prior := p.approved
			p.pending, p.patterns = names, patterns
			if err := b.approve(ctx, p.req, p, nil); err != nil {
				if errors.Is(err, ErrRefused) {
					var chains []string
					for _, n := range names {
						chains = append(chains, strings.Join(policy.Chain(set, p.reqs, n), " requires "))
					}
					err = fmt.Errorf("%w (%s); nothing was installed", err, strings.Join(chains, "; "))
				}
				return err
			}
			p.approved = append(slices.Clone(prior), p.approved...)
			slices.Sort(p.approved)
			p.approved = slices.Compact(p.approved)
			for _, n := range names {
				asked[n] = true
			}
		}
	}
	if err := b.rules.CheckResolved(set, p.reqs, asked); err != nil {
		return fmt.Errorf("%w: %w; nothing was installed", ErrRefused, err)
	}
	return nil
}

// distsIn are the normalized names of the distributions installed in dir
// (name-version.dist-info directories): a base image that is itself an
// environment has some in the directory a build installs into.
func distsIn(dir string) (map[string]bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing the packages of the base image: %w", err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if base, ok := strings.CutSuffix(e.Name(), ".dist-info"); ok && e.IsDir() {
			name, _, _ := strings.Cut(base, "-")
			out[policy.NormalizeName(name)] = true
		}
	}
	return out, nil
}

// checkInstalled compares what the installer installed with the resolved
// set that was checked: nothing else may be in the environment but what
// the base image had (base).
func checkInstalled(installed []Package, set []policy.Resolved, base map[string]bool) error {
	names := policy.ResolvedNames(set)
	for _, pkg := range installed {
		if base[policy.NormalizeName(pkg.Name)] {
			continue
		}
		if _, ok := slices.BinarySearch(names, policy.NormalizeName(pkg.Name)); !ok {
			return fmt.Errorf("%w: %s %s was installed but is not in the resolved set that the policy checked (%s); nothing was kept",
				ErrRefused, pkg.Name, pkg.Version, strings.Join(names, ", "))
		}
	}
	return nil
}

// checkCached applies the policy to a cached environment's installed set
// (the resolved set it was built from), so that a policy changed since the
// build applies to cache hits too. Packages that need approval and were
// not approved for that build join the plan's pending ones.
func (b *Builder) checkCached(p *plan, labels map[string]string) error {
	var installed []Package
	if err := json.Unmarshal([]byte(labels[LabelInstalled]), &installed); err != nil {
		return fmt.Errorf("%w: the cached environment's %s label: %w", ErrInstall, LabelInstalled, err)
	}
	var prior []string
	json.Unmarshal([]byte(labels[approvedLabel]), &prior)
	set := make([]policy.Resolved, 0, len(installed))
	for _, pkg := range installed {
		set = append(set, policy.Resolved{Name: policy.NormalizeName(pkg.Name), Version: pkg.Version})
	}
	asked := map[string]bool{}
	for _, n := range append(prior, p.pending...) {
		asked[n] = true
	}
	if b.cfg.Approval == "elicit" {
		names, patterns := b.rules.PendingNames(policy.ResolvedNames(set))
		for i, n := range names {
			if !asked[n] && !slices.Contains(p.pending, n) {
				p.pending, p.patterns = append(p.pending, n), append(p.patterns, patterns[i])
				asked[n] = true
			}
		}
	}
	if err := b.rules.CheckResolved(set, p.reqs, asked); err != nil {
		var r *policy.Refusal
		if errors.As(err, &r) && len(r.Chain) <= 1 && !slices.ContainsFunc(p.reqs, func(q policy.Requirement) bool { return q.Name == r.Package }) {
			r.Detail = "the cached environment " + p.image + " holds it as a dependency; " + r.Detail
		}
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return nil
}
