package stress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/auth"
	"github.com/mcp-forge/forge/test/testutil"
)

// clusterToken is every replica's token (as a Secret gives it to each pod).
const clusterToken = "cluster-test-token"

// startReplica starts forge serve --http as cluster member name, its
// sessions in shared.
func startReplica(t *testing.T, shared, name string, server ...string) *httpServe {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "forge.yaml")
	yaml := clusterServer(server...) + fmt.Sprintf("cluster:\n  enabled: true\n  shared_dir: %s\n  member: %s\n", shared, name)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startHTTPServe(t, testutil.StateDir(t), "--config", config)
	srv.token = clusterToken
	return srv
}

// clusterServer is the server section of every replica: the shared token,
// rate limits out of the way of the measured loops, and the given fields
// (lines such as "drain_delay: 1s").
func clusterServer(fields ...string) string {
	s := fmt.Sprintf("server:\n  auth:\n    tokens: [{tenant: t, scopes: [execute, sessions], sha256: %s}]\n"+
		"  tenants:\n    default: {executions_per_minute: 100000, execution_burst: 1000}\n", auth.Hash(clusterToken))
	for _, f := range fields {
		s += "  " + f + "\n"
	}
	return s
}

// execIn runs code in session sid through srv and returns the HTTP status
// and the decoded ExecutionResult (or problem).
func execIn(t *testing.T, srv *httpServe, sid, code string) (int, map[string]any, http.Header) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": code, "session_id": sid})
	req, _ := http.NewRequest(http.MethodPost, srv.base+"/api/v1/execute", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clusterToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("execute through %s: %v", srv.base, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, resp.Header
}

// wantResult checks that code in sid through srv answers want as its last
// expression.
func wantResult(t *testing.T, srv *httpServe, via, sid, code string, want any) map[string]any {
	t.Helper()
	status, out, _ := execIn(t, srv, sid, code)
	if status != http.StatusOK || out["success"] != true || fmt.Sprint(out["result"]) != fmt.Sprint(want) {
		t.Fatalf("%s: %q: got %d %v, want result %v", via, code, status, out, want)
	}
	return out
}

// mcpPost posts one JSON-RPC message to srv's /mcp with the MCP session id
// mcpSID (none when empty) and returns the session id it answers with and
// the body.
func mcpPost(t *testing.T, srv *httpServe, mcpSID, msg string) (string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.base+"/mcp", strings.NewReader(msg))
	req.Header.Set("Authorization", "Bearer "+clusterToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if mcpSID != "" {
		req.Header.Set("Mcp-Session-Id", mcpSID)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("MCP through %s: %v", srv.base, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("MCP %s through %s: got %d %s", msg, srv.base, resp.StatusCode, b.String())
	}
	return resp.Header.Get("Mcp-Session-Id"), b.String()
}

func readFileVia(t *testing.T, srv *httpServe, sid, name string) string {
	t.Helper()
	status, body := srv.do(t, http.MethodGet, "/api/v1/sessions/"+sid+"/files/"+name, "")
	if status != http.StatusOK {
		t.Fatalf("reading %s of %s through %s: %d %s", name, sid, srv.base, status, body)
	}
	return body
}

func holderOf(t *testing.T, shared, sid string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(shared, "sessions", ".principals", "*", sid, "meta.json"))
	if len(matches) != 1 {
		t.Fatalf("session %s: %d meta files in the shared dir", sid, len(matches))
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	var m session.Meta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m.Member
}

// TestClusterSessions: three replicas share one directory. A session made
// through A is used through B (forwarded to A) and C; A stopped gracefully
// hands it over (B serves it with its variables and files); B killed hard
// loses nothing it answered (C takes it over from the checkpoint); a call
// in flight when its holder is killed gets a retryable 503, and the retry
// answers from the last answered call.
func TestClusterSessions(t *testing.T) {
	shared := t.TempDir()
	a := startReplica(t, shared, "a")
	b := startReplica(t, shared, "b")
	c := startReplica(t, shared, "c")
	sid := session.NewID()

	wantResult(t, a, "create through a", sid, "x = 41\nopen('/workspace/f.txt', 'w').write('hello')\nx", 41)
	if h := holderOf(t, shared, sid); h != "a" {
		t.Fatalf("holder after create: got %q, want a", h)
	}
	wantResult(t, b, "through b (forwarded to a)", sid, "x += 1\nx", 42)
	if got := readFileVia(t, c, sid, "f.txt"); got != "hello" {
		t.Fatalf("file through c: got %q, want hello", got)
	}
	// MCP: a client's MCP session made at c, its call sent to b (a Service
	// without affinity), for a forge session a holds.
	mcpSID, _ := mcpPost(t, c, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, body := mcpPost(t, b, mcpSID, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"x","session_id":%q}}}`, sid)); !strings.Contains(body, `\"result\":42`) && !strings.Contains(body, `"result":42`) {
		t.Fatalf("MCP tools/call through b with c's MCP session: got %s, want result 42", body)
	}
	if h := holderOf(t, shared, sid); h != "a" {
		t.Fatalf("holder after forwarded calls: got %q, want a (calls go to the holder)", h)
	}

	// Graceful stop (SIGTERM, a rollout or scale-down): handed over.
	stopped := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	<-a.exited
	out := wantResult(t, b, "through b after a stopped", sid, "x", 42)
	t.Logf("first answer after SIGTERM of the holder: %v after the signal; notes %v", time.Since(stopped).Round(time.Millisecond), out["notes"])
	if got := readFileVia(t, b, sid, "f.txt"); got != "hello" {
		t.Fatalf("file through b after a stopped: got %q, want hello", got)
	}
	if h := holderOf(t, shared, sid); h != "b" {
		t.Fatalf("holder after a stopped: got %q, want b", h)
	}

	// Forced kill of the holder: its last answered call survives.
	wantResult(t, c, "through c (forwarded to b)", sid, "x = 43\nopen('/workspace/g.txt', 'w').write('world')\nx", 43)
	_ = b.cmd.Process.Kill()
	<-b.exited
	killed := time.Now()
	wantResult(t, c, "through c after b was killed", sid, "x", 43)
	t.Logf("first answer after SIGKILL of the holder: %v", time.Since(killed).Round(time.Millisecond))
	if got := readFileVia(t, c, sid, "g.txt"); got != "world" {
		t.Fatalf("file through c after b was killed: got %q, want world", got)
	}

	// A call in flight when its holder dies: a retryable error, then the
	// retry answers from the last answered call.
	d := startReplica(t, shared, "d")
	marker := fmt.Sprintf("3600.%d", time.Now().UnixNano()%1000000)
	type reply struct {
		status int
		out    map[string]any
		hdr    http.Header
	}
	done := make(chan reply, 1)
	go func() {
		s, o, h := execIn(t, d, sid, "x = 99\nimport subprocess\nsubprocess.run(['sleep', '"+marker+"'])\nx")
		done <- reply{s, o, h}
	}()
	testutil.Eventually(t, time.Minute, "the forwarded call to run in c's sandbox", func() bool { return sleeping(marker) })
	_ = c.cmd.Process.Kill()
	<-c.exited
	var r reply
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the call in flight did not end after its holder was killed")
	}
	if r.status != http.StatusServiceUnavailable || r.hdr.Get("Retry-After") == "" || !strings.Contains(fmt.Sprint(r.out["detail"]), "retry") {
		t.Fatalf("call in flight at SIGKILL: got %d %v (Retry-After %q), want 503 with Retry-After saying retry", r.status, r.out, r.hdr.Get("Retry-After"))
	}
	wantResult(t, d, "retry through d", sid, "x", 43)
}

