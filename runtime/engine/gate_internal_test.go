package engine

import (
	"context"
	"testing"

	"github.com/mcp-forge/forge/profiles"
)

// The execution gate is on every request's path. BenchmarkGate/admit is its
// cost when a slot is free; BenchmarkGate/enter, the closed check and
// in-flight count every execution already paid, is the baseline to compare
// it with in the same run (a warm execution costs about 2-3 ms).
func BenchmarkGate(b *testing.B) {
	e := &Engine{cfg: profiles.Default(), slots: make(chan struct{}, 8), done: make(chan struct{})}
	ctx := context.Background()
	b.Run("enter", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := e.enter(); err != nil {
					b.Fatal(err)
				}
				e.inflight.Add(-1)
			}
		})
	})
	b.Run("admit", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := e.admit(ctx); err != nil {
					b.Fatal(err)
				}
				<-e.slots
			}
		})
	})
}
