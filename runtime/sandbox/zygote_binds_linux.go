package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcp-forge/forge/runtime/idmap"
)

// Binds templates: a sandbox whose Config.TemplateBinds is set (a hosted
// tools call) is forked from a template whose container has the binds
// mounted read-only under /run/forge, so its child sees them at once,
// without a container start. The binds' sources are part of the template's
// key: a template forks only children of one tools snapshot (and tenant),
// and a new snapshot gets a new template (RetireBinds retires the old one).
// Nothing of the tools module runs in the template: the child imports it,
// as a sandbox, after every step of its fork (docs/zygote.md, "Per-tenant and hosted-tools templates").

// MaxDerivedBindsTemplates caps the derived bound of binds templates
// (bindsBound): each holds a Python (about a sandbox's memory), idle or not.
const MaxDerivedBindsTemplates = 8

// bindsBound is how many keys of binds templates may fork at once:
// ZygoteOptions.BindsTemplates, or derived so that their host ids (Slots+1
// blocks each) take at most an eighth of the range, within 1 and
// MaxDerivedBindsTemplates.
func (r *Runtime) bindsBound() int {
	if n := r.zopts.BindsTemplates; n > 0 {
		return n
	}
	return BindsTemplatesFor(r.ids.Reserved(), r.ids.BlockSize(), min(r.zopts.Slots, BindsZygoteSlots))
}

// BindsTemplatesFor is the derived bound of binds templates for host ids
// ids in blocks of block, with slots per binds template (forge doctor prints it).
func BindsTemplatesFor(ids idmap.Range, block uint32, slots int) int {
	if block == 0 {
		return 1
	}
	blocks := int(ids.Size / block)
	return min(MaxDerivedBindsTemplates, max(1, blocks/(slots+1)/8))
}

// bindsKey is the part of a template's key that names cfg's binds: "" for
// a sandbox that is not forked from a binds template.
func bindsKey(cfg *Config) string {
	if !cfg.TemplateBinds || len(cfg.Binds) == 0 {
		return ""
	}
	parts := make([]string, len(cfg.Binds))
	for i, b := range cfg.Binds {
		parts[i] = b.Name + "=" + b.Source
	}
	return strings.Join(parts, "\x00") + "\x00warm=" + strings.Join(cfg.TemplateWarm, ",")
}

// templateBinds makes t's directory of mount points (the rootfs is read-only
// and shared) and returns the spec options that mount it at /run/forge,
// read-only, and cfg's binds over it.
func (r *Runtime) templateBinds(t *template, cfg *Config) ([]SpecOpt, error) {
	dir := filepath.Join(filepath.Dir(r.root), "zbinds", t.id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("mount points of zygote template %s: %w", t.id, err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		return nil, fmt.Errorf("mount points of zygote template %s: %w", t.id, err)
	}
	t.bridgeDir = dir
	c := Config{BridgeDir: dir, Binds: cfg.Binds}
	binds, err := bindOpts(&c)
	if err != nil {
		return nil, fmt.Errorf("zygote template %s: %w", t.id, err)
	}
	return append([]SpecOpt{WithReadOnlyBind(dir, BridgeMountPoint)}, binds...), nil
}

// RetireBinds retires every template that has source mounted (a tools
// snapshot that was replaced or removed): it forks no more, and goes once
// its last child has.
func (r *Runtime) RetireBinds(source string) {
	r.tmu.Lock()
	var old []*template
	for _, t := range r.templates {
		if t.key.binds != "" && slices.ContainsFunc(strings.Split(t.key.binds, "\x00"), func(p string) bool {
			name, src, _ := strings.Cut(p, "=")
			return name != "warm" && src == source
		}) {
			old = append(old, t)
		}
	}
	r.tmu.Unlock()
	for _, t := range old {
		t.retire()
	}
}

// evictBindsTemplates makes room for a template of key when it is a binds
// one: past ZygoteOptions.BindsTemplates keys with forking templates (key's
// own counted, whether it has one yet or not), the least recently used
// other keys' are retired. It runs before a template of key starts (to free
// its ids first) and after (starts of other keys may have overlapped).
func (r *Runtime) evictBindsTemplates(key templateKey) {
	if key.binds == "" {
		return
	}
	r.tmu.Lock()
	last := map[templateKey]int64{}
	for _, t := range r.templates {
		if t.key.binds != "" && t.key != key {
			last[t.key] = max(last[t.key], t.lastTake.Load())
		}
	}
	var victims []*template
	for len(last) >= r.bindsBound() {
		var lru templateKey
		first := true
		for k, at := range last {
			if first || at < last[lru] {
				lru, first = k, false
			}
		}
		delete(last, lru)
		for _, t := range r.templates {
			if t.key == lru {
				victims = append(victims, t)
			}
		}
	}
	r.tmu.Unlock()
	for _, t := range victims {
		r.log.Debug("zygote template retired to make room for another binds template", "template", t.id)
		t.retire()
	}
}

// bindsTemplatesLocked counts the keys of binds templates forking now
// (ZygoteStats); r.tmu is held.
func (r *Runtime) bindsTemplatesLocked() int {
	keys := map[templateKey]bool{}
	for _, t := range r.templates {
		if t.key.binds != "" {
			keys[t.key] = true
		}
	}
	return len(keys)
}
