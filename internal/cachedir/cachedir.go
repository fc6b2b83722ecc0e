// Package cachedir names forge's cache directory and where bootstrapped
// image layouts live in it, for the image store and the tests alike.
package cachedir

import (
	"os"
	"path/filepath"
	"strings"
)

// Dir is FORGE_CACHE_DIR, else $XDG_CACHE_HOME/forge, else ~/.cache/forge.
func Dir() string {
	if d := os.Getenv("FORGE_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "forge")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "forge")
}

// Layout is where the OCI layout of the bootstrapped image name is cached:
// <dir>/images/<name with '/' and ':' replaced by '_'>.
func Layout(dir, name string) string {
	return filepath.Join(dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(name))
}
