package server

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// build_custom_environment's preset names a package list of
// environment_builder.presets; template, its old name, is still accepted
// ("template" means a zygote template only), but not both.
func TestDecodeBuildArgsPreset(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     BuildArgs
		wantErr  string
	}{
		{"preset", `{"name":"e","preset":"web"}`, BuildArgs{Name: "e", Preset: "web"}, ""},
		{"preset and packages", `{"name":"e","preset":"web","packages":["rich"]}`, BuildArgs{Name: "e", Preset: "web", Packages: []string{"rich"}}, ""},
		{"template, the old name", `{"name":"e","template":"web"}`, BuildArgs{Name: "e", Preset: "web", ViaTemplate: true}, ""},
		{"both", `{"name":"e","preset":"web","template":"data-science"}`, BuildArgs{}, "template: is the old name of preset, and both are given; give preset only"},
		{"neither, no packages", `{"name":"e"}`, BuildArgs{}, "packages: is required unless preset names a preset"},
		{"unknown field", `{"name":"e","presets":"web"}`, BuildArgs{}, "known fields: name, packages, preset, base_image, description"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBuildArgs([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalidArguments) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, %v; want an invalid-arguments error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Name != tc.want.Name || got.Preset != tc.want.Preset || got.ViaTemplate != tc.want.ViaTemplate ||
				strings.Join(got.Packages, ",") != strings.Join(tc.want.Packages, ",") {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// tools/list shows build_custom_environment's preset, never template.
func TestBuildToolSchemaShowsPreset(t *testing.T) {
	stub := newStub()
	stub.cfg.EnvironmentBuilder.Enabled = true
	stub.cfg.EnvironmentBuilder.AllowedPackages = []string{"*"}
	c := connect(t, New(stub, Options{}))
	tools, err := c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name != toolBuild {
			continue
		}
		raw, err := json.Marshal(tl)
		if err != nil {
			t.Fatal(err)
		}
		var tool struct {
			InputSchema struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			} `json:"inputSchema"`
		}
		if err := json.Unmarshal(raw, &tool); err != nil {
			t.Fatal(err)
		}
		schema := tool.InputSchema
		p, ok := schema.Properties["preset"]
		if !ok || !strings.Contains(p.Description, "data-science") {
			t.Errorf("preset: %+v, %v; want it, naming the configured presets", p, ok)
		}
		if _, ok := schema.Properties["template"]; ok {
			t.Errorf("the schema shows template: %s", raw)
		}
		return
	}
	t.Fatalf("no %s in tools/list", toolBuild)
}
