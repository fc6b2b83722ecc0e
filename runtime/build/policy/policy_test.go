package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"requests", "requests"},
		{"Requests", "requests"},
		{"  Flask_SQLAlchemy  ", "flask-sqlalchemy"},
		{"zope.interface", "zope-interface"},
		{"a__b..c--d", "a-b-c-d"},
		{"requests>=2.31", "requests>=2.31"},
		{"requests >= 2.31 , <3", "requests<3,>=2.31"},
		{"requests (>=2.31,<3)", "requests<3,>=2.31"},
		{"pandas[Excel,performance]==2.2.*", "pandas[excel,performance]==2.2.*"},
		{"pandas[ excel , excel ]", "pandas[excel]"},
		{"pkg[]", "pkg"},
		{"numpy~=1.26", "numpy~=1.26"},
		{"numpy===1.26.0-weird", "numpy===1.26.0-weird"},
		{"torch==2.3.0+cpu", "torch==2.3.0+cpu"},
		{"foo==1.0.POST1", "foo==1.0.post1"},
		{"foo==1!2.0rc1.dev3", "foo==1!2.0rc1.dev3"},
		{"foo!=1.*", "foo!=1.*"},
		{`tomli; python_version < "3.11"`, `tomli; python_version < "3.11"`},
		{`tomli;python_version<'3.11'`, `tomli; python_version < "3.11"`},
		{`pywin32 ; sys_platform == 'win32' and (platform_machine=="x86_64" or platform_machine == 'AMD64')`,
			`pywin32; sys_platform == "win32" and (platform_machine == "x86_64" or platform_machine == "AMD64")`},
		{`foo; "linux" in sys_platform`, `foo; "linux" in sys_platform`},
		{`foo; extra not  in "a b"`, `foo; extra not in "a b"`},
		{`foo; os_name == 'say "hi"'`, `foo; os_name == 'say "hi"'`},
		{"pip @ https://example.com/pip-24.0-py3-none-any.whl", "pip @ https://example.com/pip-24.0-py3-none-any.whl"},
		{`pip @ git+https://github.com/pypa/pip@24.0 ; python_version >= "3.8"`, `pip @ git+https://github.com/pypa/pip@24.0 ; python_version >= "3.8"`},
	} {
		r, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := r.String(); got != tc.want {
			t.Errorf("Parse(%q) = %q, want %q", tc.in, got, tc.want)
		}
		// The canonical form parses to itself.
		again, err := Parse(r.String())
		if err != nil || again.String() != r.String() {
			t.Errorf("canonical %q does not round-trip: %q, %v", r.String(), again.String(), err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ in, reason string }{
		{"", "missing package name"},
		{"   ", "missing package name"},
		{"-r requirements.txt", "option"},
		{"--index-url=https://evil.example/simple", "option"},
		{"-e.", "option"},
		{"requests; -x", "marker variable"},
		{"_private", "must start with a letter or digit"},
		{"foo-", "must end with a letter or digit"},
		{"foo bar", "unexpected"},
		{"foo==", "missing version"},
		{"foo==1.0 junk", "unexpected"},
		{"foo>=1.*", "trailing .*"},
		{"foo~=1", "at least two release numbers"},
		{"foo>=1.0+local", "local version"},
		{"foo==not-a-version", "not a PEP 440 version"},
		{"foo>=1,", "version operator"},
		{"foo (>=1", "missing ')'"},
		{"foo[bar", "extras must be"},
		{"foo[-x]", "extra name must start"},
		{"foo; python_version", "marker operator"},
		{"foo; python_version <", "marker variable"},
		{`foo; python_version < "3.11`, "unterminated"},
		{`foo; os.name == "posix"`, `unknown marker variable "os.name"`},
		{`foo; (python_version < "3"`, "missing ')'"},
		{"foo;", "missing marker"},
		{"foo @", "missing URL"},
		{"foo @ /tmp/x.whl", "not a URL"},
		{"foo @ ftp://example.com/x.whl", "scheme"},
		{"foo @ https://x/y.whl; extra == 'a'", "space before ';'"},
		{"./local/project", "bare URL, path or VCS"},
		{"/tmp/foo-1.0-py3-none-any.whl", "bare URL, path or VCS"},
		{"foo-1.0-py3-none-any.whl", "bare URL, path or VCS"},
		{"https://example.com/foo.tar.gz", "bare URL, path or VCS"},
		{"git+https://github.com/pypa/pip", "bare URL, path or VCS"},
		{"file:///tmp/x", "bare URL, path or VCS"},
		{"~/src/pkg", "bare URL, path or VCS"},
		{strings.Repeat("a", 1025), "longer than 1024"},
		{"foo; " + strings.Repeat("(", 40) + "python_version < '3'" + strings.Repeat(")", 40), "nested too deeply"},
	} {
		_, err := Parse(tc.in)
		var se *SpecError
		if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("Parse(%q) = %v, want a *SpecError", tc.in, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("Parse(%q): %v\nwant the reason to mention %q", tc.in, err, tc.reason)
		}
	}
}

func mustParse(t *testing.T, specs ...string) []Requirement {
	t.Helper()
	reqs, err := ParseAll(specs)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func TestCheck(t *testing.T) {
	base := Rules{
		Allow:       []string{"*"},
		Block:       []string{"evil-*", "Bad_Package"},
		Approve:     []string{"torch*"},
		Approved:    []string{"torchvision"},
		MaxPackages: 3,
	}
	for _, tc := range []struct {
		name     string
		rules    Rules
		specs    []string
		approved map[string]bool
		rule     Rule
		setting  string
		pkg      string
	}{
		{name: "allowed", rules: base, specs: []string{"requests", "six==1.16.0"}},
		{name: "too many", rules: base, specs: []string{"a", "b", "c", "d"}, rule: RuleCount, setting: SettingMax},
		{name: "duplicates count once", rules: base, specs: []string{"a", "A", "a>=1", "b", "c"}},
		{name: "blocked by wildcard", rules: base, specs: []string{"requests", "Evil_Thing"}, rule: RuleBlocked, setting: SettingBlock, pkg: "evil-thing"},
		{name: "blocked by normalized name", rules: base, specs: []string{"bad.package"}, rule: RuleBlocked, setting: SettingBlock, pkg: "bad-package"},
		{name: "block beats allow", rules: Rules{Allow: []string{"evil-x"}, Block: []string{"evil-*"}}, specs: []string{"evil-x"}, rule: RuleBlocked, pkg: "evil-x"},
		{name: "not in allowlist", rules: Rules{Allow: []string{"numpy", "pandas*"}}, specs: []string{"pandas-stubs", "requests"}, rule: RuleNotAllow, setting: SettingAllow, pkg: "requests"},
		{name: "empty allowlist", rules: Rules{}, specs: []string{"numpy"}, rule: RuleNotAllow, setting: SettingAllow, pkg: "numpy"},
		{name: "needs approval", rules: base, specs: []string{"torch"}, rule: RuleApproval, setting: SettingApproved, pkg: "torch"},
		{name: "approved in config", rules: base, specs: []string{"torchvision"}},
		{name: "approved by a person", rules: base, specs: []string{"torch"}, approved: map[string]bool{"torch": true}},
		{name: "direct refused", rules: base, specs: []string{"pip @ https://example.com/pip.whl"}, rule: RuleDirect, setting: SettingDirect, pkg: "pip"},
		{name: "direct allowed", rules: Rules{Allow: []string{"*"}, AllowDirect: true}, specs: []string{"pip @ https://example.com/pip.whl"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.rules.Validate(); err != nil {
				t.Fatal(err)
			}
			err := tc.rules.Check(mustParse(t, tc.specs...), tc.approved)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || !errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, want a *Refusal", err)
			}
			if r.Rule != tc.rule || (tc.setting != "" && r.Setting != tc.setting) || (tc.pkg != "" && r.Package != tc.pkg) {
				t.Fatalf("refusal %+v, want rule %s setting %s package %s", r, tc.rule, tc.setting, tc.pkg)
			}
			msg := err.Error()
			if !strings.Contains(msg, r.Setting) || (tc.pkg != "" && !strings.Contains(msg, tc.pkg)) {
				t.Fatalf("message %q should name the package and the setting", msg)
			}
			if r.NeedsApproval() != (tc.rule == RuleApproval) {
				t.Fatalf("NeedsApproval = %v", r.NeedsApproval())
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		rules   Rules
		setting string
	}{
		{Rules{Allow: []string{"[a"}}, SettingAllow},
		{Rules{Block: []string{""}}, SettingBlock},
		{Rules{Approve: []string{"a/b"}}, SettingApprove},
		{Rules{Approved: []string{"a b"}}, SettingApproved},
		{Rules{MaxPackages: -1}, SettingMax},
	} {
		err := tc.rules.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.setting) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.rules, err, tc.setting)
		}
	}
}

func TestHash(t *testing.T) {
	h := func(base, index, py string, specs ...string) string {
		return Hash(base, mustParse(t, specs...), index, py)
	}
	a := h("sha256:1", "https://pypi.org/simple", "3.11.2", "Requests>=2", "six")
	for name, same := range map[string]string{
		"order":          h("sha256:1", "https://pypi.org/simple", "3.11.2", "six", "requests >= 2"),
		"duplicates":     h("sha256:1", "https://pypi.org/simple", "3.11.2", "six", "requests>=2", "Six"),
		"trailing slash": h("sha256:1", "https://pypi.org/simple/", "3.11.2", "requests>=2", "six"),
	} {
		if same != a {
			t.Errorf("%s changed the hash", name)
		}
	}
	for name, diff := range map[string]string{
		"base":    h("sha256:2", "https://pypi.org/simple", "3.11.2", "requests>=2", "six"),
		"index":   h("sha256:1", "https://test.pypi.org/simple", "3.11.2", "requests>=2", "six"),
		"python":  h("sha256:1", "https://pypi.org/simple", "3.13.1", "requests>=2", "six"),
		"version": h("sha256:1", "https://pypi.org/simple", "3.11.2", "requests>=2.1", "six"),
		"extra":   h("sha256:1", "https://pypi.org/simple", "3.11.2", "requests[socks]>=2", "six"),
		"less":    h("sha256:1", "https://pypi.org/simple", "3.11.2", "requests>=2"),
	} {
		if diff == a {
			t.Errorf("%s did not change the hash", name)
		}
	}
	if len(a) != 64 {
		t.Fatalf("hash %q is not hex sha256", a)
	}
}

func TestReadPatternFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "allow.txt")
	os.WriteFile(good, []byte("# data science\nnumpy\n  pandas*   # and friends\n\nscikit_learn\n"), 0o644)
	got, err := ReadPatternFile(good, SettingAllow)
	if err != nil || strings.Join(got, " ") != "numpy pandas* scikit_learn" {
		t.Fatalf("got %q, %v", got, err)
	}
	r := Rules{Allow: got}
	if err := r.Check(mustParse(t, "scikit-learn", "pandas-datareader"), nil); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("numpy\n[oops\n"), 0o644)
	if _, err := ReadPatternFile(bad, SettingBlock); err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), SettingBlock) {
		t.Fatalf("got %v, want an error naming line 2 and the setting", err)
	}
	if _, err := ReadPatternFile(filepath.Join(dir, "missing"), SettingBlock); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"requests>=2", `a[b]; python_version<"3"`, "x @ https://h/x.whl", "-r x", "a (==1)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		c := r.String()
		if strings.HasPrefix(strings.TrimSpace(c), "-") {
			t.Fatalf("%q parsed to an option-like %q", s, c)
		}
		again, err := Parse(c)
		if err != nil || again.String() != c {
			t.Fatalf("canonical %q of %q does not round-trip: %q %v", c, s, again.String(), err)
		}
	})
}
