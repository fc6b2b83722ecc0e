package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mcp-forge/forge/runtime/engine"
)

// TestRefusalsAreUsage: every refusal of the engine is exit code 2, also
// kinds the CLI has no sentinel for.
func TestRefusalsAreUsage(t *testing.T) {
	busy := fmt.Errorf("run: %w", &engine.RefusedError{Kind: engine.RefusedBusy, Err: errors.New("forge is busy; retry")})
	if !isUsage(busy) {
		t.Errorf("isUsage(%v) = false, want true", busy)
	}
	if err := errors.New("libcontainer exploded"); isUsage(err) {
		t.Errorf("isUsage(%v) = true, want false", err)
	}
}
