package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
)

func TestDoctorIDRange(t *testing.T) {
	tests := []struct {
		name   string
		subuid string
		found  bool
		detail []string
	}{
		{"clear", "alice:100000:65536\n", true, []string{"1879048192-2147483647", "4096 sandboxes", "clear of"}},
		{"overlapping", "alice:1879048192:65536\n", false, []string{"overlaps range 1879048192-1879113727", `"alice"`, "security.uid_range_start"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			etc := t.TempDir()
			if err := os.WriteFile(filepath.Join(etc, "subuid"), []byte(tc.subuid), 0o644); err != nil {
				t.Fatal(err)
			}
			c := idRangeCheck(profiles.Default(), etc)
			if c.Found != tc.found {
				t.Errorf("found = %v, want %v (%s)", c.Found, tc.found, c.Detail)
			}
			for _, w := range tc.detail {
				if !strings.Contains(c.Detail, w) {
					t.Errorf("detail %q lacks %q", c.Detail, w)
				}
			}
		})
	}
}

// TestModeCheck: doctor names the sandbox mode that runs and why.
func TestModeCheck(t *testing.T) {
	cfg := profiles.Default()
	if c := modeCheck(cfg); !c.Found || !strings.HasPrefix(c.Detail, "zygote (sandbox.mode, the default)") ||
		!strings.Contains(c.Detail, "after 1000 forks or 10m") || !strings.Contains(c.Detail, "builds start as containers") {
		t.Errorf("default config: %+v, want zygote mode named, with its recycling and what stays a container", c)
	}
	cfg.Sandbox.Mode = "container"
	if c := modeCheck(cfg); !c.Found || !strings.HasPrefix(c.Detail, "container (sandbox.mode)") {
		t.Errorf("sandbox.mode container: %+v, want container mode named", c)
	}
}
