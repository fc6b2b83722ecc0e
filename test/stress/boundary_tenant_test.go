package stress

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/test/testutil"
)

// TestBoundaryTenantGate is finding 2 of "The boundary, round two", from
// outside: tenant limits guarded execute only, so a tenant filled every
// session slot with file writes. Against a real forge serve, tenant a
// (max_sessions 2) writes files into 8 new sessions at once over REST: two
// are made, the rest refused with 429; tenant b still makes one. (The
// gate's every face is tested in server TestTenantGate*.)
func TestBoundaryTenantGate(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "forge.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `server:
  auth:
    tokens:
      - {tenant: a, scopes: [sessions], sha256: %s}
      - {tenant: b, scopes: [sessions], sha256: %s}
  tenants:
    default: {max_sessions: 2, executions_per_minute: 0}
`, auth.Hash("token-a"), auth.Hash("token-b")), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startHTTPServe(t, testutil.StateDir(t), "--config", config)
	run := fmt.Sprintf("gate%d", os.Getpid())
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			code, body := httpDo(t, http.MethodPut, fmt.Sprintf("%s/api/v1/sessions/%s-%d/files/x.txt", srv.base, run, i), "data", "token-a")
			mu.Lock()
			defer mu.Unlock()
			statuses[code]++
			if code != http.StatusNoContent && (code != http.StatusTooManyRequests || !strings.Contains(body, "max_sessions")) {
				t.Errorf("tenant a's write %d: %d %s; want 204, or 429 naming max_sessions", i, code, body)
			}
		})
	}
	wg.Wait()
	code, body := httpDo(t, http.MethodGet, srv.base+"/api/v1/sandboxes", "", "token-a")
	if n := strings.Count(body, `"id":`); code != http.StatusOK || n != 2 || statuses[http.StatusNoContent] != 2 {
		t.Errorf("tenant a after 8 concurrent writes into new sessions: %d sessions (%d %s), statuses %v; want exactly its max_sessions, 2", n, code, body, statuses)
	}
	if code, body := httpDo(t, http.MethodPut, fmt.Sprintf("%s/api/v1/sessions/%s-b/files/x.txt", srv.base, run), "data", "token-b"); code != http.StatusNoContent {
		t.Errorf("tenant b's first session: %d %s", code, body)
	}
	for _, tok := range []string{"token-a", "token-b"} {
		_, body := httpDo(t, http.MethodGet, srv.base+"/api/v1/sandboxes", "", tok)
		for _, f := range strings.Split(body, `"id":"`)[1:] {
			id, _, _ := strings.Cut(f, `"`)
			httpDo(t, http.MethodDelete, srv.base+"/api/v1/sandboxes/"+id, "", tok)
		}
	}
}
