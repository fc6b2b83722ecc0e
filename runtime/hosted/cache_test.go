package hosted

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testenv"
)

// TestHostedTableCache: a restart with unchanged tools serves the cached
// table without a sandbox, re-reads it in one in the background and
// announces a table that differs; a cached table forge refuses is read
// again before start returns.
func TestHostedTableCache(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	cfg := testenv.HostedTools(t, testenv.AddTools+"\n@tool\ndef mul(a: int, b: int) -> int:\n    return a * b\n")
	cfg.PoolSize = 0
	opts := Options{Engine: eng, Config: cfg, StateDir: eng.Config().StateDir}
	names := func(h *Host) []string {
		var n []string
		for _, tl := range h.Tools() {
			n = append(n, tl.Name)
		}
		return n
	}
	h, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	file := h.cacheFile()
	h.Close()
	var c cachedTable
	if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &c) != nil || c.Key == "" {
		t.Fatalf("no cached table after a start: %v", err)
	}
	t.Cleanup(func() { os.Remove(file) })

	// A stale table under the right key (as if the sandbox had said so):
	// served at once, then replaced and announced.
	stale := `[{"name":"ghost","description":"","inputSchema":{"type":"object"}}]`
	writeCached := func(table string) {
		b, _ := json.Marshal(cachedTable{Key: c.Key, Table: json.RawMessage(table)})
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCached(stale)
	h, err = New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if got := names(h); !slices.Equal(got, []string{"ghost"}) {
		t.Fatalf("tools at start = %v, want the cached [ghost]", got)
	}
	changed := make(chan struct{}, 1)
	h.SetHooks(nil, func() { changed <- struct{}{} })
	select {
	case <-changed:
	case <-time.After(60 * time.Second):
		t.Fatal("the stale cached table was not replaced and announced")
	}
	if got := names(h); !slices.Equal(got, []string{"add", "mul"}) {
		t.Fatalf("tools after revalidation = %v, want [add mul]", got)
	}
	if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &c) != nil || !sameJSON(c.Table, mustTable(t, h)) {
		t.Fatalf("the cache was not rewritten with the table read: %s", b)
	}

	// A cached table that breaks forge's rules is never served.
	h.Close()
	writeCached(`[{"name":"bad name!","inputSchema":{"type":"object"}}]`)
	h, err = New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if got := names(h); !slices.Equal(got, []string{"add", "mul"}) {
		t.Fatalf("tools with a refused cache = %v, want [add mul] read from a sandbox", got)
	}
}

func mustTable(t *testing.T, h *Host) []byte {
	t.Helper()
	raw, err := h.readTable(context.Background(), h.current())
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
