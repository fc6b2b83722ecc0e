package hosted_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/test/testenv"
)

// zygoteToolsPy marks its own source with MARK, which tests replace.
const zygoteToolsPy = `# MARK
import ctypes, os
from forge_tools import tool

_state = {"n": 0}
# What the module's import ran with: a child's (no capabilities), never a template's.
_IMPORT_CAPS = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]

@tool
def import_caps() -> str:
    return _IMPORT_CAPS

@tool
def leak() -> dict:
    _state["n"] += 1
    seen = os.path.exists("/tmp/forge-leak")
    with open("/tmp/forge-leak", "w") as f:
        f.write("x")
    return {"n": _state["n"], "tmp_seen": seen, "pid1": open("/proc/1/cmdline").read()}

@tool
def marks() -> list:
    # Every file a call can read under /run/forge: its own module only.
    out = []
    for root, _, files in os.walk("/run/forge"):
        for name in files:
            try:
                with open(os.path.join(root, name), errors="replace") as f:
                    out += [l.strip() for l in f if l.startswith("# MODULE-")]
            except OSError:
                pass
    return sorted(out)

@tool
def crash() -> int:
    return ctypes.string_at(0)[0]  # SIGSEGV: the call's sandbox dies

@tool
def version() -> str:
    return "MARK"
`

func zygoteEngine(t *testing.T, mutate func(*profiles.Config)) *engine.Engine {
	t.Helper()
	return testenv.Engine(t, false, func(c *profiles.Config) {
		c.Sandbox.Mode = string(sandbox.ModeZygote)
		if mutate != nil {
			mutate(c)
		}
	})
}

