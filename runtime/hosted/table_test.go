package hosted

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTable(t *testing.T) {
	lim := limits{maxTools: 2, maxSchema: 200}
	obj := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`
	cases := []struct{ name, table, want string }{
		{"ok", `[{"name":"add","inputSchema":` + obj + `,"outputSchema":{"type":"object"},"timeout":2,"persistent":true}]`, ""},
		{"not an array", `{"name":"x"}`, "not a JSON array"},
		{"too many", `[{"name":"a","inputSchema":{"type":"object"}},{"name":"b","inputSchema":{"type":"object"}},{"name":"c","inputSchema":{"type":"object"}}]`, "hosted_tools.max_tools"},
		{"bad name", `[{"name":"a b","inputSchema":{"type":"object"}}]`, "MCP tool names"},
		{"long name", `[{"name":"` + strings.Repeat("a", 129) + `","inputSchema":{"type":"object"}}]`, "MCP tool names"},
		{"no name", `[{"inputSchema":{"type":"object"}}]`, "missing"},
		{"duplicate", `[{"name":"a","inputSchema":{"type":"object"}},{"name":"a","inputSchema":{"type":"object"}}]`, "two tools"},
		{"schema not object", `[{"name":"a","inputSchema":[1]}]`, "not a JSON object"},
		{"schema not type object", `[{"name":"a","inputSchema":{"type":"string"}}]`, `"type": "object"`},
		{"schema too large", `[{"name":"a","inputSchema":{"type":"object","description":"` + strings.Repeat("x", 300) + `"}}]`, "hosted_tools.max_schema_size"},
		{"invalid schema", `[{"name":"a","inputSchema":{"type":"object","minProperties":"x"}}]`, "not a valid JSON Schema"},
		// The host must not read files (or URLs) a table names.
		{"ref to a host file", `[{"name":"a","inputSchema":{"type":"object","properties":{"p":{"$ref":"file:///etc/passwd"}}}}]`, "may not refer"},
		{"bad timeout", `[{"name":"a","inputSchema":{"type":"object"},"timeout":-1}]`, "timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tools, err := parseTable([]byte(c.table), lim)
			if c.want == "" {
				if err != nil || len(tools) != 1 || !tools[0].Persistent || tools[0].Timeout.Seconds() != 2 {
					t.Fatalf("got %+v, %v", tools, err)
				}
				if _, err := tools[0].validate([]byte(`{"a":"x"}`)); err == nil {
					t.Fatal("a string for an integer passed")
				}
				var ae *ArgumentError
				if _, err := tools[0].validate([]byte(`{"a":"x"}`)); !errors.As(err, &ae) || ae.Path != "/a" {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrTable) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrTable mentioning %q", err, c.want)
			}
		})
	}
}

// A package's symlinks are not followed into the snapshot: a link to a
// host file must not reach the sandbox.
func TestSnapshotSkipsSymlinks(t *testing.T) {
	src := filepath.Join(t.TempDir(), "pkg")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "__init__.py"), []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(src, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	s, err := takeSnapshot(src, t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.dir, "pkg", "leak.txt")); !os.IsNotExist(err) {
		t.Fatalf("the symlink reached the snapshot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "pkg", "__init__.py")); err != nil {
		t.Fatal(err)
	}
	if _, err := takeSnapshot(src, t.TempDir(), 3); err == nil || !strings.Contains(err.Error(), "max_source_size") {
		t.Fatalf("a snapshot over the limit: %v", err)
	}
}
