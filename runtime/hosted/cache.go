package hosted

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	pysdk "github.com/mcp-forge/forge/sdk/python"
)

// The table cache lets a restart list the tools at once: reading the table
// costs a sandbox that imports the module (about 1.5 s with 50 tools on a
// loaded machine), before the first tools/list. The table forge last read
// for a tools path is kept under <state_dir>/hosted/tables, one file per
// path, with the key it was read under: a hash of the snapshot's contents,
// the image's ID, the forge_tools version and the limits it was checked
// against. At start a file with the current key is parsed and checked like
// a table fresh from a sandbox (it holds a sandbox's bytes), served, and
// read again in a sandbox in the background; a different table replaces it
// and is announced (notifications/tools/list_changed).

// cachedTable is one file of the cache.
type cachedTable struct {
	Key   string          `json:"key"`
	Table json.RawMessage `json:"table"`
}

// tableKey identifies what a table depends on; "" when the image cannot be
// looked up (no caching then).
func (h *Host) tableKey(imageID string, snap *snapshot) string {
	if imageID == "" {
		return ""
	}
	k := sha256.New()
	fmt.Fprintf(k, "table-v1\x00%s\x00%s\x00%s\x00%d\x00%d\x00%d\x00", snap.hash, imageID, pysdk.Hash(),
		h.cfg.MaxTools, h.cfg.MaxSchemaSize, h.cfg.MaxTableSize)
	return hex.EncodeToString(k.Sum(nil))
}

// cacheFile is the cache file of the tools path.
func (h *Host) cacheFile() string {
	abs, err := filepath.Abs(h.cfg.Path)
	if err != nil {
		abs = h.cfg.Path
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(h.snaps, "tables", hex.EncodeToString(sum[:12])+".json")
}

// readCache is the cached table of key, nil if there is none (or it is
// unreadable, too large or of another key).
func (h *Host) readCache(key string) []byte {
	if key == "" {
		return nil
	}
	f, err := os.Open(h.cacheFile())
	if err != nil {
		return nil
	}
	defer f.Close()
	// The table stays raw inside the file; the key is small.
	limit := int64(h.cfg.MaxTableSize) + 4096
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	var c cachedTable
	if err != nil || int64(len(b)) > limit || json.Unmarshal(b, &c) != nil || c.Key != key {
		return nil
	}
	return c.Table
}

// writeCache stores raw as the table of key (atomically; failures only
// cost the next start its speed).
func (h *Host) writeCache(key string, raw []byte) {
	if key == "" {
		return
	}
	file := h.cacheFile()
	b, err := json.Marshal(cachedTable{Key: key, Table: raw})
	if err == nil {
		err = os.MkdirAll(filepath.Dir(file), 0o700)
	}
	if err == nil {
		tmp := file + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, file)
		}
	}
	if err != nil {
		h.log.Warn("caching the hosted tool table", "path", h.cfg.Path, "err", err)
	}
}

// dropCache removes the path's cached table.
func (h *Host) dropCache() { _ = os.Remove(h.cacheFile()) }
