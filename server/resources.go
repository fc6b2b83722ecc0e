package server

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/bridge"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/pool"
)

// Resource URIs.
const (
	uriEnvironmentInfo = "forge://environment/info"
	uriEnvironments    = "forge://environments/list"
	uriToolsAvailable  = "forge://tools/available"
)

func (s *Server) addResources() {
	s.mcp.AddResource(mcp.NewResource(uriEnvironmentInfo, "environment-info",
		mcp.WithResourceDescription("forge's version, the default image's Python version, the host's kernel features and the limits in force."),
		mcp.WithMIMEType("application/json")), s.jsonResource(s.environmentInfo))
	s.mcp.AddResource(mcp.NewResource(uriEnvironments, "environments",
		mcp.WithResourceDescription("Images present in forge's store (usable as custom_image when allowed) and your custom environments (build_custom_environment), with their Python version and packages, and the presets (named package lists) execute_python's environment can name."),
		mcp.WithMIMEType("application/json")), s.jsonResource(s.environments))
	s.mcp.AddResource(mcp.NewResource(uriToolsAvailable, "tools-available",
		mcp.WithResourceDescription("MCP tools that sandboxed code can call as Python functions (code mode): name, server, description, input schema, and the Python name."),
		mcp.WithMIMEType("application/json")), s.jsonResource(s.toolsAvailable))
}

// jsonResource serves the value f returns as one JSON text content.
func (s *Server) jsonResource(f func(context.Context) (any, error)) func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		v, err := f(ctx)
		if err != nil {
			return nil, err
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, err
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}, nil
	}
}

// EnvironmentInfo is the content of forge://environment/info.
type EnvironmentInfo struct {
	Forge         string       `json:"forge_version"`
	Arch          string       `json:"arch"`
	DefaultImage  ImageInfo    `json:"default_image"`
	DataImage     *ImageInfo   `json:"data_image,omitempty"`
	Limits        LimitsInfo   `json:"limits"`
	Network       string       `json:"network"`
	Sessions      string       `json:"sessions"`
	CodeMode      string       `json:"code_mode"`
	Pool          PoolInfo     `json:"pool"`
	KernelFeature any          `json:"kernel_features,omitempty"`
	Builder       BuilderInfo  `json:"environment_builder"`
	Server        ServerInfoJS `json:"server"`
}

// BuilderInfo says how custom environments are built.
type BuilderInfo struct {
	Enabled     bool     `json:"enabled"`
	Installer   string   `json:"installer"`
	Index       string   `json:"index"`
	Offline     bool     `json:"offline"`
	MaxPackages int      `json:"max_packages"`
	Timeout     string   `json:"build_timeout"`
	MaxSize     string   `json:"max_image_size"`
	RateLimit   string   `json:"rate_limit"`
	Presets     []string `json:"presets"`
}

// ImageInfo describes one image.
type ImageInfo struct {
	Name     string   `json:"name"`
	Present  bool     `json:"present"`
	Python   string   `json:"python_version,omitempty"`
	Packages []string `json:"packages,omitempty"`
	ID       string   `json:"id,omitempty"`
	Size     int64    `json:"size_bytes,omitempty"`
	Created  string   `json:"created,omitempty"`
	Allowed  bool     `json:"allowed"`
}

// LimitsInfo are the effective execution limits.
type LimitsInfo struct {
	DefaultTimeoutS float64  `json:"default_timeout_s"`
	MaxTimeoutS     float64  `json:"max_timeout_s"`
	DefaultMemory   string   `json:"default_memory"`
	MaxMemory       string   `json:"max_memory"`
	DefaultCPUs     float64  `json:"default_cpus"`
	MaxCPUs         float64  `json:"max_cpus"`
	MaxPids         int      `json:"max_pids"`
	MaxCodeSize     string   `json:"max_code_size"`
	OutputLimit     string   `json:"output_limit"`
	TmpSize         string   `json:"tmp_size"`
	AllowedImages   []string `json:"allowed_images"`
}

