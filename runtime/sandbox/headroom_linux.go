package sandbox

import (
	"os"
	"path/filepath"
	"time"

	"github.com/mcp-forge/forge/cgroups"
)

// ParentHeadroom is how many more bytes the parent cgroup name (below
// /sys/fs/cgroup, Options.CgroupParent) may charge before it reaches its
// memory limit. ok is false when it has no limit or it cannot be read (a
// delegated rootless subtree): then nothing is known.
func ParentHeadroom(name string) (free int64, ok bool) {
	return parentCgroup{root: defaultCgroupRoot, name: name}.headroom()
}

func (p parentCgroup) headroom() (int64, bool) {
	limit, err1 := readInt(p.memoryFile())
	used, err2 := readInt(p.file("memory", "memory.usage_in_bytes", "memory.current"))
	// No limit: v2 says "max", v1 a page-rounded huge number.
	if err1 != nil || err2 != nil || limit >= 1<<60 {
		return 0, false
	}
	return limit - used, true
}

// ParentMemory is the memory charged to the parent cgroup name now (every
// sandbox below it together), for forge bench --density.
func ParentMemory(name string) (int64, error) {
	p := parentCgroup{root: defaultCgroupRoot, name: name}
	return readInt(p.file("memory", "memory.usage_in_bytes", "memory.current"))
}

// RemoveParent removes the parent cgroup name once no sandbox is below it
// (a private one, such as forge bench --density makes), in every hierarchy.
func RemoveParent(name string) {
	dirs := []string{filepath.Join(defaultCgroupRoot, name)}
	if !(parentCgroup{root: defaultCgroupRoot}).unified() {
		dirs, _ = filepath.Glob(filepath.Join(defaultCgroupRoot, "*", name))
	}
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

// ParentCPU is the CPU time every sandbox below the parent cgroup name has
// used so far, for forge bench --density.
func ParentCPU(name string) (time.Duration, error) {
	p := parentCgroup{root: defaultCgroupRoot, name: name}
	return cgroups.ReadCPUTime(p.file("cpuacct", "", ""), p.unified())
}
