// Package startgc keeps the garbage collector off while forge's packages
// initialize and `forge serve` answers its first request. The initializers
// of its dependencies (mcp-go's JSON Schema meta-schemas, image reference
// regexps) allocate just past the runtime's first 4 MB heap goal, and the
// collection that follows costs about a quarter of the process's start-up
// CPU, which a client waiting for initialize sees. It is imported by main
// only; its init runs early, as it depends on little (Go initializes
// packages in import-path order as their dependencies allow).
package startgc

import (
	"runtime/debug"
	"sync"
	"time"
)

// maxOff bounds how long the collector stays off whatever the caller does.
const maxOff = 250 * time.Millisecond

var (
	percent = debug.SetGCPercent(-1) // what GOGC asked for
	once    sync.Once
	_       = time.AfterFunc(maxOff, Restore)
)

// Restore turns the collector back on as GOGC set it; later calls do
// nothing.
func Restore() { once.Do(func() { debug.SetGCPercent(percent) }) }
