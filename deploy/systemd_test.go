package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnits checks both units with systemd-analyze verify, which
// loads them with systemd's own parser (unknown keys, bad values, a missing
// executable). The test rewrites ExecStart's binary to the forge built here,
// since verify insists that it exists. Any warning fails the test.
func TestSystemdUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze missing (Debian's systemd package)")
		}
		t.Skip("systemd-analyze missing")
	}
	bin := forgeBin(t)
	for _, tc := range []struct {
		unit, forge string
		user        bool
		must        []string
	}{
		{"systemd/forge.service", "/usr/local/bin/forge", false, []string{"Delegate=yes", "StateDirectory=forge", "Restart=on-failure"}},
		{"systemd/user/forge.service", "%h/.local/bin/forge", true, []string{"Delegate=yes", "Restart=on-failure", "127.0.0.1:"}},
	} {
		t.Run(tc.unit, func(t *testing.T) {
			data, err := os.ReadFile(tc.unit)
			if err != nil {
				t.Fatal(err)
			}
			text := string(data)
			for _, m := range tc.must {
				if !strings.Contains(text, "\n"+m) && !strings.Contains(text, m) {
					t.Errorf("%s lacks %s", tc.unit, m)
				}
			}
			if !strings.Contains(text, "ExecStart="+tc.forge) {
				t.Fatalf("%s does not start %s", tc.unit, tc.forge)
			}
			dir := t.TempDir()
			unit := filepath.Join(dir, "forge.service")
			os.WriteFile(unit, []byte(strings.ReplaceAll(text, tc.forge, bin)), 0o644)
			args := []string{"verify", unit}
			env := os.Environ()
			if tc.user {
				args = []string{"--user", "verify", unit}
				run := filepath.Join(dir, "run")
				os.Mkdir(run, 0o700)
				env = append(env, "XDG_RUNTIME_DIR="+run)
			}
			cmd := exec.Command(analyze, args...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Fatalf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}
