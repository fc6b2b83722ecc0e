package profiles

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAllowed(t *testing.T) {
	tests := []struct {
		patterns []string
		ref      string
		want     bool
	}{
		{[]string{"forge/*"}, "forge/python:3.11", true},
		{[]string{"forge/*"}, "forge/python", true},
		{[]string{"forge/*"}, "forge/python@sha256:abc", true},
		{[]string{"forge/*"}, "forge/a/b:1", false}, // * does not cross /
		{[]string{"forge/*"}, "evil/forge/python", false},
		{[]string{"forge/*"}, "forgery/python", false},
		{[]string{"forge/custom:*"}, "forge/custom:v1", true},
		{[]string{"forge/custom:*"}, "forge/custom", false},
		{[]string{"forge/custom:*"}, "forge/customer:v1", false},
		{[]string{"forge/python:3.11"}, "forge/python:3.11", true},
		{[]string{"forge/python:3.11"}, "forge/python:3.12", false},
		{[]string{"forge/python:3.1?"}, "forge/python:3.12", true},
		{[]string{"[", "forge/*"}, "forge/x", true}, // a bad pattern never matches, others still do
		{[]string{"*"}, "", false},
		{nil, "forge/python:3.11", false},
	}
	for _, tt := range tests {
		c := ImagesConfig{AllowedPatterns: tt.patterns}
		if got := c.Allowed(tt.ref); got != tt.want {
			t.Errorf("Allowed(%q) with %q: got %v, want %v", tt.ref, tt.patterns, got, tt.want)
		}
	}
}

func TestPackageAllowed(t *testing.T) {
	b := EnvironmentBuilderConfig{AllowedPackages: []string{"numpy", "scikit-*"}}
	for pkg, want := range map[string]bool{"numpy": true, "scikit-learn": true, "requests": false, "": false} {
		if got := b.PackageAllowed(pkg); got != want {
			t.Errorf("PackageAllowed(%q): got %v, want %v", pkg, got, want)
		}
	}
}

func TestProfile(t *testing.T) {
	c := Default()
	c.Profiles["tight"] = Profile{Memory: 128 << 20, Pids: 16, Seccomp: "/etc/forge/strict.json"}
	def := Profile{Memory: 512 << 20, CPUs: 1, Pids: 128, Timeout: Duration(30 * time.Second), TmpSize: 64 << 20, Seccomp: "default", Egress: []string{"none"}}
	tests := []struct {
		name string
		want Profile
		err  error
	}{
		{"", def, nil},
		{"default", def, nil},
		{"tight", Profile{Memory: 128 << 20, CPUs: 1, Pids: 16, Timeout: Duration(30 * time.Second), TmpSize: 64 << 20, Seccomp: "/etc/forge/strict.json", Egress: []string{"none"}}, nil},
		{"nope", Profile{}, ErrUnknownProfile},
	}
	for _, tt := range tests {
		got, err := c.Profile(tt.name)
		if !errors.Is(err, tt.err) {
			t.Errorf("Profile(%q) error: got %v, want %v", tt.name, err, tt.err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Profile(%q) (-want +got):\n%s", tt.name, diff)
		}
	}
	if diff := cmp.Diff([]string{"default", "tight"}, c.ProfileNames()); diff != "" {
		t.Errorf("ProfileNames (-want +got):\n%s", diff)
	}
}

func TestAuditLogPath(t *testing.T) {
	c := Default()
	if got := c.AuditLogPath(); got != "" {
		t.Errorf("no state dir: got %v, want %v", got, "")
	}
	c.StateDir = "/var/lib/forge"
	if got, want := c.AuditLogPath(), "/var/lib/forge/audit.log"; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
	c.Security.AuditLog = "/var/log/forge.log"
	if got, want := c.AuditLogPath(), "/var/log/forge.log"; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}
