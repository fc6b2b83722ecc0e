package build

import "testing"

// TestHostOf: the index's egress rule keeps the URL's port, and an
// http:// index without one gets :80, which a name rule without ports no
// longer allows (egress name rules default to 443 only).
func TestHostOf(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"https://pypi.org/simple", "pypi.org"},
		{"http://pypi.example/simple", "pypi.example:80"},
		{"http://127.0.0.1:8080/simple", "127.0.0.1:8080"},
		{"http://[::1]/simple", "[::1]:80"},
		{"http://[::1]:81/simple", "[::1]:81"},
		{"https://idx.example:8443/simple/", "idx.example:8443"},
		{"", ""},
	} {
		if got := hostOf(tc.url); got != tc.want {
			t.Errorf("hostOf(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}
