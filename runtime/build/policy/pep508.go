package policy

import (
	"slices"
	"strings"

	"github.com/mcp-forge/forge/internal/lazyre"
)

// MaxSpecLen bounds one requirement string; real ones are far shorter.
const MaxSpecLen = 1024

// Requirement is one parsed PEP 508 requirement in canonical form.
type Requirement struct {
	// Name is the distribution name normalized per PEP 503 (lowercase,
	// runs of "-", "_" and "." folded into one "-").
	Name string
	// Extras are normalized, sorted and unique.
	Extras []string
	// Specifiers are the version clauses, sorted (their order carries no
	// meaning).
	Specifiers []Specifier
	// URL is the direct reference of "name @ URL", else empty.
	URL string
	// Marker is the environment marker in canonical spelling, else empty.
	Marker string
}

// Specifier is one version clause, such as ">=" "2.31".
type Specifier struct {
	Op      string
	Version string
}

// Direct reports whether the requirement is a direct reference (a URL,
// a path or a VCS checkout) rather than a name resolved by the index.
func (r Requirement) Direct() bool { return r.URL != "" }

// String is the canonical spelling: what Hash covers and what is handed to
// uv or pip.
func (r Requirement) String() string {
	var b strings.Builder
	b.WriteString(r.Name)
	if len(r.Extras) > 0 {
		b.WriteString("[" + strings.Join(r.Extras, ",") + "]")
	}
	if r.URL != "" {
		b.WriteString(" @ " + r.URL)
		if r.Marker != "" {
			b.WriteString(" ")
		}
	}
	for i, s := range r.Specifiers {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(s.Op + s.Version)
	}
	if r.Marker != "" {
		b.WriteString("; " + r.Marker)
	}
	return b.String()
}

// NormalizeName is PEP 503's normalization of a distribution name.
func NormalizeName(name string) string {
	return strings.ToLower(nameRuns.ReplaceAllString(name, "-"))
}

var nameRuns = lazyre.New(`[-_.]+`)

// Parse parses one PEP 508 requirement. Errors are *SpecError. Direct
// references must name their package ("name @ URL"): a bare URL or path is
// refused here, because the rules could not tell what it installs.
func Parse(spec string) (Requirement, error) {
	p := &parser{src: spec}
	if len(spec) > MaxSpecLen {
		return Requirement{}, p.fail(MaxSpecLen, "longer than 1024 bytes")
	}
	if t := strings.TrimSpace(spec); strings.HasPrefix(t, "-") {
		return Requirement{}, p.fail(strings.Index(spec, "-"), "starts with '-', which installers read as an option")
	} else if looksLikeBareReference(t) {
		return Requirement{}, p.fail(0, "a bare URL, path or VCS reference; write it as NAME @ URL (direct references are refused unless environment_builder.allow_direct_references is on)")
	}
	r, err := p.requirement()
	if err != nil {
		return Requirement{}, err
	}
	return r, nil
}

