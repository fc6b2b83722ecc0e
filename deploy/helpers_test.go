package deploy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
)

// testToken is the bearer token of the live checks; its hash stands in for
// the deployments' ${FORGE_ADMIN_TOKEN_SHA256}.
const (
	testToken       = "forge-deploy-test-token"
	testTokenSHA256 = "46ba0c5638ff5f1b8cbc63ae11bf4bdf778fa05c0e9e6caa49ef932e60674957"
)

func testEnv(name string) (string, bool) {
	if name == "FORGE_ADMIN_TOKEN_SHA256" {
		return testTokenSHA256, true
	}
	return "", false
}

// parseConfig loads a deployment's forge.yaml the way forge does.
func parseConfig(t *testing.T, data []byte, what string) *profiles.Config {
	t.Helper()
	cfg, err := profiles.Parse(data, testEnv)
	if err != nil {
		t.Fatalf("%s: forge refuses its configuration: %v", what, err)
	}
	return cfg
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("server.http_addr %q: %v", addr, err)
	}
	return p
}

// forgeBin is the forge binary the live checks start (make build).
func forgeBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("FORGE_TEST_BIN")
	if p == "" {
		p, _ = filepath.Abs("../bin/forge")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("forge binary %s missing (make build): %v", p, err)
	}
	return p
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("test needs root")
		}
		t.Skip("test needs root")
	}
}

// liveForge starts forge serve with a deployment's configuration on a free
// loopback port (the state dir is the tests' shared one, which has the base
// images) and returns its base URL.
func liveForge(t *testing.T, config []byte) string {
	t.Helper()
	requireRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "forge.yaml")
	if err := os.WriteFile(cfgPath, config, 0o600); err != nil {
		t.Fatal(err)
	}
	state := os.Getenv("FORGE_TEST_STATE_DIR")
	if state == "" {
		state = "/var/lib/forge-test"
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, forgeBin(t), "--state-dir", state, "--config", cfgPath, "serve", "--http", addr)
	cmd.Env = append(os.Environ(), "FORGE_ADMIN_TOKEN_SHA256="+testTokenSHA256)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("forge serve stderr:\n%s", stderr.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("forge serve exited: %v\n%s", err, stderr.String())
		default:
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("forge serve did not answer on %s in 60 s\n%s", addr, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get fetches path with the test token and returns the status.
func get(t *testing.T, base, path string, auth bool) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// eventually polls GET path until it answers want.
func eventually(t *testing.T, base, path string, auth bool, want int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := get(t, base, path, auth)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s answers %d, want %d", path, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func must(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
}

// checkServeArgs: forge serve refuses a non-loopback address unless it is
// given --allow-remote (server.ListenAddr), so a container whose
// configuration listens on 0.0.0.0 must pass it, or it exits 2 at start (the
// pods crash-looped on a real cluster before this check).
func checkServeArgs(t *testing.T, args []string, httpAddr string) {
	t.Helper()
	i := slices.Index(args, "serve")
	if i < 0 {
		t.Fatalf("args %v do not run forge serve", args)
	}
	host, _, err := net.SplitHostPort(httpAddr)
	if err != nil {
		t.Fatalf("server.http_addr %q: %v", httpAddr, err)
	}
	if ip, err := netip.ParseAddr(host); (err == nil && ip.IsLoopback()) || host == "localhost" {
		return
	}
	must(t, slices.Contains(args[i+1:], "--allow-remote"), "forge listens on %s but serve's args %v lack --allow-remote: forge would refuse to start", httpAddr, args[i+1:])
}

// probe GETs path the way a kubelet's httpGet probe does: Host is the pod's
// IP and port (never one of server.allowed_hosts), no token.
func probe(t *testing.T, base, path string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Host = "198.18.0.73:8080"
	req.Header.Set("User-Agent", "kube-probe/1.34")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("probe %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