// PoolInfo describes the warm pools.
type PoolInfo struct {
	Enabled bool         `json:"enabled"`
	Size    int          `json:"size"`
	Pools   []pool.Stats `json:"pools"` // one per image used so far
}

// ServerInfoJS describes the MCP server itself.
type ServerInfoJS struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
}

func limitsInfo(cfg *profiles.Config) LimitsInfo {
	x := cfg.Execution
	return LimitsInfo{
		DefaultTimeoutS: x.DefaultTimeout.Seconds(), MaxTimeoutS: x.MaxTimeout.Seconds(),
		DefaultMemory: x.DefaultMemory.String(), MaxMemory: x.MaxMemory.String(),
		DefaultCPUs: x.DefaultCPUs, MaxCPUs: x.MaxCPUs, MaxPids: x.MaxPids,
		MaxCodeSize: x.MaxCodeSize.String(), OutputLimit: x.OutputLimit.String(), TmpSize: x.TmpSize.String(),
		AllowedImages: append([]string{}, cfg.Images.AllowedPatterns...),
	}
}

func (s *Server) environmentInfo(ctx context.Context) (any, error) {
	imgs, _ := s.images(ctx) // a store error leaves images "not present"
	info := EnvironmentInfo{
		Forge: s.opts.Version, Arch: runtime.GOARCH,
		DefaultImage: s.imageInfo(imgs, s.cfg.Images.Default),
		Limits:       limitsInfo(s.cfg),
		Network:      "none (loopback only)",
		Sessions:     fmt.Sprintf("available: at most %d live, idle timeout %s, persisted across restarts: %v", s.cfg.Sessions.MaxConcurrent, s.cfg.Sessions.IdleTimeout, s.cfg.Sessions.Persist),
		CodeMode:     s.codeModeStatus(),
		Pool:         PoolInfo{Enabled: s.cfg.Pool.Enabled, Size: s.cfg.Pool.Size},
		Server:       ServerInfoJS{Name: s.cfg.Server.Name, Transport: s.cfg.Server.Transport},
	}
	b := s.cfg.EnvironmentBuilder
	info.Builder = BuilderInfo{Enabled: b.Enabled, Installer: s.eng.Installer(), Index: b.IndexURL, Offline: b.Offline,
		MaxPackages: b.MaxPackages, Timeout: b.BuildTimeout.String(), MaxSize: b.MaxImageSize.String(), Presets: []string{}}
	if b.Offline {
		info.Builder.Index = "wheelhouse " + b.Wheelhouse
	}
	info.Builder.RateLimit = "unlimited"
	if b.BuildsPerPeriod > 0 {
		info.Builder.RateLimit = fmt.Sprintf("%d builds per %s", b.BuildsPerPeriod, b.RatePeriod)
	}
	for name := range b.Presets {
		info.Builder.Presets = append(info.Builder.Presets, name)
	}
	sort.Strings(info.Builder.Presets)
	if s.cfg.Images.Data != "" {
		d := s.imageInfo(imgs, s.cfg.Images.Data)
		info.DataImage = &d
	}
	info.Pool.Pools = append([]pool.Stats{}, s.eng.PoolStats()...)
	if s.opts.Host != nil {
		info.KernelFeature = s.opts.Host()
	}
	return info, nil
}

func (s *Server) images(ctx context.Context) ([]rootfs.Image, error) { return s.eng.Images(ctx) }

// imageInfo describes the image called name among imgs.
func (s *Server) imageInfo(imgs []rootfs.Image, name string) ImageInfo {
	info := ImageInfo{Name: name, Allowed: s.cfg.Images.Allowed(name)}
	for _, img := range imgs {
		for _, n := range img.Names {
			if n == name || strings.TrimPrefix(n, "localhost/") == name {
				return describeImage(img, name, info.Allowed)
			}
		}
	}
	return info
}