// TestClusterCheckpointFails: a call whose checkpoint cannot be written
// (the shared volume is full) says so, and when its holder is then killed
// the session is reported lost, never brought back from an older
// checkpoint as if nothing had happened.
func TestClusterCheckpointFails(t *testing.T) {
	testutil.RequiresRoot(t)
	shared := t.TempDir()
	if err := syscall.Mount("tmpfs", shared, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Fatalf("mounting a small shared volume: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(shared, syscall.MNT_DETACH) })
	a, b := startReplica(t, shared, "a"), startReplica(t, shared, "b")
	sid := session.NewID()
	wantResult(t, a, "a small call", sid, "x = 1\nx", 1)
	out := wantResult(t, a, "a call whose checkpoint does not fit", sid, "x = 2\nopen('/workspace/big', 'w').write('y' * 2000000)\nx", 2)
	if !strings.Contains(fmt.Sprint(out["notes"]), "could not be checkpointed") {
		t.Fatalf("notes of a call whose checkpoint failed: got %v, want it said", out["notes"])
	}
	_ = a.cmd.Process.Kill()
	<-a.exited
	status, out, _ := execIn(t, b, sid, "globals().get('x')")
	if status != http.StatusOK || out["result"] != nil || !strings.Contains(fmt.Sprint(out["notes"]), "was lost") {
		t.Fatalf("after the holder died with no current checkpoint: got %d %v, want the session reported lost and x gone (not x == 1)", status, out)
	}
}

// sleeping reports whether a process runs `sleep marker` (the user code's
// child in a sandbox: the host sees every pid namespace).
func sleeping(marker string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Equal(b, []byte("sleep\x00"+marker+"\x00")) {
			return true
		}
	}
	return false
}

// TestClusterCheckpointCost measures what checkpointing every session call
// (cluster mode) costs: the same small session calls on a replica and on a
// plain forge serve, as a ratio of their medians.
func TestClusterCheckpointCost(t *testing.T) {
	const n = 30
	median := func(srv *httpServe, code string, size int) time.Duration {
		sid := session.NewID()
		wantResult(t, srv, "first call", sid, fmt.Sprintf("x = 0\nopen('/workspace/data.txt', 'w').write('y' * %d)\nx", size), 0)
		ds := make([]time.Duration, n)
		for i := range ds {
			start := time.Now()
			wantResult(t, srv, "call", sid, code, i+1)
			ds[i] = time.Since(start)
		}
		slices.Sort(ds)
		return ds[n/2]
	}
	replica := startReplica(t, t.TempDir(), "a")
	dir := t.TempDir()
	config := filepath.Join(dir, "forge.yaml")
	if err := os.WriteFile(config, []byte(clusterServer()), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := startHTTPServe(t, testutil.StateDir(t), "--config", config)
	plain.token = clusterToken
	const code = "x += 1\nx"
	for _, size := range []int{100_000, 10_000_000} {
		p, c := median(plain, code, size), median(replica, code, size)
		t.Logf("session call (%d bytes in /workspace, one int variable), median of %d: plain %v, cluster with checkpoint %v: %.2f x", size, n, p, c, float64(c)/float64(p))
	}
}

// TestClusterRollout is `kubectl rollout restart` under load on one host:
// eight clients each drive their own session (a counter) through whichever
// replicas are in service, while every replica in turn is taken out of
// service, stopped with SIGTERM and replaced. No call may fail and no
// session may lose a step. The clients keep their connections alive, as
// through a Service: server.drain_delay is what moves them off a stopping
// replica without a failed call.
func TestClusterRollout(t *testing.T) {
	shared := t.TempDir()
	var mu sync.Mutex
	const drain = "drain_delay: 1s"
	live := []*httpServe{startReplica(t, shared, "r0", drain), startReplica(t, shared, "r1", drain), startReplica(t, shared, "r2", drain)}
	pick := func(i int) *httpServe {
		mu.Lock()
		defer mu.Unlock()
		return live[i%len(live)]
	}
	stop := make(chan struct{})
	type tally struct{ calls, failed int }
	results := make(chan tally, 8)
	for c := range 8 {
		go func() {
			sid, want, tl := session.NewID(), 0, tally{}
			for i := c; ; i++ {
				select {
				case <-stop:
					results <- tl
					return
				default:
				}
				code := "n = globals().get('n', 0) + 1\nn"
				body, _ := json.Marshal(map[string]any{"code": code, "session_id": sid})
				req, _ := http.NewRequest(http.MethodPost, pick(i).base+"/api/v1/execute", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+clusterToken)
				req.Header.Set("Content-Type", "application/json")
				tl.calls++
				resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
				if err != nil {
					tl.failed++
					t.Errorf("client %d call %d: %v", c, i, err)
					continue
				}
				var out map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || fmt.Sprint(out["result"]) != fmt.Sprint(want+1) {
					tl.failed++
					t.Errorf("client %d call %d: got %d %v, want result %d", c, i, resp.StatusCode, out, want+1)
					if n, ok := out["result"].(float64); ok {
						want = int(n) // go on from what the session says
					}
					continue
				}
				want++
			}
		}()
	}
	for gen := range 3 {
		time.Sleep(time.Second) // load between steps (a fixed pace, not a wait for a condition)
		next := startReplica(t, shared, fmt.Sprintf("r%d", gen+3), drain)
		mu.Lock()
		old := live[0]
		live = append(live[1:], next) // out of service (the endpoints) first, as Kubernetes does
		mu.Unlock()
		_ = old.cmd.Process.Signal(syscall.SIGTERM)
		<-old.exited
	}
	time.Sleep(time.Second)
	close(stop)
	total := tally{}
	for range 8 {
		r := <-results
		total.calls += r.calls
		total.failed += r.failed
	}
	t.Logf("rollout of 3 replicas under 8 clients: %d calls, %d failed", total.calls, total.failed)
}
