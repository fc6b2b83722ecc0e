package cgroups

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	ocg "github.com/opencontainers/cgroups"
)

// Usage is what a sandbox consumed, read from its cgroup.
type Usage struct {
	MemoryPeakBytes uint64        `json:"memory_peak_bytes"`
	CPUTime         time.Duration `json:"cpu_time"`
	OOMKills        uint64        `json:"oom_kills"`
}

// ReadUsage reads m's peak memory, CPU time and OOM kill count. On v1 the
// OOM count needs kernel 4.13 (oom_kill in memory.oom_control); on v2 the
// peak needs 5.19 (memory.peak), else it is the current usage.
func ReadUsage(m ocg.Manager) (Usage, error) {
	if ocg.IsCgroup2UnifiedMode() {
		return readUsageV2(m.Path(""))
	}
	return readUsageV1(m.Path("memory"), m.Path("cpuacct"))
}

// ReadMemoryCurrent reads m's current memory use (one file; Stats reads every
// controller's).
func ReadMemoryCurrent(m ocg.Manager) (uint64, error) {
	if ocg.IsCgroup2UnifiedMode() {
		return readUint(m.Path(""), "memory.current")
	}
	dir := m.Path("memory")
	if dir == "" {
		return 0, errors.New("reading cgroup v1 memory: no memory cgroup path")
	}
	return readUint(dir, "memory.usage_in_bytes")
}

func readUsageV1(memDir, cpuDir string) (Usage, error) {
	if memDir == "" || cpuDir == "" {
		return Usage{}, errors.New("reading cgroup v1 usage: no memory or cpuacct cgroup path")
	}
	var u Usage
	var err error
	if u.MemoryPeakBytes, err = readUint(memDir, "memory.max_usage_in_bytes"); err != nil {
		return Usage{}, fmt.Errorf("reading peak memory: %w", err)
	}
	if u.OOMKills, err = readKey(memDir, "memory.oom_control", "oom_kill"); err != nil {
		return Usage{}, fmt.Errorf("reading OOM kills: %w", err)
	}
	if u.CPUTime, err = ReadCPUTime(cpuDir, false); err != nil {
		return Usage{}, fmt.Errorf("reading CPU time: %w", err)
	}
	return u, nil
}

func readUsageV2(dir string) (Usage, error) {
	if dir == "" {
		return Usage{}, errors.New("reading cgroup v2 usage: no cgroup path")
	}
	var u Usage
	var err error
	u.MemoryPeakBytes, err = readUint(dir, "memory.peak")
	if errors.Is(err, os.ErrNotExist) {
		u.MemoryPeakBytes, err = readUint(dir, "memory.current")
	}
	if err != nil {
		return Usage{}, fmt.Errorf("reading peak memory: %w", err)
	}
	if u.OOMKills, err = readKey(dir, "memory.events", "oom_kill"); err != nil {
		return Usage{}, fmt.Errorf("reading OOM kills: %w", err)
	}
	if u.CPUTime, err = ReadCPUTime(dir, true); err != nil {
		return Usage{}, fmt.Errorf("reading CPU time: %w", err)
	}
	return u, nil
}

// ReadCPUTime reads the CPU time every process of the cgroup at dir has
// used: cpuacct.usage of a v1 cpuacct directory, cpu.stat's usage_usec of a
// v2 one.
func ReadCPUTime(dir string, v2 bool) (time.Duration, error) {
	if v2 {
		usec, err := readKey(dir, "cpu.stat", "usage_usec")
		return time.Duration(usec) * time.Microsecond, err
	}
	ns, err := readUint(dir, "cpuacct.usage")
	return time.Duration(ns), err
}

// Version is the cgroup version libcontainer will use here: 2 on a unified
// hierarchy; 1 when a v1 memory hierarchy is mounted (hybrid hosts too).
func Version() (int, error) {
	if ocg.IsCgroup2UnifiedMode() {
		return 2, nil
	}
	if _, err := ocg.FindCgroupMountpoint("", "memory"); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoMemoryController, err)
	}
	return 1, nil
}

// Controllers lists the controllers usable for sandboxes, sorted: on v2 the
// root's cgroup.controllers (plus devices and freezer, which v2 has
// without listing them), on v1 the enabled controllers that are mounted.
func Controllers() ([]string, error) {
	if ocg.IsCgroup2UnifiedMode() {
		all, err := ocg.GetAllSubsystems()
		if err != nil {
			return nil, fmt.Errorf("listing cgroup v2 controllers: %w", err)
		}
		slices.Sort(all)
		return slices.Compact(all), nil
	}
	mounts, err := ocg.GetCgroupMounts(false)
	if err != nil {
		return nil, fmt.Errorf("listing cgroup v1 mounts: %w", err)
	}
	enabled, err := ocg.GetAllSubsystems()
	if err != nil {
		return nil, fmt.Errorf("listing cgroup v1 controllers: %w", err)
	}
	var out []string
	for _, m := range mounts {
		for _, s := range m.Subsystems {
			// Named hierarchies such as name=systemd are no controllers.
			if slices.Contains(enabled, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ReadPidsLimitHits reads how often m refused a fork or a thread because
// pids.max was reached (the "max" line of pids.events, in both versions).
func ReadPidsLimitHits(m ocg.Manager) (uint64, error) {
	dir := m.Path("pids")
	if ocg.IsCgroup2UnifiedMode() {
		dir = m.Path("")
	}
	return readPidsLimitHits(dir)
}

func readPidsLimitHits(dir string) (uint64, error) {
	if dir == "" {
		return 0, errors.New("reading pids events: no pids cgroup path")
	}
	n, err := readKey(dir, "pids.events", "max")
	if err != nil {
		return 0, fmt.Errorf("reading pids events: %w", err)
	}
	return n, nil
}
