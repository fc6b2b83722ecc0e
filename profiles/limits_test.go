package profiles

import "testing"

func TestHostLimitsDerived(t *testing.T) {
	const gib = int64(1) << 30
	tests := []struct {
		name         string
		mutate       func(*Config)
		host         int64
		sandboxes    int
		memory, pids int64
	}{
		// 10 sessions + 2 pools of 2 + 8 executions; 22 x 2g capped at 3/4 of 24g.
		{"defaults", func(*Config) {}, 24 * gib, 22, 18 * gib, 22 * 128},
		{"a big host: the sandboxes' maxima", func(*Config) {}, 256 * gib, 22, 44 * gib, 22 * 128},
		{"no data image, no pool", func(c *Config) { c.Images.Data = ""; c.Pool.Enabled = false }, 256 * gib, 18, 36 * gib, 18 * 128},
		{"no data image", func(c *Config) { c.Images.Data = "" }, 256 * gib, 20, 40 * gib, 20 * 128},
		{"host memory unknown", func(*Config) {}, 0, 22, 44 * gib, 22 * 128},
		{"a tiny host: still one sandbox's maximum", func(*Config) {}, 1 * gib, 22, 2 * gib, 22 * 128},
		{"set", func(c *Config) { c.Limits = LimitsConfig{MaxSandboxes: 5, Memory: Size(6 * gib), Pids: 1000} }, 24 * gib, 5, 6 * gib, 1000},
		{"only max_sandboxes set", func(c *Config) { c.Limits.MaxSandboxes = 5 }, 24 * gib, 5, 10 * gib, 640},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(c)
			if got := c.MaxSandboxes(); got != tc.sandboxes {
				t.Errorf("MaxSandboxes: got %d, want %d", got, tc.sandboxes)
			}
			if m, p := c.ParentLimits(tc.host); m != tc.memory || p != tc.pids {
				t.Errorf("ParentLimits(%d): got %d, %d, want %d, %d", tc.host, m, p, tc.memory, tc.pids)
			}
		})
	}
}
