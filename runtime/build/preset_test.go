package build

import (
	"testing"

	"github.com/mcp-forge/forge/rootfs"
)

// An environment records its preset in LabelPreset; one built before
// presets were named so has it in forge.env.template, which still reads as
// its preset.
func TestPresetLabel(t *testing.T) {
	e := Environment{Name: "plots", Owner: localPrincipal, Preset: "data-science"}
	l := e.labels()
	if l[LabelPreset] != "data-science" || l[labelTemplate] != "" {
		t.Fatalf("labels %v: want %s=data-science and no %s", l, LabelPreset, labelTemplate)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"new label", l},
		{"old label", map[string]string{LabelOwner: localPrincipal, labelTemplate: "data-science"}},
	} {
		got, ok := fromImage(rootfs.Image{Labels: tc.labels}, Repo+":plots")
		if !ok || got.Preset != "data-science" {
			t.Errorf("%s: got %+v, %v; want preset data-science", tc.name, got, ok)
		}
	}
}
