package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/server/auth"
)

// forgeIn runs the CLI in-process with its own state dir.
func forgeIn(t *testing.T, stateDir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"--state-dir", stateDir}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestTokenCommands(t *testing.T) {
	dir := t.TempDir()
	code, tok, stderr := forgeIn(t, dir, "token", "create", "--tenant", "team-a", "--scopes", "execute,sessions")
	tok = strings.TrimSpace(tok)
	if code != 0 || !strings.HasPrefix(tok, "forge_") || strings.Count(tok, "\n") != 0 {
		t.Fatalf("create: exit %d stdout %q stderr %q", code, tok, stderr)
	}
	raw, err := os.ReadFile(filepath.Join(dir, auth.FileName))
	if err != nil || strings.Contains(string(raw), tok) || !strings.Contains(string(raw), auth.Hash(tok)) {
		t.Errorf("tokens.json %s (%v): want the hash, never the token", raw, err)
	}
	code, out, _ := forgeIn(t, dir, "token", "ls", "--json")
	var toks []auth.Token
	if code != 0 || json.Unmarshal([]byte(out), &toks) != nil || len(toks) != 1 || toks[0].Tenant != "team-a" {
		t.Fatalf("ls: exit %d %q", code, out)
	}
	if strings.Contains(out, tok) {
		t.Errorf("ls shows the token")
	}
	if code, _, stderr := forgeIn(t, dir, "token", "revoke", toks[0].ID); code != 0 {
		t.Fatalf("revoke: exit %d %s", code, stderr)
	}
	if _, out, _ := forgeIn(t, dir, "token", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("after revoke: %q, want []", out)
	}
	for _, args := range [][]string{
		{"token", "create", "--tenant", "x"},
		{"token", "create", "--tenant", "bad name", "--scopes", "execute"},
		{"token", "create", "--tenant", "x", "--scopes", "root"},
		{"token", "revoke", "nope"},
		{"token", "frob"},
	} {
		if code, _, stderr := forgeIn(t, dir, args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want 2", args, code, stderr)
		}
	}
}

func TestServeRefusesRemoteWithoutToken(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := forgeIn(t, dir, "serve", "--http", "0.0.0.0:0", "--allow-remote")
	if code != exitUsage || !strings.Contains(stderr, "no bearer token is configured") || !strings.Contains(stderr, "forge token create") {
		t.Errorf("exit %d stderr %q: want exit 2 saying that no token is configured and how to make one", code, stderr)
	}
}
