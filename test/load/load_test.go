// Package load drives a real `forge serve --http` with concurrent REST
// executions and watches the server: no 5xx, no failed request, and a flat
// resident set. FORGE_LOAD_DURATION sets the length (default 10s, the short
// form make test runs; make load runs 60s); the p50/p99 latency is printed.
package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

const concurrency = 16

func TestExecuteLoad(t *testing.T) {
	testutil.RequiresRoot(t)
	dur := 10 * time.Second
	if s := os.Getenv("FORGE_LOAD_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("FORGE_LOAD_DURATION: %v", err)
		}
		dur = d
	}
	forge := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	if _, err := os.Stat(forge); err != nil {
		t.Fatalf("%s missing (make build): %v", forge, err)
	}
	testutil.BaseImageLayout(t, "forge/python:3.11")
	state := testutil.StateDir(t)

	var secret [24]byte
	_, _ = rand.Read(secret[:])
	token := "forge_load_" + hex.EncodeToString(secret[:])
	sum := sha256.Sum256([]byte(token))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "forge.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `state_dir: %s
server:
  auth:
    tokens: [{tenant: load, scopes: [execute], sha256: %s}]
  tenants:
    default: {executions_per_minute: 0}
execution:
  queue_timeout: 120s
pool:
  size: 4
`, state, hex.EncodeToString(sum[:])), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, forge, "serve", "--config", cfg, "--http", addr)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("forge serve's log:\n%s", tail(logs.String(), 4000))
		}
	}()
	base := "http://" + addr
	waitReady(t, base)

	body := []byte(`{"code": "sum(range(1000))"}`)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failures  = map[string]int{}
		rss       []uint64
	)
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			client := &http.Client{Timeout: 2 * time.Minute}
			for time.Now().Before(stop) {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/execute", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				var why string
				if err != nil {
					why = "transport: " + err.Error()
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var res struct {
						Success bool `json:"success"`
						Result  any  `json:"result"`
					}
					if resp.StatusCode != 200 {
						why = fmt.Sprintf("status %d: %.200s", resp.StatusCode, b)
					} else if json.Unmarshal(b, &res) != nil || !res.Success || fmt.Sprint(res.Result) != "499500" {
						why = fmt.Sprintf("wrong result: %.200s", b)
					}
				}
				mu.Lock()
				if why != "" {
					failures[why]++
				} else {
					latencies = append(latencies, time.Since(start))
				}
				mu.Unlock()
			}
		})
	}
	// The server's resident set, once a second while the load runs.
	ticker := time.NewTicker(time.Second)
	for time.Now().Before(stop) {
		<-ticker.C
		if v, err := vmRSS(cmd.Process.Pid); err == nil {
			rss = append(rss, v)
		}
	}
	ticker.Stop()
	wg.Wait()

	if len(failures) > 0 {
		t.Errorf("failed requests: %v", failures)
	}
	if len(latencies) == 0 {
		t.Fatal("no request succeeded")
	}
	slices.Sort(latencies)
	q := func(p float64) time.Duration { return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))] }
	t.Logf("%d executions in %s at concurrency %d: %.1f/s, p50 %s, p99 %s, max %s",
		len(latencies), dur, concurrency, float64(len(latencies))/dur.Seconds(), q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
	checkFlat(t, rss)
}

// checkFlat fails when the resident set keeps growing: the peak of the
// last third may exceed the peak of the first third (after warm-up) by a
// quarter plus 16 MiB at most.
func checkFlat(t *testing.T, rss []uint64) {
	t.Helper()
	if len(rss) < 6 {
		t.Logf("RSS samples %v: too few to judge", rss)
		return
	}
	third := len(rss) / 3
	first, last := slices.Max(rss[1:third+1]), slices.Max(rss[len(rss)-third:])
	t.Logf("forge serve RSS: first third peak %d MiB, last third peak %d MiB (%d samples)", first>>20, last>>20, len(rss))
	if float64(last) > 1.25*float64(first)+16<<20 {
		t.Errorf("RSS grew from %d MiB to %d MiB under constant load: %v", first>>20, last>>20, rss)
	}
}

func vmRSS(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("forge serve not ready after 2 minutes: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling a probe, with a deadline
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
