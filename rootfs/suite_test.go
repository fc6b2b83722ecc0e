package rootfs

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestSuites(t *testing.T) {
	for _, tc := range []struct {
		suite string
		data  bool
		want  string
	}{
		{"bookworm", false, DefaultImage},
		{"bookworm", true, "forge/python-data:3.11"},
		{"trixie", false, "forge/python:3.13"},
		{DataSuite, true, DefaultDataImage},
	} {
		if got := DefaultName(tc.suite, tc.data); got != tc.want {
			t.Errorf("DefaultName(%s, %v) = %s, want %s", tc.suite, tc.data, got, tc.want)
		}
	}
	if o := (BootstrapOptions{Suite: "trixie", CacheDir: t.TempDir()}).withDefaults(); o.Name != "forge/python:3.13" {
		t.Errorf("trixie defaults to %s", o.Name)
	}
	_, err := Bootstrap(context.Background(), BootstrapOptions{Suite: "sid", CacheDir: t.TempDir()})
	if !errors.Is(err, ErrUnknownSuite) || !strings.Contains(err.Error(), "trixie (Python 3.13)") {
		t.Fatalf("unknown suite: %v", err)
	}
}