func describeImage(img rootfs.Image, name string, allowed bool) ImageInfo {
	info := ImageInfo{Name: name, Present: true, ID: img.ID, Size: img.Size, Allowed: allowed,
		Python: img.Labels["forge.python.version"]}
	if !img.Created.IsZero() {
		info.Created = img.Created.UTC().Format("2006-01-02T15:04:05Z")
	}
	if p := img.Labels["forge.packages"]; p != "" {
		info.Packages = strings.Split(p, ",")
	}
	return info
}

// EnvironmentList is the content of forge://environments/list.
type EnvironmentList struct {
	Default      string              `json:"default"`
	Data         string              `json:"data,omitempty"`
	Allowed      []string            `json:"allowed_patterns"`
	Images       []ImageInfo         `json:"images"`
	Environments []build.Environment `json:"environments"`
	Presets      []PresetInfo        `json:"presets"`
}

// PresetInfo describes one preset of environment_builder.presets.
type PresetInfo struct {
	Name        string   `json:"name"`
	Packages    []string `json:"packages"`
	Description string   `json:"description,omitempty"`
	Built       bool     `json:"built"`
}

func (s *Server) environments(ctx context.Context) (any, error) {
	imgs, err := s.images(ctx)
	if err != nil {
		return nil, err
	}
	p := s.principal(ctx)
	out := EnvironmentList{Default: s.cfg.Images.Default, Data: s.cfg.Images.Data,
		Allowed: append([]string{}, s.cfg.Images.AllowedPatterns...), Images: []ImageInfo{}, Presets: []PresetInfo{}}
	if out.Environments, err = s.eng.ListEnvironments(ctx, p); err != nil {
		return nil, err
	}
	if out.Environments == nil {
		out.Environments = []build.Environment{}
	}
	built := map[string]bool{}
	for _, e := range out.Environments {
		built[e.Name] = true
	}
	for name, t := range s.cfg.EnvironmentBuilder.Presets {
		out.Presets = append(out.Presets, PresetInfo{Name: name, Packages: t.Packages, Description: t.Description, Built: built[name]})
	}
	sort.Slice(out.Presets, func(i, j int) bool { return out.Presets[i].Name < out.Presets[j].Name })
	for _, img := range imgs {
		if owner, ok := img.Labels[build.LabelOwner]; ok && owner != p.Tenant {
			continue // another principal's environment: as if it were not there
		}
		names := img.Names
		if len(names) == 0 {
			names = []string{img.ID}
		}
		for _, n := range names {
			out.Images = append(out.Images, describeImage(img, n, s.cfg.Images.Allowed(n)))
		}
	}
	sort.Slice(out.Images, func(i, j int) bool { return out.Images[i].Name < out.Images[j].Name })
	return out, nil
}

// ToolsAvailable is the content of forge://tools/available.
type ToolsAvailable struct {
	Tools []bridge.Tool `json:"tools"`
	Note  string        `json:"note"`
}

func (s *Server) catalog() []bridge.Tool { return s.eng.ToolCatalog() }

func (s *Server) codeModeStatus() string {
	n := len(s.catalog())
	if n == 0 {
		return "no MCP servers configured (mcp_tools in the config)"
	}
	return fmt.Sprintf("%d tools available; pass their names in execute_python's mcp_tools", n)
}

func (s *Server) toolsAvailable(context.Context) (any, error) {
	tools := s.catalog()
	if tools == nil {
		return ToolsAvailable{Tools: []bridge.Tool{}, Note: "no MCP servers are configured (mcp_tools in forge's config)"}, nil
	}
	return ToolsAvailable{Tools: tools, Note: "pass tool names in execute_python's mcp_tools; inside the sandbox they are Python functions, also in the module mcp_tools (mcp_tools.search(\"query\"), help(fn))"}, nil
}
