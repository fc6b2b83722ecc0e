package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/egress"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
)

// fetchBoth is Python that GETs servers A and B through HTTP_PROXY and
// prints what each gave: OK, or the error.
const fetchBoth = `
import os, urllib.request
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return "OK"
    except Exception as e:
        return type(e).__name__ + ":" + str(getattr(e, "code", ""))
print(os.environ.get("HTTP_PROXY", "-") != "-", get(%q), get(%q))
`

// TestEgressNarrowing: the profile's egress (execution.egress) reaches its
// servers from a pooled sandbox; a request narrows it, for a stateless run
// and for a session, whose narrowed policy survives hibernation and a
// restart; a request that widens it is refused naming the profile's rules.
func TestEgressNarrowing(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hi") })
	a, b := httptest.NewServer(ok), httptest.NewServer(ok)
	defer a.Close()
	defer b.Close()
	ra, rb := "127.0.0.1:"+port(a.URL), "127.0.0.1:"+port(b.URL)
	mutate := func(c *profiles.Config) {
		c.Execution.Egress = []string{ra, rb}
		c.Pool.Enabled, c.Pool.Size = true, 1
		c.Sessions.Persist = true
	}
	eng := testenv.Engine(t, false, mutate)
	ctx := context.Background()
	code := fmt.Sprintf(fetchBoth, a.URL, b.URL)
	run := func(eng *engine.Engine, session string, pol *egress.Policy) string {
		t.Helper()
		res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: code, SessionID: session, Egress: pol})
		if err != nil {
			t.Fatalf("Execute: %v", err)
		}
		if !res.Success {
			t.Fatalf("code failed: %+v", res.Error)
		}
		return strings.TrimSpace(res.Stdout)
	}
	onlyA := egress.MustParse(ra)
	for _, tc := range []struct {
		name    string
		session string
		pol     *egress.Policy
		want    string
	}{
		{"profile", "", nil, "True OK OK"},
		{"narrowed", "", &onlyA, "True OK HTTPError:403"},
		{"none", "", &egress.Policy{}, "False URLError: URLError:"},
		{"session narrowed", "egress-s", &onlyA, "True OK HTTPError:403"},
		{"session keeps its policy", "egress-s", nil, "True OK HTTPError:403"},
	} {
		if got := run(eng, tc.session, tc.pol); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}

	wide := egress.MustParse(ra, "example.com")
	_, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Code: "1", Egress: &wide})
	var refused *engine.RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, egress.ErrWiden) || !strings.Contains(err.Error(), "example.com") ||
		!strings.Contains(err.Error(), "["+ra+", "+rb+"]") || !strings.Contains(err.Error(), "execution.egress") {
		t.Errorf("widening: %v, want a refusal naming example.com, the profile's rules and execution.egress", err)
	}

	// Hibernated by Close, restored by another engine: the session's
	// sandbox is new, its policy the narrowed one.
	if err := eng.Close(5 * time.Second); err != nil {
		t.Fatalf("Close (hibernates): %v", err)
	}
	eng2 := testenv.Engine(t, false, mutate)
	if got := run(eng2, "egress-s", nil); got != "True OK HTTPError:403" {
		t.Errorf("after hibernation and restart: %q, want the narrowed policy", got)
	}
	if err := eng2.DestroySession(ctx, engine.LocalPrincipal, "egress-s"); err != nil {
		t.Error(err)
	}
}

func port(u string) string { return u[strings.LastIndex(u, ":")+1:] }
