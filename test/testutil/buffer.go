package testutil

import (
	"bytes"
	"sync"
)

// LogBuffer is a log or output destination that goroutines (a logger's,
// exec's copy of a child's stderr) write to while the test reads it. It
// keeps at most Max bytes (0: all); later writes are dropped.
type LogBuffer struct {
	Max int
	mu  sync.Mutex
	b   bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Max > 0 && l.b.Len() > l.Max {
		return len(p), nil
	}
	return l.b.Write(p)
}

// String is what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
