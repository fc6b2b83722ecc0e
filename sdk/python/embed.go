// Package pysdk carries the sources of the forge_tools Python package, so
// that forge can mount them read-only into the sandboxes that import a
// hosted tools module (the module is never imported on the host).
package pysdk

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

//go:embed forge_tools/*.py forge_tools/py.typed
var files embed.FS

// FS holds forge_tools/*.py (the package directory at its root).
func FS() fs.FS { return files }

// Hash identifies these sources: a directory written from them can be
// reused while the hash is the same.
func Hash() string {
	h := sha256.New()
	var names []string
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	sort.Strings(names)
	for _, n := range names {
		b, _ := files.ReadFile(n)
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Write writes the sources under dir once per version (dir/sdk-HASH, with
// forge_tools/ at its root, world-readable for sandbox users) and returns
// that directory.
func Write(dir string) (string, error) {
	out := filepath.Join(dir, "sdk-"+Hash())
	if _, err := os.Stat(filepath.Join(out, "forge_tools", "__init__.py")); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, ".sdk-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	err = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(tmp, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err == nil {
		err = os.Chmod(tmp, 0o755)
	}
	if err != nil {
		return "", fmt.Errorf("writing the forge_tools sources: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		if _, serr := os.Stat(filepath.Join(out, "forge_tools", "__init__.py")); serr != nil {
			return "", fmt.Errorf("writing the forge_tools sources: %w", err)
		}
	}
	return out, nil
}
