package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
)

// TestIDBlockSessions: the id range's cap on live sessions counts a zygote
// template's own block beside its children's (it once said 4,096 where
// 3,968 children fit), and smaller blocks raise it past 5,000.
func TestIDBlockSessions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*profiles.Config)
		want   int64
	}{
		{"default zygote", func(*profiles.Config) {}, 4096 / 129 * 128},
		{"container mode", func(c *profiles.Config) { c.Sandbox.Mode = "container" }, 4096},
		{"uid_map_size 16384", func(c *profiles.Config) { c.Security.UIDMapSize = 16384 }, 16384 / 129 * 128},
		{"32 slots", func(c *profiles.Config) { c.Sandbox.ZygoteSlots = 32 }, 4096 / 33 * 32},
		{"256 slots", func(c *profiles.Config) { c.Sandbox.ZygoteSlots = 256 }, 4096 / 257 * 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := profiles.Default()
			tc.mutate(cfg)
			if got, name := idBlockSessions(cfg); got != tc.want || !strings.Contains(name, "security.uid_map_size") {
				t.Errorf("got %d (%q), want %d naming security.uid_map_size", got, name, tc.want)
			}
		})
	}
	c := densityCheck(profiles.Default())
	if !strings.Contains(c.Detail, "zygote_slots+1 = 129 for 128 children) 3968") {
		t.Errorf("doctor's live sessions row: %q, want the id blocks' cap of 3968 zygote children", c.Detail)
	}
}

// TestDensityCheckPidMax: the kernel's pid bound caps live sessions at a
// third of it (a session's reaper, agent and output watcher each take a
// pid), and names the sysctl; a small one is the first limit.
func TestDensityCheckPidMax(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pid_max")
	if err := os.WriteFile(f, []byte("3000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := pidMaxFile
	pidMaxFile = f
	t.Cleanup(func() { pidMaxFile = old })
	cfg := profiles.Default()
	cfg.Sessions.MaxConcurrent = 100000
	c := densityCheck(cfg)
	if !strings.HasPrefix(c.Detail, "at most 1000 (the kernel's pids (sysctl kernel.pid_max") {
		t.Errorf("doctor's live sessions row with pid_max 3000: %q, want at most 1000, naming kernel.pid_max", c.Detail)
	}
}
