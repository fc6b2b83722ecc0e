// Package cgroups turns forge's resource limits ("512m", "0.5" CPUs, a pids
// count) into runtime-spec and libcontainer cgroup settings, checks requests
// against a profile's maxima, and reads usage (peak memory, CPU time, OOM
// kills) back from a sandbox's cgroup, on cgroup v1 and v2.
package cgroups

import (
	"math"
	"strconv"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// MinMemoryBytes is the smallest memory limit Validate accepts: below it
// Python and forge's agent cannot start, so the sandbox would only OOM.
const MinMemoryBytes = 4 << 20

// MaxPids bounds pids limits at the kernel's largest pid_max.
const MaxPids = 1 << 22

// Limits are a sandbox's cgroup limits, or a profile's maxima. Zero means
// "unset", which only a request passed to Tighten may contain.
type Limits struct {
	MemoryBytes int64   `json:"memory_bytes"`
	CPUs        float64 `json:"cpus"`
	Pids        int64   `json:"pids"`
}

// Validate checks that every limit is set and in range: a sandbox always
// has memory, CPU and pids limits.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < MinMemoryBytes:
		return &LimitError{Field: "memory", Value: FormatMemory(l.MemoryBytes), Reason: "below the minimum " + FormatMemory(MinMemoryBytes)}
	case math.IsNaN(l.CPUs) || l.CPUs < MinCPUs || l.CPUs > MaxCPUs:
		return &LimitError{Field: "cpus", Value: FormatCPUs(l.CPUs), Reason: "outside " + FormatCPUs(MinCPUs) + "-" + FormatCPUs(MaxCPUs)}
	case l.Pids < 1 || l.Pids > MaxPids:
		return &LimitError{Field: "pids", Value: strconv.FormatInt(l.Pids, 10), Reason: "outside 1-" + strconv.Itoa(MaxPids)}
	}
	return nil
}

// Tighten returns l with the request's non-zero fields, which may only
// lower l's: untrusted input never loosens a profile.
func (l Limits) Tighten(req Limits) (Limits, error) {
	if err := l.Validate(); err != nil {
		return Limits{}, err
	}
	out := l
	if req.MemoryBytes != 0 {
		if req.MemoryBytes > l.MemoryBytes {
			return Limits{}, &LimitError{Field: "memory", Value: FormatMemory(req.MemoryBytes), Max: FormatMemory(l.MemoryBytes)}
		}
		out.MemoryBytes = req.MemoryBytes
	}
	if req.CPUs != 0 {
		if req.CPUs > l.CPUs {
			return Limits{}, &LimitError{Field: "cpus", Value: FormatCPUs(req.CPUs), Max: FormatCPUs(l.CPUs)}
		}
		out.CPUs = req.CPUs
	}
	if req.Pids != 0 {
		if req.Pids > l.Pids {
			return Limits{}, &LimitError{Field: "pids", Value: strconv.FormatInt(req.Pids, 10), Max: strconv.FormatInt(l.Pids, 10)}
		}
		out.Pids = req.Pids
	}
	// Catches negative, NaN and too-small requests.
	if err := out.Validate(); err != nil {
		return Limits{}, err
	}
	return out, nil
}

// cpuQuota is the CFS quota in µs per CPUPeriod.
func (l Limits) cpuQuota() int64 { return int64(math.Round(l.CPUs * CPUPeriod)) }

// Spec returns l as runtime-spec resources. Swap is limited to the memory
// limit (memory+swap in v1 terms), so a sandbox never swaps. Zero fields
// are left out.
func (l Limits) Spec() *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		limit, swap := l.MemoryBytes, l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &swap}
	}
	if l.CPUs > 0 {
		quota, period := l.cpuQuota(), uint64(CPUPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if l.Pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: &l.Pids}
	}
	return r
}
