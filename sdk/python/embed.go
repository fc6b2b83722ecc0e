// Package pysdk carries the sources of the forge_tools Python package, so
// that forge can mount them read-only into the sandboxes that import a
// hosted tools module (the module is never imported on the host).
package pysdk

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
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
