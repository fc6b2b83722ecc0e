package hosted_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/test/testenv"
)

func TestMain(m *testing.M) {
	if hooks.Reexec() {
		return
	}
	os.Exit(m.Run())
}

const toolsPy = `
import os, socket, time
from typing import Annotated
from forge_tools import tool

@tool
def add(a: int, b: int = 1) -> int:
    """Adds two integers."""
    return a + b

@tool
def read_file(path: str) -> str:
    with open(path) as f:
        return f.read()

@tool
def connect(host: str, port: int) -> str:
    s = socket.create_connection((host, port), timeout=2)
    return "connected"

@tool(timeout=1)
def spin() -> int:
    while True:
        pass

@tool
def boom(msg: str) -> str:
    raise ValueError(msg)

_count = 0

@tool(persistent=True)
def counter() -> dict:
    global _count
    _count += 1
    return {"count": _count, "pid": os.getpid()}
`

// newHost serves src (written as tools.py) on a fresh engine.
func newHost(t *testing.T, src string, mutate func(*profiles.HostedToolsConfig)) (*hosted.Host, string) {
	t.Helper()
	eng := testenv.Engine(t, false, nil)
	cfg := testenv.HostedTools(t, src)
	if mutate != nil {
		mutate(&cfg)
	}
	h, err := hosted.New(context.Background(), hosted.Options{Engine: eng, Config: cfg, StateDir: eng.Config().StateDir})
	if err != nil {
		t.Fatalf("hosted.New: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h, cfg.Path
}

func call(t *testing.T, h *hosted.Host, p engine.Principal, name, args string) *hosted.Result {
	t.Helper()
	r, err := h.Call(context.Background(), p, name, json.RawMessage(args))
	if err != nil {
		t.Fatalf("Call %s(%s): %v", name, args, err)
	}
	return r
}

func TestHostedTools(t *testing.T) {
	h, _ := newHost(t, toolsPy, nil)
	var names []string
	for _, tl := range h.Tools() {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "add,read_file,connect,spin,boom,counter" {
		t.Fatalf("tools = %s", got)
	}
	p := engine.LocalPrincipal

	t.Run("result", func(t *testing.T) {
		r := call(t, h, p, "add", `{"a": 2, "b": 3}`)
		if r.IsError || r.Text != "5" || string(r.Structured) != `{"result":5}` {
			t.Fatalf("add = %+v (structured %s)", r, r.Structured)
		}
	})
	t.Run("invalid arguments", func(t *testing.T) {
		_, err := h.Call(context.Background(), p, "add", json.RawMessage(`{"a": "two"}`))
		var ae *hosted.ArgumentError
		if !errors.As(err, &ae) || ae.Path != "/a" {
			t.Fatalf("err = %v, want an ArgumentError at /a", err)
		}
		_, err = h.Call(context.Background(), p, "add", json.RawMessage(`{}`))
		if !errors.As(err, &ae) {
			t.Fatalf("missing a: err = %v, want an ArgumentError", err)
		}
	})
	t.Run("host files are not there", func(t *testing.T) {
		// A file only the host has: the sandbox sees its own root.
		secret := filepath.Join(t.TempDir(), "secret.txt")
		if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := call(t, h, p, "read_file", `{"path": "`+secret+`"}`)
		if !r.IsError || r.ErrorType != "FileNotFoundError" || strings.Contains(r.Text, "host secret") {
			t.Fatalf("read_file(host file) = %+v", r)
		}
		r = call(t, h, p, "read_file", `{"path": "/etc/hostname"}`)
		if host, _ := os.ReadFile("/etc/hostname"); !r.IsError && len(host) > 0 && strings.TrimSpace(r.Text) == strings.TrimSpace(string(host)) {
			t.Fatalf("read_file(/etc/hostname) gave the host's: %+v", r)
		}
	})
	t.Run("no network", func(t *testing.T) {
		r := call(t, h, p, "connect", `{"host": "1.1.1.1", "port": 53}`)
		if !r.IsError || r.ErrorType != "OSError" {
			t.Fatalf("connect = %+v, want an OSError", r)
		}
	})
	t.Run("raise", func(t *testing.T) {
		r := call(t, h, p, "boom", `{"msg": "it broke"}`)
		if !r.IsError || r.ErrorType != "ValueError" || r.ErrorMessage != "it broke" || !strings.Contains(r.Text, "ValueError: it broke") {
			t.Fatalf("boom = %+v", r)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		r := call(t, h, p, "spin", `{}`)
		if !r.IsError || r.ErrorType != hosted.ErrTypeTimeout || !strings.Contains(r.Text, "killed") {
			t.Fatalf("spin = %+v", r)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("spin took %s", d)
		}
	})
	t.Run("persistent workers per principal", func(t *testing.T) {
		a, b := engine.Principal{Tenant: "tenant:a"}, engine.Principal{Tenant: "tenant:b"}
		count := func(p engine.Principal) float64 {
			r := call(t, h, p, "counter", `{}`)
			var v struct{ Count float64 }
			if r.IsError || json.Unmarshal(r.Structured, &v) != nil {
				t.Fatalf("counter = %+v", r)
			}
			return v.Count
		}
		if c1, c2 := count(a), count(a); c1 != 1 || c2 != 2 {
			t.Fatalf("a's counter: %v then %v, want 1 then 2 (one warm worker)", c1, c2)
		}
		if c := count(b); c != 1 {
			t.Fatalf("b's counter = %v, want 1: b must not share a's worker", c)
		}
		wa, wb := h.WorkerSandbox(a, "counter"), h.WorkerSandbox(b, "counter")
		if wa == "" || wb == "" || wa == wb {
			t.Fatalf("workers: a %q, b %q", wa, wb)
		}
		if c := count(a); c != 3 {
			t.Fatalf("a's counter after b = %v, want 3", c)
		}
	})
}

func TestHostedLoadErrors(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	dir := t.TempDir()
	cases := []struct{ name, src, want string }{
		{"import error", "import no_such_module_here\n", "ModuleNotFoundError"},
		{"too many", testenv.ManyTools(5), "hosted_tools.max_tools"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".py")
			if err := os.WriteFile(path, []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := profiles.Default().HostedTools
			cfg.Path, cfg.PoolSize, cfg.ReloadInterval, cfg.MaxTools = path, 0, 0, 3
			h, err := hosted.New(context.Background(), hosted.Options{Engine: eng, Config: cfg, StateDir: eng.Config().StateDir})
			if err == nil {
				h.Close()
				t.Fatalf("hosted.New succeeded, want an error mentioning %s", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %s", err, c.want)
			}
		})
	}
}

// TestHostedToolMemory: a tool's memory= is its sandbox's limit. The same
// allocation passes in a tool without one (the default, 512m), and ends
// in an isError result past it.
func TestHostedToolMemory(t *testing.T) {
	h, _ := newHost(t, `from forge_tools import tool

def _fill(mb):
    b = bytearray(mb << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    return len(b) >> 20

@tool(memory="64m")
def small(mb: int) -> int:
    return _fill(mb)

@tool
def roomy(mb: int) -> int:
    return _fill(mb)
`, nil)
	p := engine.LocalPrincipal
	if r := call(t, h, p, "small", `{"mb": 8}`); r.IsError || r.Text != "8" {
		t.Fatalf("small(8) = %+v", r)
	}
	if r := call(t, h, p, "roomy", `{"mb": 160}`); r.IsError || r.Text != "160" {
		t.Fatalf("roomy(160) = %+v, want 160 within the default memory", r)
	}
	r := call(t, h, p, "small", `{"mb": 160}`)
	if !r.IsError || (r.ErrorType != "MemoryError" && !strings.Contains(r.Text, "out of memory")) {
		t.Fatalf("small(160) past memory=64m = %+v, want an out-of-memory isError", r)
	}
	// The pool's next sandbox has the default limits again.
	if r := call(t, h, p, "roomy", `{"mb": 160}`); r.IsError {
		t.Fatalf("roomy(160) after small's OOM = %+v", r)
	}
}

// TestHostedMaxWorkers: with max_workers 2, a third principal's worker
// evicts the least recently used one; the evicted principal's next call
// starts from fresh state, and no principal sees another's.
func TestHostedMaxWorkers(t *testing.T) {
	h, _ := newHost(t, `from forge_tools import tool

_count = 0

@tool(persistent=True)
def counter() -> int:
    global _count
    _count += 1
    return _count
`, func(c *profiles.HostedToolsConfig) { c.MaxWorkers = 2 })
	a, b, c := engine.Principal{Tenant: "tenant:a"}, engine.Principal{Tenant: "tenant:b"}, engine.Principal{Tenant: "tenant:c"}
	count := func(p engine.Principal, want string) {
		t.Helper()
		if r := call(t, h, p, "counter", `{}`); r.IsError || r.Text != want {
			t.Fatalf("%s's counter = %+v, want %s", p.Tenant, r, want)
		}
	}
	workers := func(want ...bool) {
		t.Helper()
		for i, p := range []engine.Principal{a, b, c} {
			if got := h.WorkerSandbox(p, "counter") != ""; got != want[i] {
				t.Fatalf("%s has a worker: %v, want %v", p.Tenant, got, want[i])
			}
		}
	}
	count(a, "1")
	count(b, "1")
	count(a, "2") // b is now the least recently used
	workers(true, true, false)
	wa := h.WorkerSandbox(a, "counter")
	count(c, "1") // evicts b, not a
	workers(true, false, true)
	if h.WorkerSandbox(a, "counter") != wa {
		t.Fatal("a's worker changed when c's evicted b's")
	}
	count(a, "3") // a kept its state
	count(b, "1") // b starts over (its worker was evicted), and evicts c
	workers(true, true, false)
	count(c, "1")
}
