package profiles

import (
	"os"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add(defaultsYAML)
	if b, err := os.ReadFile("../forge.example.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"", "~", "execution: {timeot: 1}", "pool:\n  size: ${N:-3}\n", "a: &a [*a]\n",
		"server: &s {name: x}\nimages: *s\n", "mcp_tools: {x: {env: {A: ${B}}}}",
		"profiles: {p: {memory: 1.5g, cpus: 1e400}}", "- [", "execution:\n  max_memory: 99999999999t\n",
	} {
		f.Add([]byte(s))
	}
	env := envMap(map[string]string{"N": "5", "B": "x"})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, env)
		if err != nil {
			if err.Error() == "" {
				t.Errorf("empty error for %q", data)
			}
			return
		}
		_ = c.Validate()
		_, _ = c.Profile("default")
		_ = c.Clone()
	})
}
