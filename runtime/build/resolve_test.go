package build

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-forge/forge/runtime/build/policy"
)

func TestParseCompiled(t *testing.T) {
	out := `certifi==2026.10.19.post1  # via requests
pyjwt[crypto]==2.9.0      # via -r /tmp/forge-requirements.in
six @ https://example.com/six-1.17.0-py2.py3-none-any.whl  # via python-dateutil
urllib3==2.8.0            # via requests, -r /tmp/forge-requirements.in
Requests==2.32.3  # via -r /tmp/forge-requirements.in
`
	got, err := parseCompiled(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.Resolved{
		{Name: "certifi", Version: "2026.10.19.post1", RequiredBy: []string{"requests"}},
		{Name: "pyjwt", Version: "2.9.0", Requested: true},
		{Name: "six", URL: "https://example.com/six-1.17.0-py2.py3-none-any.whl", RequiredBy: []string{"python-dateutil"}},
		{Name: "urllib3", Version: "2.8.0", RequiredBy: []string{"requests"}, Requested: true},
		{Name: "requests", Version: "2.32.3", Requested: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	for _, bad := range []string{"six>=1  # via x", "six  # via x", "--index-url https://evil  # via x", "six==1.*  # via x"} {
		if _, err := parseCompiled(bad); err == nil {
			t.Errorf("parseCompiled(%q) accepted an unpinned or malformed line", bad)
		}
	}
}

func TestParsePipReport(t *testing.T) {
	out := `[{"name": "PyJWT", "version": "2.9.0", "requested": true, "url": "", "requires": ["cryptography", "sphinx"]},
{"name": "cryptography", "version": "50.0.2", "requested": false, "url": "", "requires": ["cffi", "bcrypt"]},
{"name": "cffi", "version": "2.1.1", "requested": false, "url": "", "requires": ["pycparser"]}]`
	got, err := parsePipReport(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.Resolved{
		{Name: "pyjwt", Version: "2.9.0", Requested: true},
		{Name: "cryptography", Version: "50.0.2", RequiredBy: []string{"pyjwt"}},
		{Name: "cffi", Version: "2.1.1", RequiredBy: []string{"cryptography"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}
