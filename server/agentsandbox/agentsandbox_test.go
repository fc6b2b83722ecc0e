package agentsandbox

import "testing"

func TestCleanRel(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"a.txt", "a.txt", true},
		{"/data/in.csv", "data/in.csv", true},
		{"./x/./y", "x/y", true},
		{"../etc/passwd", "", false},
		{"a/../../b", "", false},
		{"a/..", "", false},
		{"/", "", false},
		{"", "", false},
		{"dir/", "", false},
		{"bad\x00name", "", false},
		{"tab\tname", "", false},
	} {
		got, ok := cleanRel(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("cleanRel(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestOwnsPath(t *testing.T) {
	for _, c := range []struct {
		prefix, path string
		want         bool
	}{
		{"/agent-sandbox", "/agent-sandbox/execute", true},
		{"/agent-sandbox", "/agent-sandbox", true},
		{"/agent-sandbox", "/agent-sandboxes", false},
		{"/agent-sandbox", "/api/v1/execute", false},
		{"/", "/execute", true},
		{"/", "/download/a%2Fb", true},
		{"/", "/", true},
		{"/", "/mcp", false},
		{"/", "/api/v1/execute", false},
	} {
		if got := OwnsPath(c.prefix, c.path); got != c.want {
			t.Errorf("OwnsPath(%q, %q) = %v, want %v", c.prefix, c.path, got, c.want)
		}
	}
}
