package build_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/engine"
)

// TestMaxImageSize: a layer over environment_builder.max_image_size is
// refused (the request's to change: a tool error, exit 2) and nothing of
// the build stays.
func TestMaxImageSize(t *testing.T) {
	ctx := context.Background()
	eng := offlineEngine(t, strings.Repeat("x", 64<<10), func(b *profiles.EnvironmentBuilderConfig) {
		b.MaxImageSize = 16 << 10
	})
	name := uniqueName("t-big")
	_, err := eng.BuildEnvironment(ctx, local, build.Request{Name: name, Packages: []string{"forgetestpkg"}})
	if !errors.Is(err, build.ErrTooLarge) || !errors.As(err, new(*engine.RefusedError)) || !strings.Contains(err.Error(), "environment_builder.max_image_size") {
		t.Fatalf("got %v, want a refusal naming environment_builder.max_image_size", err)
	}
	nothingLeft(t, eng)
	if _, err := eng.Environment(ctx, local, name); !errors.Is(err, build.ErrNotFound) {
		t.Errorf("the oversized build left an environment: %v", err)
	}
}
