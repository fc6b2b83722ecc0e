package engine

import (
	"context"
	"os"
	"path/filepath"
)

// Zygote templates per tenant (sandbox.zygote_per_tenant): children of one
// template share its stack canary, pointer guard, hash secret and library
// addresses (docs/security.md, "Zygote siblings"), so with tenants each
// one's sandboxes come from templates, and warm pools, of its own. The
// tenant rides in the context from the request that may start a sandbox to
// acquireImage (the session manager's StartFunc has no principal).

type tenantKey struct{}

// tokenStoreFile is server/auth's token store in the state dir (runtime
// must not import server).
const tokenStoreFile = "tokens.json"

// zygoteTenants decides sandbox.zygote_per_tenant once, at start.
func zygoteTenants(stateDir string, cfg interface{ ZygoteTenants(bool) bool }) bool {
	_, err := os.Stat(filepath.Join(stateDir, tokenStoreFile))
	return cfg.ZygoteTenants(err == nil)
}

// withTenant is ctx carrying p's tenant for the sandboxes it starts.
func withTenant(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, tenantKey{}, p.Tenant)
}

// tenantOf is the template key's tenant of a sandbox started for ctx: its
// principal's tenant with templates per tenant, else "" (one for all).
func (e *Engine) tenantOf(ctx context.Context) string {
	if !e.perTenant {
		return ""
	}
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// poolKey names the warm pool of image for tenant ("": the image's only one).
func poolKey(image, tenant string) string {
	if tenant == "" {
		return image
	}
	return image + "\x00" + tenant
}

// poolImage is the image of a pool's key.
func poolImage(key string) string {
	for i := range len(key) {
		if key[i] == 0 {
			return key[:i]
		}
	}
	return key
}