func zygoteHost(t *testing.T, eng *engine.Engine, mark string) (*hosted.Host, string) {
	t.Helper()
	cfg := testenv.HostedTools(t, strings.ReplaceAll(zygoteToolsPy, "MARK", mark))
	h, err := hosted.New(context.Background(), hosted.Options{Engine: eng, Config: cfg, StateDir: eng.Config().StateDir})
	if err != nil {
		t.Fatalf("hosted.New: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h, cfg.Path
}

// TestHostedZygoteChildren: in zygote mode every hosted call is a child
// forked from a template that has the module's snapshot mounted (no
// container start: the zygote counts forks and no fallback), isolated as
// any sandbox: no state of one call reaches the next, a call that crashes
// its sandbox leaves the template forking for the next, and a changed
// module retires its template and is seen by the next call.
func TestHostedZygoteChildren(t *testing.T) {
	eng := zygoteEngine(t, nil)
	h, path := zygoteHost(t, eng, "MODULE-A")
	p := engine.LocalPrincipal
	rt := eng.Runtime()

	t.Run("calls are zygote children", func(t *testing.T) {
		before := rt.ZygoteStats()
		for range 3 {
			if r := call(t, h, p, "version", `{}`); r.IsError || r.Text != "MODULE-A" {
				t.Fatalf("version = %+v", r)
			}
		}
		after := rt.ZygoteStats()
		if after.Fallbacks != before.Fallbacks {
			t.Fatalf("hosted calls started %d containers (zygote fallbacks), want 0", after.Fallbacks-before.Fallbacks)
		}
		if after.Forks-before.Forks < 3 {
			t.Fatalf("3 hosted calls forked %d children, want >= 3", after.Forks-before.Forks)
		}
		if after.BindsTemplates < 1 {
			t.Fatalf("binds templates = %d, want the module's", after.BindsTemplates)
		}
	})
	t.Run("the module is imported in the child, not the template", func(t *testing.T) {
		// A template holds CAP_SETUID and CAP_SETGID; a child, after its
		// fork steps, none: the module's own code runs only there.
		if r := call(t, h, p, "import_caps", `{}`); r.IsError || r.Text != "0000000000000000" {
			t.Fatalf("import_caps = %+v, want no effective capabilities", r)
		}
	})
	t.Run("no state leaks into the next call", func(t *testing.T) {
		for i := range 3 {
			r := call(t, h, p, "leak", `{}`)
			var v struct {
				N       int  `json:"n"`
				TmpSeen bool `json:"tmp_seen"`
			}
			if r.IsError || json.Unmarshal(r.Structured, &v) != nil {
				t.Fatalf("leak #%d = %+v", i, r)
			}
			if v.N != 1 || v.TmpSeen {
				t.Fatalf("leak #%d = %+v: a call saw an earlier call's module state or /tmp", i, v)
			}
		}
	})
	t.Run("a crash takes only its own sandbox", func(t *testing.T) {
		before := rt.ZygoteStats()
		if r := call(t, h, p, "crash", `{}`); !r.IsError {
			t.Fatalf("crash = %+v, want an isError result", r)
		}
		for range 2 {
			if r := call(t, h, p, "version", `{}`); r.IsError || r.Text != "MODULE-A" {
				t.Fatalf("version after a crash = %+v", r)
			}
		}
		after := rt.ZygoteStats()
		// A dead template is retired at its next take; one more may start
		// beside a busy one (ZygoteOptions.Templates), which is no loss.
		if after.Retired != before.Retired {
			t.Fatalf("%d templates retired around a crashed call; want 0 (the template keeps forking)", after.Retired-before.Retired)
		}
	})
	t.Run("a changed module is the next call's", func(t *testing.T) {
		before := rt.ZygoteStats()
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(zygoteToolsPy, "MARK", "MODULE-A2")), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Reload(context.Background()); err != nil {
			t.Fatalf("Reload: %v", err)
		}
		if r := call(t, h, p, "version", `{}`); r.IsError || r.Text != "MODULE-A2" {
			t.Fatalf("version after the update = %+v, want MODULE-A2", r)
		}
		after := rt.ZygoteStats()
		if after.Retired == before.Retired || after.Fallbacks != before.Fallbacks {
			t.Fatalf("after a reload: %d templates retired, %d fallbacks; want the old module's retired and no containers",
				after.Retired-before.Retired, after.Fallbacks-before.Fallbacks)
		}
	})
}

// TestHostedZygoteTenants: with templates per tenant, each tenant's calls
// of one module fork from a template of its own; a module's calls see no
// other module's files (two tenants' saved tools are two modules).
func TestHostedZygoteTenants(t *testing.T) {
	eng := zygoteEngine(t, func(c *profiles.Config) { c.Sandbox.ZygotePerTenant = "on" })
	ha, _ := zygoteHost(t, eng, "MODULE-A")
	hb, _ := zygoteHost(t, eng, "MODULE-B")
	a, b := engine.Principal{Tenant: "tenant:a"}, engine.Principal{Tenant: "tenant:b"}
	rt := eng.Runtime()

	before := rt.ZygoteStats().BindsTemplates
	if r := call(t, ha, a, "marks", `{}`); r.IsError || string(r.Structured) != `{"result":["# MODULE-A"]}` {
		t.Fatalf("a's module sees %s (%+v), want only its own", r.Structured, r)
	}
	if r := call(t, ha, b, "marks", `{}`); r.IsError || string(r.Structured) != `{"result":["# MODULE-A"]}` {
		t.Fatalf("module A for b sees %s (%+v)", r.Structured, r)
	}
	if got := rt.ZygoteStats().BindsTemplates - before; got != 2 {
		t.Fatalf("module A called by two tenants: %d new binds templates, want 2 (one per tenant)", got)
	}
	if r := call(t, hb, b, "marks", `{}`); r.IsError || string(r.Structured) != `{"result":["# MODULE-B"]}` {
		t.Fatalf("b's module sees %s (%+v), want only its own", r.Structured, r)
	}
}

// TestHostedZygoteTemplateBound: past sandbox.zygote_tool_templates
// modules, making another's template retires the least recently used one;
// its module's next call makes a new one and works.
func TestHostedZygoteTemplateBound(t *testing.T) {
	eng := zygoteEngine(t, func(c *profiles.Config) { c.Sandbox.ZygoteToolTemplates = 2 })
	p := engine.LocalPrincipal
	hs := make([]*hosted.Host, 3)
	for i, m := range []string{"MODULE-1", "MODULE-2", "MODULE-3"} {
		hs[i], _ = zygoteHost(t, eng, m)
		if r := call(t, hs[i], p, "version", `{}`); r.IsError || r.Text != m {
			t.Fatalf("version = %+v, want %s", r, m)
		}
		if n := eng.Runtime().ZygoteStats().BindsTemplates; n > 2 {
			t.Fatalf("%d binds templates fork, want at most 2 (sandbox.zygote_tool_templates)", n)
		}
	}
	if r := call(t, hs[0], p, "version", `{}`); r.IsError || r.Text != "MODULE-1" {
		t.Fatalf("the evicted module's call = %+v", r)
	}
	if n := eng.Runtime().ZygoteStats().BindsTemplates; n > 2 {
		t.Fatalf("%d binds templates fork, want at most 2", n)
	}
}
