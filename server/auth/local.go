package auth

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/profiles"
)

// LocalFileName is the file in the state dir that holds the local token:
// the one forge makes for an HTTP listener when no token is configured.
const LocalFileName = "http-token"

// LocalTenant names the local token's holder in logs and errors: whoever
// can read the token file, that is the account forge runs as (and root).
// Its principal is engine.LocalPrincipal, not a tenant's: no configured
// token can act as it.
const LocalTenant = "local"

// sourceLocal is the Source of the local token (stored tokens have none:
// it is not in their JSON).
const sourceLocal = "local"

// maxLocalTokenFile bounds what is read back from the local token file.
const maxLocalTokenFile = 4 << 10

// LocalToken returns the token in path, making it first when the file does
// not exist: 32 random bytes, hex, in a file of mode 0600 that only the
// account forge runs as can read. A file that others could read or write,
// or that is not a regular file this account owns, is refused, not reused:
// its token may be known to them.
func LocalToken(path string) (token string, made bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrStore, err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return makeLocalToken(path)
	}
	if err != nil {
		return "", false, fmt.Errorf("%w: opening %s: %w", ErrStore, path, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", false, fmt.Errorf("%w: %s: %w", ErrStore, path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "", false, fmt.Errorf("%w: %s is not a regular file; remove it and forge makes a new token", ErrStore, path)
	case int(st.Uid) != os.Geteuid():
		return "", false, fmt.Errorf("%w: %s is owned by uid %d, not by forge's uid %d; remove it and forge makes a new token", ErrStore, path, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return "", false, fmt.Errorf("%w: %s has mode %o, so other accounts may know the token; remove it and forge makes a new one (0600)", ErrStore, path, st.Mode&0o777)
	}
	b := make([]byte, maxLocalTokenFile+1)
	n, _ := f.Read(b)
	tok := string(bytes.TrimSpace(b[:n]))
	if n > maxLocalTokenFile || len(tok) < 32 || strings.ContainsAny(tok, " \t\r\n") {
		return "", false, fmt.Errorf("%w: %s does not hold one token; remove it and forge makes a new one", ErrStore, path)
	}
	return tok, false, nil
}

// makeLocalToken writes a new token to path, created exclusively with mode
// 0600 (a file that appeared meanwhile is not overwritten).
func makeLocalToken(path string) (string, bool, error) {
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return "", false, err
	}
	tok := "forge_local_" + hex.EncodeToString(secret[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, os.ErrExist) {
		t, _, err := LocalToken(path) // another forge made it first
		return t, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("%w: creating %s: %w", ErrStore, path, err)
	}
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", false, fmt.Errorf("%w: writing %s: %w", ErrStore, path, err)
	}
	return tok, true, nil
}

// AddLocal makes the authenticator accept token as the local tenant's,
// with every scope, and turns authentication on. Call it before the
// authenticator is used.
func (a *Authenticator) AddLocal(token string) {
	a.config = append(a.config, Token{ID: "local", Tenant: LocalTenant, Scopes: []string{profiles.ScopeAdmin}, SHA256: Hash(token), Source: sourceLocal})
	a.enabled = true
}
