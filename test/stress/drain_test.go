package stress

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptrace"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/test/testutil"
)

// TestDrainDelay stops a forge serve (SIGTERM) while a client holds a
// kept-alive connection to it, the way a client of a Kubernetes Service
// holds one to a pod that is being replaced. During server.drain_delay the
// next request on that connection is answered (and told Connection: close),
// and /readyz says the server is leaving; only then does the listener close.
// Without the delay the connection is closed under the client and its
// request fails.
func TestDrainDelay(t *testing.T) {
	srv := startReplica(t, t.TempDir(), "a", "drain_delay: 5s")
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{}}
	sid := session.NewID()
	call := func(code string) (*http.Response, map[string]any, bool) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"code": code, "session_id": sid})
		reused := false
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.base+"/api/v1/execute", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+clusterToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("execute on the kept-alive connection: %v\nforge serve stderr:\n%s", err, srv.stderr)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp, out, reused
	}
	if resp, out, _ := call("x = 41\nx"); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("before the stop: %d %v (Connection: close %v), want 200 on a connection kept alive", resp.StatusCode, out, resp.Close)
	}

	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	testutil.Eventually(t, 30*time.Second, "forge to log that it is leaving", func() bool {
		return strings.Contains(srv.stderr.String(), "leaving:")
	})
	resp, out, reused := call("x += 1\nx")
	if !reused {
		t.Fatal("the call after SIGTERM did not reuse the kept-alive connection: the test did not test it")
	}
	if resp.StatusCode != http.StatusOK || out["result"] != float64(42) {
		t.Fatalf("the call on the kept-alive connection during the drain: %d %v, want 200 and result 42", resp.StatusCode, out)
	}
	if !resp.Close {
		t.Fatal("the answer during the drain did not carry Connection: close: the client would keep its connection to a leaving server")
	}
	if code, body := httpDo(t, http.MethodGet, srv.base+"/readyz", "", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz during the drain: %d %s, want 503", code, body)
	}
	select {
	case <-srv.exited:
		t.Fatal("forge exited before its drain delay (5 s) was over")
	default:
	}
}
