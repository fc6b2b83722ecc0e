package stress

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-forge/forge/test/testutil"
)

// TestBoundaryTemplateMemory is finding 6 of "The boundary, round two",
// from outside: a zygote template's memory cgroup was charged about 1.5 MiB
// a live child, so with a small default_memory one client's many sessions
// got the template OOM-killed, and every sibling of every tenant died with
// it ("killed from outside"). Against a real forge serve with 32 MiB
// sandboxes, 62 live sessions each keep a variable, and all answer after.
// (runtime/sandbox TestZygoteTemplate* test the template itself.)
func TestBoundaryTemplateMemory(t *testing.T) {
	const n = 62
	config := filepath.Join(t.TempDir(), "forge.yaml")
	if err := os.WriteFile(config, []byte(`execution:
  default_memory: 32m
sessions:
  max_concurrent: 64
sandbox:
  zygote_slots: 64
pool:
  enabled: false
`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startHTTPServe(t, testutil.StateDir(t), "--config", config)
	run := fmt.Sprintf("tmem%d", os.Getpid())
	each := func(code func(i int) string, check func(i int, status int, body string)) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				status, body := srv.do(t, http.MethodPost, "/api/v1/execute", fmt.Sprintf(`{"code": %q, "session_id": "%s-%d"}`, code(i), run, i))
				check(i, status, body)
			})
		}
		wg.Wait()
	}
	defer each(func(int) string { return "" }, func(i, _ int, _ string) {
		srv.do(t, http.MethodDelete, fmt.Sprintf("/api/v1/sandboxes/%s-%d", run, i), "")
	})
	each(func(i int) string { return fmt.Sprintf("x = %d", i) }, func(i, status int, body string) {
		if status != http.StatusOK || !strings.Contains(body, `"success":true`) {
			t.Errorf("session %d: %d %s", i, status, body)
		}
	})
	each(func(int) string { return "x" }, func(i, status int, body string) {
		if status != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"result":%d,`, i)) {
			t.Errorf("session %d, once all %d lived: %d %s; want its x, %d", i, n, status, body, i)
		}
	})
}
