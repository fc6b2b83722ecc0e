package profiles

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const defaultsGenPath = "defaults_gen.go"

// decodedDefaults is defaults.yaml decoded, the source of builtinDefaults.
func decodedDefaults(t *testing.T) *Config {
	t.Helper()
	c := &Config{}
	warnings, err := decodeYAML(c, defaultsYAML, nil)
	if err != nil {
		t.Fatalf("defaults.yaml: %v", err)
	}
	if len(warnings) > 0 {
		t.Fatalf("defaults.yaml uses renamed keys: %v", warnings)
	}
	return c
}

// defaultsGo renders c as defaults_gen.go.
func defaultsGo(t *testing.T, c *Config) []byte {
	t.Helper()
	src := fmt.Sprintf(`// Code generated from defaults.yaml by TestDefaultsUpToDate. DO NOT EDIT.
// Regenerate with: FORGE_UPDATE_DOCS=1 go test ./profiles -run TestDefaultsUpToDate

package profiles

var builtinDefaults = %#v
`, *c)
	src = strings.ReplaceAll(src, "profiles.", "") // %#v qualifies this package's types
	out, err := format.Source([]byte(src))
	if err != nil {
		t.Fatalf("formatting %s: %v", defaultsGenPath, err)
	}
	return out
}

// writeDefaultsGo regenerates defaults_gen.go and makes this test process
// use the decoded defaults, as the next build will.
func writeDefaultsGo(t *testing.T) {
	t.Helper()
	c := decodedDefaults(t)
	if err := os.WriteFile(defaultsGenPath, defaultsGo(t, c), 0o644); err != nil {
		t.Fatal(err)
	}
	defaults = c
}

// The generated defaults are what defaults.yaml says: the file is current,
// and the compiled value equals the decoded one.
func TestDefaultsUpToDate(t *testing.T) {
	if *update || os.Getenv("FORGE_UPDATE_DOCS") == "1" {
		writeDefaultsGo(t)
		return
	}
	c := decodedDefaults(t)
	want, err := os.ReadFile(defaultsGenPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := defaultsGo(t, c); !bytes.Equal(got, want) {
		t.Errorf("%s is stale; regenerate with FORGE_UPDATE_DOCS=1 go test ./profiles -run TestDefaultsUpToDate (-file +generated):\n%s",
			defaultsGenPath, cmp.Diff(string(want), string(got)))
	}
	if !reflect.DeepEqual(*c, builtinDefaults) {
		t.Errorf("builtinDefaults differs from defaults.yaml:\n%s", cmp.Diff(*c, builtinDefaults))
	}
}
