package hosted

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	pysdk "github.com/mcp-forge/forge/sdk/python"
)

// The sandbox sees the tools only as forge's own copy: a snapshot taken
// when the table is (re)loaded, world-readable (the sandbox user is an
// unprivileged host id) and immutable while calls use it. Nothing else of
// the directory the user named (siblings of a tools file, symlinks out of a
// package) reaches the sandbox.

// maxSnapshotFiles caps the entries of a package directory.
const maxSnapshotFiles = 4096

// writeSDK writes the embedded forge_tools sources under dir once per
// version; the result holds forge_tools/ at its root.
func writeSDK(dir string) (string, error) { return pysdk.Write(dir) }

// snapshot is one copy of the tools path.
type snapshot struct {
	dir    string // the directory mounted at /run/forge/tools
	module string // the module's path inside the sandbox
	hash   string // sha256 of names and contents
}

// takeSnapshot copies src (a .py file or a package directory with
// __init__.py) into a new directory under dir, at most maxBytes in all.
func takeSnapshot(src, dir string, maxBytes int64) (*snapshot, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSource, src, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (hosted_tools.path, forge serve --tools)", ErrSource, err)
	}
	base := filepath.Base(abs)
	switch {
	case st.IsDir():
		if _, err := os.Stat(filepath.Join(abs, "__init__.py")); err != nil {
			return nil, fmt.Errorf("%w: %s is a directory without __init__.py; pass a .py file or a package (hosted_tools.path)", ErrSource, abs)
		}
	case st.Mode().IsRegular() && strings.HasSuffix(base, ".py"):
	default:
		return nil, fmt.Errorf("%w: %s is neither a .py file nor a package directory (hosted_tools.path)", ErrSource, abs)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	out := filepath.Join(dir, fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(rb[:])))
	if err := os.Mkdir(out, 0o755); err != nil {
		return nil, err
	}
	c := copier{root: out, left: maxBytes, h: sha256.New()}
	if st.IsDir() {
		err = c.dir(abs, base)
	} else {
		err = c.file(abs, base, st)
	}
	if err != nil {
		os.RemoveAll(out)
		return nil, err
	}
	return &snapshot{dir: out, module: "/run/forge/tools/" + base, hash: hex.EncodeToString(c.h.Sum(nil))}, nil
}

type copier struct {
	root  string
	left  int64
	files int
	h     hash.Hash
}

func (c *copier) file(src, rel string, st fs.FileInfo) error {
	c.files++
	if c.files > maxSnapshotFiles {
		return fmt.Errorf("%w: more than %d files", ErrSource, maxSnapshotFiles)
	}
	if st.Size() > c.left {
		return fmt.Errorf("%w: the tools are larger than hosted_tools.max_source_size", ErrSource)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSource, err)
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(c.root, rel), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.h, "%s\x00", rel)
	n, err := io.Copy(io.MultiWriter(out, c.h), io.LimitReader(in, c.left+1))
	c.left -= n
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && c.left < 0 {
		err = fmt.Errorf("%w: the tools are larger than hosted_tools.max_source_size", ErrSource)
	}
	return err
}

// dir copies regular files and directories; symlinks and special files are
// skipped (they could point anywhere on the host), as are caches.
func (c *copier) dir(src, rel string) error {
	if err := os.Mkdir(filepath.Join(c.root, rel), 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSource, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		name := e.Name()
		if name == "__pycache__" || strings.HasPrefix(name, ".") {
			continue
		}
		p, r := filepath.Join(src, name), filepath.Join(rel, name)
		switch {
		case e.IsDir():
			if err := c.dir(p, r); err != nil {
				return err
			}
		case e.Type().IsRegular():
			st, err := e.Info()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrSource, err)
			}
			if err := c.file(p, r, st); err != nil {
				return err
			}
		}
	}
	return nil
}

// stamp is a cheap fingerprint of src for polling: names, sizes and
// modification times (the snapshot's hash decides whether a reload changed
// anything).
func stamp(src string) string {
	h := sha256.New()
	_ = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(h, "err %s\x00", p)
			return nil
		}
		if d.IsDir() && (d.Name() == "__pycache__" || (p != src && strings.HasPrefix(d.Name(), "."))) {
			return filepath.SkipDir
		}
		if info, err := d.Info(); err == nil {
			fmt.Fprintf(h, "%s\x00%d\x00%d\x00", p, info.Size(), info.ModTime().UnixNano())
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}
