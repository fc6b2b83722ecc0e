package profiles

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md")

const docPath = "../docs/configuration.md"

func TestConfigurationDocUpToDate(t *testing.T) {
	if *update || os.Getenv("FORGE_UPDATE_DOCS") == "1" {
		writeDefaultsGo(t) // the table shows the defaults
		if err := os.WriteFile(docPath, Markdown(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got := Markdown()
	want, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("%v (generate it with FORGE_UPDATE_DOCS=1 go test ./profiles -run TestConfigurationDocUpToDate)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s is stale; regenerate with FORGE_UPDATE_DOCS=1 go test ./profiles -run TestConfigurationDocUpToDate (-file +generated):\n%s",
			docPath, cmp.Diff(string(want), string(got)))
	}
}

func TestEveryFieldDocumented(t *testing.T) {
	for _, f := range Schema() {
		if strings.TrimSpace(f.Doc) == "" {
			t.Errorf("%s: no doc tag", f.Path)
		}
		if f.Type == "" {
			t.Errorf("%s: no type", f.Path)
		}
	}
}

func TestExampleConfig(t *testing.T) {
	data, err := os.ReadFile("../forge.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, warnings, err := parse(data, envMap(nil))
	if err != nil {
		t.Fatalf("Parse(forge.example.yaml): %v", err)
	}
	if len(warnings) > 0 {
		t.Errorf("forge.example.yaml uses renamed keys: %q", warnings)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("forge.example.yaml does not validate: %v", err)
	}
	// The example shows every key outside the maps (whose entries are examples).
	for _, f := range Schema() {
		if strings.Contains(f.Path, "<name>") {
			continue
		}
		key := f.Path[strings.LastIndex(f.Path, ".")+1:] + ":"
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("forge.example.yaml does not show %s", f.Path)
		}
	}
	if _, err := c.Profile("tight"); err != nil {
		t.Errorf("Profile(tight): %v", err)
	}
}
