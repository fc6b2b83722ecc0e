package build

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-forge/forge/internal/lazyre"
	"github.com/mcp-forge/forge/rootfs"
)

// Labels of an environment's image. Images without LabelOwner are not
// environments.
const (
	LabelName        = "forge.env.name"
	LabelOwner       = "forge.env.owner"
	LabelDescription = "forge.env.description"
	LabelPreset      = "forge.env.preset"
	LabelBase        = "forge.env.base"
	LabelBaseDigest  = "forge.env.base_digest"
	LabelPython      = "forge.env.python"
	LabelRequested   = "forge.env.requested" // JSON list of normalized requirements
	LabelInstalled   = "forge.env.installed" // JSON list of {name, version}
	LabelHash        = "forge.env.hash"
	LabelBuilt       = "forge.env.built" // RFC 3339
	LabelScan        = "forge.env.scan"
	LabelInstaller   = "forge.env.installer"
)

// labelTemplate is LabelPreset of images built before presets were named
// so (environment_builder.templates): read, never written.
const labelTemplate = "forge.env.template"

// Repo is the image repository of the local principal's environments:
// forge/custom:NAME. Other principals get forge/custom-<8 hex>:NAME, so two
// of them can use one name and neither can guess the other's image.
const Repo = "forge/custom"

// localPrincipal is engine.LocalPrincipal's tenant (the engine imports
// this package, not the other way round).
const localPrincipal = "local"

// ImageName is the image of principal's environment name.
func ImageName(principal, name string) string {
	return repoOf(principal) + ":" + name
}

func repoOf(principal string) string {
	if principal == localPrincipal {
		return Repo
	}
	return Repo + "-" + principalKey(principal)
}

// principalKey names a principal in paths and image names: "local", or 8
// hex digits of a hash of its name (which may hold any printable
// character).
func principalKey(principal string) string {
	if principal == localPrincipal {
		return localPrincipal
	}
	h := sha256.Sum256([]byte(principal))
	return hex.EncodeToString(h[:4])
}

var nameRE = lazyre.New(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// ValidName checks an environment name: letters, digits and hyphens, at
// most 63 characters (an image tag, and a DNS label).
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: environment name %q: use letters, digits and hyphens (not first or last), at most 63 characters", ErrInvalid, clip(name, 80))
	}
	return nil
}

// Package is one installed distribution.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Environment is a built custom environment.
type Environment struct {
	Name        string    `json:"name"`
	Image       string    `json:"image"`
	ID          string    `json:"id"`
	Description string    `json:"description,omitempty"`
	Preset      string    `json:"preset,omitempty"`
	BaseImage   string    `json:"base_image"`
	BaseDigest  string    `json:"base_digest"`
	Python      string    `json:"python"`
	Requested   []string  `json:"requested"`
	Installed   []Package `json:"installed"`
	Hash        string    `json:"hash"`
	Built       time.Time `json:"built"`
	LastUsed    time.Time `json:"last_used"`
	Size        int64     `json:"size"`       // the whole image
	LayerSize   int64     `json:"layer_size"` // what the build added to its base
	Scan        string    `json:"scan"`
	Installer   string    `json:"installer"`
	// Approved are the packages a person approved for this build
	// (environment_builder.approval: elicit).
	Approved []string `json:"approved,omitempty"`
	Owner    string   `json:"-"`
}

// fromImage reads an environment from its image's labels; ok is false for
// images that are not environments or not under the name's repository.
func fromImage(img rootfs.Image, imageName string) (Environment, bool) {
	l := img.Labels
	owner, ok := l[LabelOwner]
	if !ok {
		return Environment{}, false
	}
	repo, name, ok := strings.Cut(imageName, ":")
	if !ok || repo != repoOf(owner) {
		return Environment{}, false
	}
	e := Environment{
		Name: name, Image: imageName, ID: img.ID, Owner: owner, Size: img.Size, LayerSize: img.LayerSize,
		Description: l[LabelDescription], Preset: cmp.Or(l[LabelPreset], l[labelTemplate]), BaseImage: l[LabelBase],
		BaseDigest: l[LabelBaseDigest], Python: l[LabelPython], Hash: l[LabelHash], Scan: l[LabelScan],
		Installer: l[LabelInstaller], Requested: []string{}, Installed: []Package{},
	}
	json.Unmarshal([]byte(l[LabelRequested]), &e.Requested)
	json.Unmarshal([]byte(l[LabelInstalled]), &e.Installed)
	json.Unmarshal([]byte(l[approvedLabel]), &e.Approved)
	e.Built, _ = time.Parse(time.RFC3339, l[LabelBuilt])
	return e, true
}

// labels are the image labels of an environment about to be committed.
func (e *Environment) labels() map[string]string {
	req, _ := json.Marshal(e.Requested)
	inst, _ := json.Marshal(e.Installed)
	l := map[string]string{
		LabelName: e.Name, LabelOwner: e.Owner, LabelBase: e.BaseImage, LabelBaseDigest: e.BaseDigest,
		LabelPython: e.Python, LabelRequested: string(req), LabelInstalled: string(inst), LabelHash: e.Hash,
		LabelBuilt: e.Built.UTC().Format(time.RFC3339), LabelScan: e.Scan, LabelInstaller: e.Installer,
	}
	if e.Description != "" {
		l[LabelDescription] = e.Description
	}
	if e.Preset != "" {
		l[LabelPreset] = e.Preset
	}
	if len(e.Approved) > 0 {
		a, _ := json.Marshal(e.Approved)
		l[approvedLabel] = string(a)
	}
	return l
}

// maxInstalled bounds the installed list read back from a build sandbox.
const (
	maxInstalled   = 5000
	maxPackageName = 200
	maxVersion     = 100
)

var (
	distNameRE = lazyre.New(`^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	versionRE  = lazyre.New(`^[A-Za-z0-9.+!_-]+$`)
)

// parseInstalled decodes `uv pip list --format json` (or pip's) from the
// sandbox: untrusted, so bounded and checked entry by entry.
func parseInstalled(out string) ([]Package, error) {
	var raw []struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &raw); err != nil {
		return nil, fmt.Errorf("reading the installed packages: %w", err)
	}
	if len(raw) > maxInstalled {
		return nil, fmt.Errorf("reading the installed packages: %d entries, more than %d", len(raw), maxInstalled)
	}
	pkgs := make([]Package, 0, len(raw))
	for _, p := range raw {
		if len(p.Name) > maxPackageName || !distNameRE.MatchString(p.Name) ||
			len(p.Version) > maxVersion || !versionRE.MatchString(p.Version) {
			return nil, fmt.Errorf("reading the installed packages: malformed entry %q %q", clip(p.Name, 60), clip(p.Version, 40))
		}
		pkgs = append(pkgs, Package{Name: p.Name, Version: p.Version})
	}
	return pkgs, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
