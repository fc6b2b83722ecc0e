package policy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// The configuration settings each rule comes from, named in refusals.
const (
	SettingAllow    = "environment_builder.allowed_packages"
	SettingBlock    = "environment_builder.blocked_packages"
	SettingApprove  = "environment_builder.approval_packages"
	SettingApproved = "environment_builder.approved_packages"
	SettingDirect   = "environment_builder.allow_direct_references"
	SettingMax      = "environment_builder.max_packages"
	SettingApproval = "environment_builder.approval"
)

// Rules is the package policy of builds. Patterns are matched against
// normalized names with path.Match wildcards (*, ?, [...]); a pattern is
// normalized like a name first, so "Foo_Bar*" matches "foo-bar-baz".
type Rules struct {
	// Allow lists the packages a build may install; "*" allows any. Empty
	// allows none.
	Allow []string
	// Block lists packages refused whatever Allow says.
	Block []string
	// Approve lists packages that need a person's approval.
	Approve []string
	// Approved lists packages a person approved in the configuration.
	Approved []string
	// AllowDirect permits "name @ URL" references.
	AllowDirect bool
	// MaxPackages caps the requirements of one build (0 = no cap).
	MaxPackages int
}

// Validate reports a malformed pattern, naming its setting.
func (r Rules) Validate() error {
	for _, l := range []struct {
		setting  string
		patterns []string
	}{{SettingAllow, r.Allow}, {SettingBlock, r.Block}, {SettingApprove, r.Approve}, {SettingApproved, r.Approved}} {
		for _, p := range l.patterns {
			if err := checkPattern(p); err != nil {
				return fmt.Errorf("%s: pattern %q: %w", l.setting, p, err)
			}
		}
	}
	if r.MaxPackages < 0 {
		return fmt.Errorf("%s: must not be negative, got %d", SettingMax, r.MaxPackages)
	}
	return nil
}

func checkPattern(p string) error {
	if p == "" {
		return fmt.Errorf("empty pattern")
	}
	if strings.ContainsAny(p, "/ \t") {
		return fmt.Errorf("patterns match package names: no '/', no spaces")
	}
	if _, err := path.Match(normalizePattern(p), "x"); err != nil {
		return fmt.Errorf("bad wildcard syntax (path.Match): %w", err)
	}
	return nil
}

// normalizePattern folds a pattern like a name, leaving wildcards alone.
func normalizePattern(p string) string { return NormalizeName(p) }

func match(patterns []string, name string) (string, bool) {
	for _, p := range patterns {
		if ok, _ := path.Match(normalizePattern(p), name); ok {
			return p, true
		}
	}
	return "", false
}

// Check applies the rules to the requirements of one build, in order: the
// package count, direct references, the blocklist, the allowlist, then the
// approval patterns. approved names packages a person has approved (nil
// when nobody was asked). The error is the first *Refusal.
func (r Rules) Check(reqs []Requirement, approved map[string]bool) error {
	if r.MaxPackages > 0 {
		if n := len(Names(reqs)); n > r.MaxPackages {
			return &Refusal{Package: strings.Join(Names(reqs), ", "), Rule: RuleCount, Setting: SettingMax,
				Detail: fmt.Sprintf("%d packages asked for, at most %d are allowed per build", n, r.MaxPackages)}
		}
	}
	for _, q := range reqs {
		if q.Direct() && !r.AllowDirect {
			return &Refusal{Package: q.Name, Rule: RuleDirect, Setting: SettingDirect,
				Detail: fmt.Sprintf("it is a direct reference (%s); only names from the package index are allowed", q.URL)}
		}
		if p, ok := match(r.Block, q.Name); ok {
			return &Refusal{Package: q.Name, Rule: RuleBlocked, Pattern: p, Setting: SettingBlock,
				Detail: fmt.Sprintf("it matches the blocklist pattern %q", p)}
		}
		if _, ok := match(r.Allow, q.Name); !ok {
			d := "it matches no allowlist pattern"
			if len(r.Allow) == 0 {
				d = "the allowlist is empty, so no package may be installed"
			}
			return &Refusal{Package: q.Name, Rule: RuleNotAllow, Setting: SettingAllow, Detail: d}
		}
		if p, ok := match(r.Approve, q.Name); ok && !approved[q.Name] {
			if _, ok := match(r.Approved, q.Name); !ok {
				return &Refusal{Package: q.Name, Rule: RuleApproval, Pattern: p, Setting: SettingApproved,
					Detail: fmt.Sprintf("it matches the approval pattern %q (%s) and needs a person's approval: add it to %s, or set %s: elicit so that forge asks the person through an MCP client that supports elicitation", p, SettingApprove, SettingApproved, SettingApproval)}
			}
		}
	}
	return nil
}

// Pending are the distinct names of reqs that need a person's approval
// (an approval pattern matches, approved_packages does not), sorted, with
// the pattern that matched each.
func (r Rules) Pending(reqs []Requirement) (names, patterns []string) {
	return r.PendingNames(Names(reqs))
}

// PendingNames is Pending of sorted, distinct names (a resolved set's).
func (r Rules) PendingNames(all []string) (names, patterns []string) {
	for _, n := range all {
		if p, ok := match(r.Approve, n); ok {
			if _, ok := match(r.Approved, n); !ok {
				names, patterns = append(names, n), append(patterns, p)
			}
		}
	}
	return names, patterns
}

// Names are the distinct normalized names of reqs, sorted.
func Names(reqs []Requirement) []string {
	out := make([]string, 0, len(reqs))
	for _, q := range reqs {
		out = append(out, q.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ParseAll parses every spec; the error names the first bad one.
func ParseAll(specs []string) ([]Requirement, error) {
	out := make([]Requirement, 0, len(specs))
	for _, s := range specs {
		q, err := Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// Hash is the content hash of a build: the base image's digest, the
// canonical requirements (sorted, duplicates dropped), the package index
// and the Python version. Equal hashes name the same environment.
func Hash(baseDigest string, reqs []Requirement, index, python string) string {
	specs := make([]string, 0, len(reqs))
	for _, q := range reqs {
		specs = append(specs, q.String())
	}
	slices.Sort(specs)
	specs = slices.Compact(specs)
	h := sha256.New()
	fmt.Fprintf(h, "forge-environment-v1\x00%s\x00%s\x00%s\x00", baseDigest, strings.TrimRight(index, "/"), python)
	for _, s := range specs {
		io.WriteString(h, s+"\x00")
	}
	return hex.EncodeToString(h.Sum(nil))
}

// maxPatternFile bounds a pattern file (allowlists of a whole index fit).
const maxPatternFile = 4 << 20

// ReadPatternFile reads one pattern per line; blank lines and '#' comments
// are ignored. setting names the configuration field, for errors.
func ReadPatternFile(file, setting string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPatternFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading %s: %w", setting, file, err)
	}
	if len(data) > maxPatternFile {
		return nil, fmt.Errorf("%s: %s is over %d bytes", setting, file, maxPatternFile)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		if err := checkPattern(line); err != nil {
			return nil, fmt.Errorf("%s: %s line %d: pattern %q: %w", setting, file, n, line, err)
		}
		out = append(out, line)
	}
	return out, sc.Err()
}
