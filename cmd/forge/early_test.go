package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/test/testenv"
)

const earlyLog = "the first request was answered while forge started"

// serveOnce runs bin/forge with args, writes input at once, and returns
// the replies on stdout (one per line), stderr and the exit error.
func serveOnce(t *testing.T, env []string, input string, args ...string) ([]map[string]json.RawMessage, string, error) {
	t.Helper()
	bin := filepath.Join(testenv.RepoRoot(), "bin", "forge")
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var replies []map[string]json.RawMessage
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if jerr := json.Unmarshal(sc.Bytes(), &m); jerr != nil {
			t.Fatalf("stdout line %q is not JSON: %v", sc.Text(), jerr)
		}
		replies = append(replies, m)
	}
	return replies, stderr.String(), err
}

// cleanEnv is the environment without FORGE_* settings, with a HOME.
func cleanEnv(t *testing.T) []string {
	env := []string{"HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name == "PATH" {
			env = append(env, kv)
		}
	}
	return env
}

// `forge serve` answers initialize from its first initializers (package
// early): on the built-in configuration and on a file's, with the
// instructions of that configuration, exactly once, and the server then
// serves what followed it. A configuration that does not load gets no
// reply, as before, and a first request that is not initialize is the
// server's.
func TestEarlyInitialize(t *testing.T) {
	const (
		initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n"
		rest       = `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" + `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"
	)
	instructions := func(t *testing.T, r map[string]json.RawMessage) string {
		var res struct {
			Instructions string `json:"instructions"`
		}
		if err := json.Unmarshal(r["result"], &res); err != nil || res.Instructions == "" {
			t.Fatalf("initialize result without instructions: %s", r["result"])
		}
		return res.Instructions
	}
	check := func(t *testing.T, replies []map[string]json.RawMessage, stderr string) {
		t.Helper()
		if len(replies) != 2 || string(replies[0]["id"]) != "0" || string(replies[1]["id"]) != "1" || replies[1]["result"] == nil {
			t.Fatalf("want the initialize and ping replies once each, got %d: %v\nstderr:\n%s", len(replies), replies, stderr)
		}
		if !strings.Contains(stderr, earlyLog) || strings.Contains(stderr, "differs from the server's") {
			t.Fatalf("initialize was not answered early, or not as the server would:\n%s", stderr)
		}
	}
	t.Run("BuiltIn", func(t *testing.T) {
		replies, stderr, err := serveOnce(t, cleanEnv(t), initialize+rest, "--state-dir", t.TempDir(), "--log-level", "debug", "serve")
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, stderr)
		}
		check(t, replies, stderr)
		if got := instructions(t, replies[0]); !strings.Contains(got, "timeout: 30s by default") {
			t.Fatalf("instructions are not the built-in configuration's:\n%s", got)
		}
	})
	t.Run("ConfigFile", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "forge.yaml")
		if err := os.WriteFile(cfg, []byte("execution:\n  default_timeout: 7s\nserver:\n  name: lab-forge\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		replies, stderr, err := serveOnce(t, cleanEnv(t), initialize+rest, "--state-dir", t.TempDir(), "--log-level", "debug", "serve", "--config", cfg)
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, stderr)
		}
		check(t, replies, stderr)
		if got := instructions(t, replies[0]); !strings.Contains(got, "timeout: 7s by default") {
			t.Fatalf("instructions are not the file's configuration's:\n%s", got)
		}
		if !strings.Contains(string(replies[0]["result"]), `"name":"lab-forge"`) {
			t.Fatalf("serverInfo is not the file's: %s", replies[0]["result"])
		}
	})
	t.Run("Environment", func(t *testing.T) {
		env := append(cleanEnv(t), "FORGE_EXECUTION_DEFAULT_TIMEOUT=9s")
		replies, stderr, err := serveOnce(t, env, initialize+rest, "--state-dir", t.TempDir(), "--log-level", "debug", "serve")
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, stderr)
		}
		check(t, replies, stderr)
		if got := instructions(t, replies[0]); !strings.Contains(got, "timeout: 9s by default") {
			t.Fatalf("instructions do not have FORGE_EXECUTION_DEFAULT_TIMEOUT:\n%s", got)
		}
	})
	t.Run("BadConfig", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "forge.yaml")
		if err := os.WriteFile(cfg, []byte("execution:\n  default_timeout: soon\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		replies, stderr, err := serveOnce(t, cleanEnv(t), initialize+rest, "--state-dir", t.TempDir(), "serve", "--config", cfg)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUsage {
			t.Fatalf("serve with a bad config: %v, want exit %d\n%s", err, exitUsage, stderr)
		}
		if len(replies) != 0 || !strings.Contains(stderr, "default_timeout") {
			t.Fatalf("a config that does not load got replies %v, stderr:\n%s", replies, stderr)
		}
	})
	t.Run("OtherFirstRequest", func(t *testing.T) {
		replies, stderr, err := serveOnce(t, cleanEnv(t), `{"jsonrpc":"2.0","id":5,"method":"ping"}`+"\n"+initialize, "--state-dir", t.TempDir(), "--log-level", "debug", "serve")
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, stderr)
		}
		if len(replies) != 2 || strings.Contains(stderr, earlyLog) {
			t.Fatalf("want the server's replies to ping and initialize, got %v\n%s", replies, stderr)
		}
	})
}
