package cgroups

import (
	ocg "github.com/opencontainers/cgroups"
)

// Resources returns l as libcontainer cgroup resources, for container.Set
// when a pooled sandbox is handed out. See ApplyTo to keep other fields.
func (l Limits) Resources() *ocg.Resources {
	r := &ocg.Resources{}
	l.ApplyTo(r)
	return r
}

// ApplyTo sets l's non-zero limits (memory, memory+swap, CPU quota and
// period, pids) on r and leaves r's other fields, devices included, alone.
func (l Limits) ApplyTo(r *ocg.Resources) {
	if l.MemoryBytes > 0 {
		r.Memory, r.MemorySwap = l.MemoryBytes, l.MemoryBytes
	}
	if l.CPUs > 0 {
		r.CpuQuota, r.CpuPeriod = l.cpuQuota(), CPUPeriod
	}
	if l.Pids > 0 {
		pids := l.Pids
		r.PidsLimit = &pids
	}
}
