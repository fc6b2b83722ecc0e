// Package auth is forge's bearer-token authentication of the HTTP transport:
// the token store that `forge token` manages (only hashes are kept, in a
// 0600 file under the state dir, written atomically), tokens given by hash
// in the configuration, and the Identity a token stands for: a tenant and
// its scopes. The faces turn the tenant into the engine's Principal.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
)

// TenantPrefix marks principals that come from a token's tenant, so that
// no token can act as the local user or an unauthenticated listener.
const TenantPrefix = "tenant:"

// Identity is who a request authenticated as.
type Identity struct {
	Tenant  string
	Scopes  []string
	TokenID string // "" for a token from the configuration
	// Local: the local token (LocalToken), which acts as the local user.
	Local bool
}

// Has reports whether the identity carries scope (admin carries every scope).
func (id Identity) Has(scope string) bool {
	return slices.Contains(id.Scopes, scope) || slices.Contains(id.Scopes, profiles.ScopeAdmin)
}

// Principal is the engine principal of the identity's tenant; the local
// token's is the local user's (engine.LocalPrincipal), as over stdio: whoever
// can read the token file is the account forge runs as.
func (id Identity) Principal() engine.Principal {
	if id.Local {
		return engine.LocalPrincipal
	}
	return engine.Principal{Tenant: TenantPrefix + id.Tenant}
}

// Hash is the hex SHA-256 under which a token is known.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Authenticator checks bearer tokens against the store and the
// configuration. Enabled is decided once, when it is made: a server that
// started with tokens keeps refusing requests without one even when every
// token is revoked, and one that started without stays open (on loopback).
type Authenticator struct {
	store   *Store
	enabled bool

	mu     sync.Mutex
	config []Token // from the configuration
}

// NewAuthenticator checks tokens of store (nil: none) and of the
// configuration entries.
func NewAuthenticator(store *Store, entries []profiles.TokenEntry) (*Authenticator, error) {
	a := &Authenticator{store: store}
	for _, e := range entries {
		a.config = append(a.config, Token{Tenant: e.Tenant, Scopes: slices.Clone(e.Scopes), SHA256: strings.ToLower(e.SHA256), Source: "config"})
	}
	n := len(a.config)
	if store != nil {
		toks, err := store.List()
		if err != nil {
			return nil, err
		}
		n += len(toks)
	}
	a.enabled = n > 0
	return a, nil
}

// Enabled reports whether requests must carry a token.
func (a *Authenticator) Enabled() bool { return a != nil && a.enabled }

// Authenticate checks the value of an Authorization header.
func (a *Authenticator) Authenticate(header string) (Identity, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if header == "" {
		return Identity{}, ErrNoToken
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return Identity{}, fmt.Errorf("%w: want \"Authorization: Bearer TOKEN\"", ErrBadToken)
	}
	h := Hash(strings.TrimSpace(token))
	candidates := a.config
	if a.store != nil {
		toks, err := a.store.List() // re-read when changed: a revoke takes effect at once
		if err != nil {
			return Identity{}, err
		}
		candidates = append(slices.Clip(candidates), toks...)
	}
	for _, t := range candidates {
		if subtle.ConstantTimeCompare([]byte(t.SHA256), []byte(h)) == 1 {
			return Identity{Tenant: t.Tenant, Scopes: t.Scopes, TokenID: t.ID, Local: t.Source == sourceLocal}, nil
		}
	}
	return Identity{}, ErrBadToken
}

type identityKey struct{}

// WithIdentity marks ctx as authenticated as id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity in ctx; false when the request was not
// authenticated (authentication is off).
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
