package startgc

import (
	"runtime/debug"
	"testing"
)

// Restore gives the collector back the GOGC it started with (100 unless the
// environment says otherwise), and later calls change nothing.
func TestRestore(t *testing.T) {
	if percent == -1 {
		t.Fatalf("startgc read GOGC as off; run the test without GOGC=off")
	}
	Restore()
	got := debug.SetGCPercent(percent)
	if got != percent {
		t.Errorf("got GC percent %d after Restore, want %d", got, percent)
	}
	debug.SetGCPercent(-1)
	Restore() // a second call must not touch it
	if got := debug.SetGCPercent(percent); got != -1 {
		t.Errorf("a second Restore set the GC percent to %d", got)
	}
}
