package hosted_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/hosted"
	"github.com/mcp-forge/forge/test/testenv"
)

func TestSaveTool(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	ctx := context.Background()
	p := engine.Principal{Tenant: "tenant:saver"}
	run := func(code string) {
		t.Helper()
		res, err := eng.Execute(ctx, engine.Request{Principal: p, SessionID: "savetool", Code: code})
		if err != nil || !res.Success {
			t.Fatalf("Execute(%q) = %+v, %v", code, res, err)
		}
	}
	t.Cleanup(func() { _ = eng.DestroySession(context.Background(), p, "savetool") })
	// Defined in one cell, saved after others ran: the source is found
	// among the cells the agent kept.
	run("def double(x: int) -> int:\n    \"\"\"Doubles x.\"\"\"\n    return 2 * x\n")
	run("def outer():\n    y = 1\n    def inner(a: int) -> int:\n        return a + y\n    return inner\ninner = outer()\n")
	run("print('another cell')")

	cfg := profiles.Default().HostedTools
	cfg.PoolSize = 0
	var attached *hosted.Host
	s := hosted.NewSaver(hosted.SaverOptions{Engine: eng, Config: cfg, StateDir: eng.Config().StateDir,
		Attach: func(_ engine.Principal, h *hosted.Host) error { attached = h; return nil }})
	t.Cleanup(s.Close)
	for _, st := range s.List(p) { // a previous run's
		_ = s.Remove(ctx, p, st.Name)
	}

	st, err := s.Save(ctx, p, "savetool", "double", "twice", "")
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if len(st.SHA256) != 64 || attached == nil {
		t.Fatalf("saved %+v, attached %v", st, attached)
	}
	r, err := attached.Call(ctx, p, "twice", json.RawMessage(`{"x": 21}`))
	if err != nil || r.IsError || string(r.Structured) != `{"result":42}` {
		t.Fatalf("twice(21) = %+v, %v", r, err)
	}
	if l := s.List(p); len(l) != 1 || l[0].Name != "twice" || l[0].SessionID != "savetool" {
		t.Fatalf("List = %+v", l)
	}
	if other := s.List(engine.Principal{Tenant: "tenant:other"}); len(other) != 0 {
		t.Fatalf("another principal sees %+v", other)
	}

	// A closure, a name that is not a function, a missing session: refused.
	if _, err := s.Save(ctx, p, "savetool", "inner", "", ""); err == nil || !strings.Contains(err.Error(), "enclosing function") {
		t.Fatalf("Save(closure) = %v", err)
	}
	if _, err := s.Save(ctx, p, "savetool", "print", "", ""); err == nil || !strings.Contains(err.Error(), "not a function") {
		t.Fatalf("Save(print) = %v", err)
	}
	if _, err := s.Save(ctx, p, "savetool", "double; import os", "", ""); !errors.Is(err, hosted.ErrSave) {
		t.Fatalf("Save(injection) = %v", err)
	}
	if _, err := s.Save(ctx, engine.Principal{Tenant: "tenant:other"}, "savetool", "double", "", ""); err == nil {
		t.Fatal("another principal saved from this principal's session")
	}

	if err := s.Remove(ctx, p, "twice"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if attached.Has("twice") || len(s.List(p)) != 0 {
		t.Fatalf("after Remove: has %v, list %+v", attached.Has("twice"), s.List(p))
	}
}
