package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
)

func TestStoreKeepsOnlyHashes(t *testing.T) {
	dir := t.TempDir()
	s := OpenStore(dir)
	tok, meta, err := s.Create("team-a", []string{"execute", "sessions"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), tok) || strings.Contains(string(raw), strings.TrimPrefix(tok, "forge_"+meta.ID+"_")) {
		t.Errorf("the token file holds the token itself")
	}
	if !strings.Contains(string(raw), Hash(tok)) {
		t.Errorf("the token file lacks the token's hash")
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".tokens-*"))
	if len(leftovers) > 0 {
		t.Errorf("temp files left: %v", leftovers)
	}

	a, err := NewAuthenticator(s, nil)
	if err != nil || !a.Enabled() {
		t.Fatalf("authenticator: %v, enabled %v", err, a.Enabled())
	}
	id, err := a.Authenticate("Bearer " + tok)
	if err != nil || id.Tenant != "team-a" || !id.Has("execute") || id.Has("admin") || id.Principal().Tenant != "tenant:team-a" {
		t.Errorf("Authenticate = %+v, %v", id, err)
	}
	for _, h := range []string{"", "Bearer", "Basic " + tok, "Bearer " + tok + "x", tok} {
		if _, err := a.Authenticate(h); err == nil {
			t.Errorf("Authenticate(%q) accepted", h)
		}
	}
	// A revoke is seen by the running authenticator at once.
	if err := s.Revoke(meta.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate("Bearer " + tok); !errors.Is(err, ErrBadToken) {
		t.Errorf("revoked token: got %v, want ErrBadToken", err)
	}
	if !a.Enabled() {
		t.Errorf("auth switched off by revoking the last token")
	}
	if err := s.Revoke(meta.ID); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("revoking twice: %v", err)
	}
}

func TestStoreRefusesBadInput(t *testing.T) {
	s := OpenStore(t.TempDir())
	for _, tc := range []struct {
		tenant string
		scopes []string
	}{{"", []string{"execute"}}, {"a b", []string{"execute"}}, {"ok", nil}, {"ok", []string{"root"}}} {
		if _, _, err := s.Create(tc.tenant, tc.scopes); err == nil {
			t.Errorf("Create(%q, %v) accepted", tc.tenant, tc.scopes)
		}
	}
	// A token file others can read is refused, not used.
	if _, _, err := s.Create("ok", []string{"admin"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.Path(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(filepath.Dir(s.Path())).List(); !errors.Is(err, ErrStore) {
		t.Errorf("world-readable token file: got %v, want ErrStore", err)
	}
}

func TestConfiguredTokens(t *testing.T) {
	a, err := NewAuthenticator(nil, []profiles.TokenEntry{{Tenant: "ci", Scopes: []string{"admin"}, SHA256: Hash("s3cret")}})
	if err != nil || !a.Enabled() {
		t.Fatal(err)
	}
	id, err := a.Authenticate("bearer s3cret")
	if err != nil || id.Tenant != "ci" || !id.Has("sessions") {
		t.Errorf("got %+v, %v; want tenant ci with every scope", id, err)
	}
	none, _ := NewAuthenticator(OpenStore(t.TempDir()), nil)
	if none.Enabled() {
		t.Errorf("no tokens anywhere, yet auth is on")
	}
}

// TestLocalToken: the local token is made once (0600), reused, refused when
// others could know it, and acts as the local user; a configured token of a
// tenant named "local" does not.
func TestLocalToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", LocalFileName)
	tok, made, err := LocalToken(path)
	if err != nil || !made || len(tok) < 64 {
		t.Fatalf("LocalToken: %q, %v, %v", tok, made, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want mode 0600", path, fi.Mode(), err)
	}
	again, made, err := LocalToken(path)
	if err != nil || made || again != tok {
		t.Errorf("LocalToken again: made %v, same %v, %v; want the same token, not made", made, again == tok, err)
	}
	a, err := NewAuthenticator(nil, []profiles.TokenEntry{})
	if err != nil || a.Enabled() {
		t.Fatalf("NewAuthenticator: enabled %v, %v", a.Enabled(), err)
	}
	a.AddLocal(tok)
	id, err := a.Authenticate("Bearer " + tok)
	if err != nil || !id.Local || id.Principal() != engine.LocalPrincipal || !id.Has(profiles.ScopeAdmin) {
		t.Errorf("the local token: %+v, principal %v, %v; want the local principal with every scope", id, id.Principal(), err)
	}
	if _, err := a.Authenticate("Bearer " + tok[:len(tok)-1] + "x"); !errors.Is(err, ErrBadToken) {
		t.Errorf("a wrong token: %v", err)
	}
	b, _ := NewAuthenticator(nil, []profiles.TokenEntry{{Tenant: "local", Scopes: []string{"admin"}, SHA256: Hash("configured")}})
	if id, _ := b.Authenticate("Bearer configured"); id.Local || id.Principal() == engine.LocalPrincipal {
		t.Errorf("a configured token of tenant local acts as the local user: %+v", id)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LocalToken(path); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("a group-readable token file: %v, want a refusal saying to remove it", err)
	}
}
