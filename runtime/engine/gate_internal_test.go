package engine

import (
	"context"
	"errors"
	"testing"
	"time"

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

func TestAdmit(t *testing.T) {
	cfg := profiles.Default()
	cfg.Execution.QueueTimeout = 0
	e := &Engine{cfg: cfg, slots: make(chan struct{}, 1), done: make(chan struct{})}
	ctx := context.Background()
	if err := e.admit(ctx); err != nil {
		t.Fatalf("a free slot: %v", err)
	}
	if err := e.admit(ctx); !errors.Is(err, ErrBusy) {
		t.Errorf("no slot, queue_timeout 0: got %v, want ErrBusy at once", err)
	}
	e.cfg.Execution.QueueTimeout = profiles.Duration(time.Hour)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.admit(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("no slot, caller gone: got %v, want context.Canceled", err)
	}
	// Close ends the wait of queued executions.
	errc := make(chan error, 1)
	go func() { errc <- e.admit(ctx) }()
	close(e.done)
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("no slot, engine closing: got %v, want ErrClosed", err)
	}
	<-e.slots
	if err := e.admit(ctx); err != nil {
		t.Errorf("a slot freed: %v", err)
	}
}