// looksLikeBareReference tells paths, archives and URLs that pip would take
// as requirements from names.
func looksLikeBareReference(s string) bool {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~") ||
		strings.ContainsAny(s, `/\`) && !strings.Contains(s, "@") {
		return true
	}
	lower := strings.ToLower(s)
	for _, ext := range []string{".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz"} {
		if strings.HasSuffix(lower, ext) && !strings.Contains(s, "@") {
			return true
		}
	}
	return urlScheme.MatchString(s)
}

var urlScheme = lazyre.New(`^[A-Za-z][A-Za-z0-9+.-]*:`)

type parser struct {
	src string
	pos int
}

func (p *parser) fail(at int, reason string) *SpecError {
	s := p.src
	if len(s) > 200 {
		s = s[:200]
	}
	return &SpecError{Spec: s, Offset: at, Reason: reason}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t') {
		p.pos++
	}
}

func (p *parser) peek() byte {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *parser) requirement() (Requirement, error) {
	var r Requirement
	p.skipSpace()
	name, err := p.identifier("package name")
	if err != nil {
		return r, err
	}
	r.Name = NormalizeName(name)
	p.skipSpace()
	if p.peek() == '[' {
		if r.Extras, err = p.extras(); err != nil {
			return r, err
		}
		p.skipSpace()
	}
	switch c := p.peek(); {
	case c == '@':
		p.pos++
		p.skipSpace()
		if r.URL, err = p.url(); err != nil {
			return r, err
		}
	case c == '(' || isCmpStart(c):
		if r.Specifiers, err = p.versionSpec(); err != nil {
			return r, err
		}
	}
	p.skipSpace()
	if p.peek() == ';' {
		p.pos++
		if r.Marker, err = p.marker(); err != nil {
			return r, err
		}
	}
	p.skipSpace()
	if p.pos != len(p.src) {
		return r, p.fail(p.pos, "unexpected "+quoteRest(p.src[p.pos:]))
	}
	return r, nil
}

func quoteRest(s string) string {
	if len(s) > 20 {
		s = s[:20] + "…"
	}
	return `"` + s + `"`
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// identifier reads a PEP 508 identifier: letters and digits, with "-", "_"
// and "." inside.
func (p *parser) identifier(what string) (string, error) {
	start := p.pos
	if !isAlnum(p.peek()) {
		if p.pos >= len(p.src) {
			return "", p.fail(p.pos, "missing "+what)
		}
		return "", p.fail(p.pos, what+" must start with a letter or digit, not "+quoteRest(p.src[p.pos:]))
	}
	for p.pos < len(p.src) && (isAlnum(p.src[p.pos]) || strings.IndexByte("-_.", p.src[p.pos]) >= 0) {
		p.pos++
	}
	id := p.src[start:p.pos]
	if !isAlnum(id[len(id)-1]) {
		return "", p.fail(p.pos-1, what+" "+`"`+id+`"`+" must end with a letter or digit")
	}
	return id, nil
}

func (p *parser) extras() ([]string, error) {
	p.pos++ // '['
	var out []string
	for {
		p.skipSpace()
		if p.peek() == ']' && len(out) == 0 {
			p.pos++
			return nil, nil
		}
		id, err := p.identifier("extra name")
		if err != nil {
			return nil, err
		}
		out = append(out, NormalizeName(id))
		p.skipSpace()
		switch p.peek() {
		case ',':
			p.pos++
		case ']':
			p.pos++
			slices.Sort(out)
			return slices.Compact(out), nil
		default:
			return nil, p.fail(p.pos, "extras must be a comma-separated list closed by ']'")
		}
	}
}

// url reads a direct reference up to whitespace. Only schemes an installer
// fetches from are accepted.
func (p *parser) url() (string, error) {
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] != ' ' && p.src[p.pos] != '\t' {
		p.pos++
	}
	u := p.src[start:p.pos]
	if u == "" {
		return "", p.fail(start, "missing URL after '@'")
	}
	if strings.HasSuffix(u, ";") {
		return "", p.fail(start+len(u)-1, "a marker after a URL needs a space before ';'")
	}
	scheme, _, ok := strings.Cut(u, "://")
	if !ok {
		if strings.HasPrefix(u, "file:") {
			return u, nil
		}
		return "", p.fail(start, "the direct reference "+`"`+u+`"`+" is not a URL (scheme://...)")
	}
	switch strings.ToLower(scheme) {
	case "https", "http", "file", "git+https", "git+http", "git+ssh", "git+file", "hg+https", "svn+https", "bzr+https":
		return u, nil
	}
	return "", p.fail(start, "URL scheme "+`"`+scheme+`"`+" is not one installers fetch from (https, http, file, git+https, git+ssh, ...)")
}

func isCmpStart(c byte) bool { return c == '<' || c == '>' || c == '=' || c == '!' || c == '~' }

var cmpOps = []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"}

func (p *parser) versionSpec() ([]Specifier, error) {
	paren := p.peek() == '('
	if paren {
		p.pos++
		p.skipSpace()
	}
	var out []Specifier
	for {
		p.skipSpace()
		op := ""
		for _, o := range cmpOps {
			if strings.HasPrefix(p.src[p.pos:], o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, p.fail(p.pos, "expected a version operator (==, !=, <=, >=, <, >, ~=, ===)")
		}
		p.pos += len(op)
		p.skipSpace()
		start := p.pos
		for p.pos < len(p.src) && (isAlnum(p.src[p.pos]) || strings.IndexByte("-_.*+!", p.src[p.pos]) >= 0) {
			p.pos++
		}
		v := p.src[start:p.pos]
		if err := checkVersion(op, v); err != "" {
			return nil, p.fail(start, err)
		}
		out = append(out, Specifier{Op: op, Version: strings.ToLower(v)})
		p.skipSpace()
		if p.peek() == ',' {
			p.pos++
			continue
		}
		break
	}
	if paren {
		if p.peek() != ')' {
			return nil, p.fail(p.pos, "missing ')' after the version specifiers")
		}
		p.pos++
	}
	slices.SortFunc(out, func(a, b Specifier) int { return strings.Compare(a.Op+a.Version, b.Op+b.Version) })
	return slices.Compact(out), nil
}

// pep440 is PEP 440's version pattern (its appendix), anchored.
var pep440 = lazyre.New(`(?i)^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*` +
	`(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?` +
	`(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?` +
	`(?:[-_.]?dev[-_.]?[0-9]*)?` +
	`(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$`)

// checkVersion applies PEP 440's rules of each operator; "" means valid.
func checkVersion(op, v string) string {
	if v == "" {
		return "missing version after " + op
	}
	if op == "===" {
		return "" // arbitrary equality: any string without spaces, commas or ';'
	}
	base, wildcard := strings.CutSuffix(v, ".*")
	if wildcard && op != "==" && op != "!=" {
		return "a trailing .* is allowed only with == and !="
	}
	if !pep440.MatchString(base) {
		return `"` + v + `"` + " is not a PEP 440 version"
	}
	local := strings.Contains(base, "+")
	switch {
	case wildcard && local:
		return "a version with a local part (+...) cannot end in .*"
	case op == "~=" && (local || !strings.Contains(strings.SplitN(base, "+", 2)[0], ".")):
		return "~= needs a version with at least two release numbers and no local part, such as ~=2.31"
	case local && op != "==" && op != "!=":
		return "a local version (+...) is allowed only with == and !="
	}
	return ""
}
