package engine

import (
	"fmt"
	"strings"
	"unicode"
)

// Principal is who a request acts for. Every session belongs to the
// principal that created it (and later environments and hosted-tool
// workers); another principal's object answers exactly like a missing one.
// Audit entries name it. The faces decide who it is: over stdio the local
// principal; over HTTP, until bearer tokens exist, one principal per
// listener (then: the token's tenant).
type Principal struct {
	// Tenant identifies the principal; objects are keyed by it. Opaque to
	// the engine: any printable string up to 256 bytes. Faces give each
	// kind its own prefix ("listener:", later "tenant:") so that no client
	// can be named "local".
	Tenant string
}

// LocalPrincipal is the user of forge on this host: the stdio face, the
// CLI, and the owner of sessions saved by versions without owners.
var LocalPrincipal = Principal{Tenant: "local"}

// ListenerPrincipal is the principal of every client of one HTTP listener
// (until tokens tell clients apart).
func ListenerPrincipal(addr string) Principal { return Principal{Tenant: "listener:" + addr} }

func (p Principal) String() string { return p.Tenant }

// check refuses a zero or malformed principal: a face that forgot to say
// who is calling must not reach anybody's objects.
func (p Principal) check() error {
	if p.Tenant == "" {
		return fmt.Errorf("%w: the request names no principal", ErrInvalidRequest)
	}
	if len(p.Tenant) > 256 || strings.IndexFunc(p.Tenant, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("%w: principal %q: want up to 256 printable characters", ErrInvalidRequest, p.Tenant)
	}
	return nil
}
