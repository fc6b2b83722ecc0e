package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

func call(t *testing.T, eng *engine.Engine, id, code string) *kernel.Result {
	t.Helper()
	res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: code, SessionID: id})
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	if res.SessionID == nil || *res.SessionID != id {
		t.Fatalf("session_id = %v, want %s", res.SessionID, id)
	}
	return res
}

func TestSessionKeepsNamespace(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) { c.Pool.Enabled, c.Pool.Size = true, 2 })
	call(t, eng, "a", "x = 41\nimport math\ndef f(v):\n    return math.sqrt(v)")
	if r := call(t, eng, "a", "x + 1"); fmt.Sprint(r.Result) != "42" {
		t.Errorf("x + 1 = %v (error %+v)", r.Result, r.Error)
	}
	if r := call(t, eng, "a", "f(16)"); fmt.Sprint(r.Result) != "4.0" {
		t.Errorf("f(16) = %v (error %+v)", r.Result, r.Error)
	}
	list, err := eng.ListSessions(context.Background(), engine.LocalPrincipal)
	if err != nil || len(list) == 0 {
		t.Fatalf("List: %v %v", list, err)
	}
	for _, s := range list {
		if s.ID == "a" && (s.VariableCount != 2 || s.MemoryBytes == 0 || s.Status != session.Active) {
			t.Errorf("list_sessions row %+v, want 2 variables (x, f), memory > 0, active", s)
		}
	}
	// A second session sees none of it: variables, files, processes.
	call(t, eng, "a", "open('/workspace/mine.txt', 'w').write('a')\nimport subprocess\np = subprocess.Popen(['sleep', '60'])")
	r := call(t, eng, "b", "import os\n[('x' in globals()), os.path.exists('/workspace/mine.txt'), len([p for p in os.listdir('/proc') if p.isdigit()])]")
	if fmt.Sprint(r.Result) != "[false false 2]" {
		t.Errorf("session b sees %v, want [false false 2]", r.Result)
	}
	// A generated id with backend jupyter.
	res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "y = 1", NewSession: true})
	if err != nil || res.SessionID == nil || !strings.HasPrefix(*res.SessionID, "s-") {
		t.Errorf("new session: %v %+v", err, res)
	}
}

func TestSessionTimeoutKeepsNamespace(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	call(t, eng, "t", "x = 41")
	res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "import time\nwhile True: time.sleep(0.01)", SessionID: "t", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Success {
		t.Errorf("timed_out %v success %v", res.TimedOut, res.Success)
	}
	if r := call(t, eng, "t", "x + 1"); fmt.Sprint(r.Result) != "42" {
		t.Errorf("after the timeout x + 1 = %v, error %+v", r.Result, r.Error)
	}
}

func TestSessionOOMStartsFresh(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	call(t, eng, "o", "x = 41")
	res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "b = bytearray(300 << 20)", SessionID: "o", Memory: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OOMKilled || !strings.Contains(strings.Join(res.Notes, " "), "is gone") {
		t.Errorf("oom_killed %v notes %q", res.OOMKilled, res.Notes)
	}
	r := call(t, eng, "o", "'x' in globals()")
	if r.Result != false || !strings.Contains(strings.Join(r.Notes, " "), "starts a fresh namespace") {
		t.Errorf("after OOM: result %v notes %q", r.Result, r.Notes)
	}
}

func TestSessionLimits(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.Sessions.MaxConcurrent = 2
		c.Sessions.IdleTimeout = profiles.Duration(3 * time.Second)
		c.Sessions.Persist = false
	})
	call(t, eng, "l1", "x = 1")
	call(t, eng, "l2", "x = 2")
	_, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "x = 3", SessionID: "l3"})
	if !errors.Is(err, session.ErrLimit) || !strings.Contains(err.Error(), "max_concurrent") {
		t.Fatalf("third session: %v, want the max_concurrent error", err)
	}
	// The idle reaper destroys both sandboxes and frees their memory.
	deadline := time.Now().Add(10 * time.Second)
	for eng.Sessions().Live() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle sessions still live: %d", eng.Sessions().Live())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := eng.Runtime().Live(); n != 0 {
		t.Errorf("%d sandboxes live after the idle timeout", n)
	}
	call(t, eng, "l3", "x = 3") // room again
}

func TestDocumentStateAndFiles(t *testing.T) {
	eng := testenv.Engine(t, true, func(c *profiles.Config) { c.Images.Default = testenv.DataImage })
	ctx := context.Background()
	if err := eng.WriteFile(ctx, engine.LocalPrincipal, "d", "data/in.csv", []byte("a,b\n1,2\n3,4\n")); err != nil {
		t.Fatal(err)
	}
	r := call(t, eng, "d", `import pandas as pd, numpy as np
import matplotlib.pyplot as plt
df = pd.read_csv('data/in.csv')
arr = np.arange(12).reshape(3, 4)
items = [1, 2, 3]
conf = {'k': 'v'}
plt.plot(df.a, df.b)
plt.savefig('/workspace/plot.png')
int(df.b.sum())`)
	if fmt.Sprint(r.Result) != "6" {
		t.Fatalf("pandas on the written CSV: %v error %+v", r.Result, r.Error)
	}
	png, err := eng.ReadFile(ctx, engine.LocalPrincipal, "d", "plot.png")
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Fatalf("reading the PNG back: %v (%d bytes)", err, len(png))
	}
	doc, err := eng.DocumentState(ctx, engine.LocalPrincipal, "d", map[string]string{"df": "the input table"}, "loaded the CSV", false)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]kernel.Variable{}
	for _, v := range doc.Introspection {
		byName[v.Name] = v
	}
	checks := []struct {
		name, typ string
		shape     string
	}{
		{"df", "pandas.core.frame.DataFrame", "[2 2]"},
		{"arr", "numpy.ndarray", "[3 4]"},
		{"items", "list", "[]"},
		{"conf", "dict", "[]"},
	}
	for _, c := range checks {
		v, ok := byName[c.name]
		if !ok || !strings.Contains(v.Type, c.typ[strings.LastIndex(c.typ, ".")+1:]) || fmt.Sprint(v.Shape) != c.shape || v.SizeBytes <= 0 {
			t.Errorf("introspection of %s = %+v", c.name, v)
		}
	}
	if _, ok := byName["pd"]; ok {
		t.Error("modules must be left out of the introspection")
	}
	if doc.Variables["df"] != "the input table" || doc.Note != "loaded the CSV" {
		t.Errorf("documented %+v", doc)
	}
	// Symlink escapes through the file tools are refused.
	call(t, eng, "d", "import os\nos.symlink('/etc/passwd', '/workspace/esc')")
	if _, err := eng.ReadFile(ctx, engine.LocalPrincipal, "d", "esc"); err == nil {
		t.Error("reading through a symlink out of /workspace succeeded")
	}
	if err := eng.WriteFile(ctx, engine.LocalPrincipal, "d", "../../etc/x", []byte("x")); err == nil {
		t.Error("writing ../../etc/x succeeded")
	}
}

func TestSessionSurvivesRestart(t *testing.T) {
	cfg := func(c *profiles.Config) { c.Sessions.Persist = true }
	eng := testenv.Engine(t, false, cfg)
	ctx := context.Background()
	call(t, eng, "r", "x = 41\nimport threading\nlock = threading.Lock()")
	if err := eng.WriteFile(ctx, engine.LocalPrincipal, "r", "notes/a.txt", []byte("keep me")); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(5 * time.Second); err != nil {
		t.Fatalf("Close (hibernates): %v", err)
	}
	eng2 := testenv.Engine(t, false, cfg)
	list, err := eng2.ListSessions(ctx, engine.LocalPrincipal)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list {
		found = found || (s.ID == "r" && s.Status == session.Hibernated)
	}
	if !found {
		t.Errorf("list after restart: %+v", list)
	}
	r := call(t, eng2, "r", "x + 1")
	if fmt.Sprint(r.Result) != "42" {
		t.Errorf("after restart x + 1 = %v, error %+v notes %q", r.Result, r.Error, r.Notes)
	}
	if !strings.Contains(strings.Join(r.Notes, " "), "lock") {
		t.Errorf("notes should name the unpicklable variable 'lock': %q", r.Notes)
	}
	data, err := eng2.ReadFile(ctx, engine.LocalPrincipal, "r", "notes/a.txt")
	if err != nil || string(data) != "keep me" {
		t.Errorf("file after restart: %q, %v", data, err)
	}
	// The restored files belong to the new sandbox's own host uid (its
	// block is leased afresh), so the sandbox user owns them and can write.
	r = call(t, eng2, "r", "import os\nopen('/workspace/notes/a.txt', 'a').write('!')\n[os.stat(p).st_uid for p in ('/workspace/notes', '/workspace/notes/a.txt')]")
	if fmt.Sprint(r.Result) != "[1000 1000]" {
		t.Errorf("restored files owned by %v inside (error %+v), want uid 1000", r.Result, r.Error)
	}
	if err := eng2.DestroySession(ctx, engine.LocalPrincipal, "r"); err != nil {
		t.Errorf("Destroy: %v", err)
	}
}

func TestHibernationFailureKeepsSession(t *testing.T) {
	log := &testutil.LogBuffer{}
	eng := testenv.EngineWith(t, false, func(c *profiles.Config) {
		c.Sessions.IdleTimeout = profiles.Duration(200 * time.Millisecond)
		c.Sessions.Persist = true
	}, engine.Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
	// 100 MB of state cannot be pickled into the 64 MB /tmp: hibernation
	// fails, and the session must stay live rather than be lost.
	call(t, eng, "big", "x = bytearray(100 << 20)")
	testutil.Eventually(t, 30*time.Second, "the idle reaper's failed hibernation of session big in the log", func() bool {
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, `msg="hibernating idle session"`) && strings.Contains(line, " session=big ") {
				return true
			}
		}
		return false
	})
	r := call(t, eng, "big", "len(x)")
	if fmt.Sprint(r.Result) != "104857600" {
		t.Errorf("after a failed hibernation: result %v error %+v notes %q", r.Result, r.Error, r.Notes)
	}
	call(t, eng, "small", "y = 1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, _ := eng.ListSessions(context.Background(), engine.LocalPrincipal)
		hibernated := false
		for _, s := range list {
			hibernated = hibernated || (s.ID == "small" && s.Status == session.Hibernated)
		}
		if hibernated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the small session was not hibernated: %+v", list)
		}
		time.Sleep(50 * time.Millisecond)
	}
	eng.DestroySession(context.Background(), engine.LocalPrincipal, "big")
	eng.DestroySession(context.Background(), engine.LocalPrincipal, "small")
}

// TestSessionsOfOtherPrincipals: bob sees nothing of alice's session. It is
// not listed; every call on its id fails exactly like a call on an id that
// does not exist (same refusal, same text); calls that create a session
// create bob's own, and alice's namespace and files stay as they were.
func TestSessionsOfOtherPrincipals(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	ctx := context.Background()
	alice, bob := engine.Principal{Tenant: "alice"}, engine.Principal{Tenant: "bob"}
	const id, unknown = "analysis", "never-made"
	res, err := eng.Execute(ctx, engine.Request{Principal: alice, SessionID: id, Code: "secret = 'alice only'"})
	if err != nil || !res.Success {
		t.Fatalf("alice's first call: %v %+v", err, res)
	}
	t.Cleanup(func() {
		eng.DestroySession(ctx, alice, id)
		eng.DestroySession(ctx, bob, id)
	})
	if err := eng.WriteFile(ctx, alice, id, "notes.txt", []byte("alice's notes")); err != nil {
		t.Fatal(err)
	}
	if list, err := eng.ListSessions(ctx, bob); err != nil || len(list) != 0 {
		t.Errorf("bob lists %+v, %v; want nothing", list, err)
	}
	calls := map[string]func(id string) error{
		"state": func(id string) error { _, err := eng.SessionState(ctx, bob, id); return err },
		"document": func(id string) error {
			_, err := eng.DocumentState(ctx, bob, id, map[string]string{"secret": "?"}, "", false)
			return err
		},
		"read":    func(id string) error { _, err := eng.ReadFile(ctx, bob, id, "notes.txt"); return err },
		"list":    func(id string) error { _, err := eng.ListFiles(ctx, bob, id); return err },
		"destroy": func(id string) error { return eng.DestroySession(ctx, bob, id) },
	}
	for name, f := range calls {
		theirs, missing := f(id), f(unknown)
		var refused *engine.RefusedError
		if !errors.As(theirs, &refused) || refused.Kind != engine.RefusedNotFound {
			t.Errorf("%s of alice's session as bob: got %v, want a not-found refusal", name, theirs)
			continue
		}
		if got, want := strings.ReplaceAll(theirs.Error(), id, "ID"), strings.ReplaceAll(missing.Error(), unknown, "ID"); got != want {
			t.Errorf("%s of alice's session as bob: got %q, want the text of an unknown id %q", name, got, want)
		}
	}
	// execute with her id makes bob a session of his own, as with any
	// unknown id: a fresh namespace.
	res, err = eng.Execute(ctx, engine.Request{Principal: bob, SessionID: id, Code: "secret"})
	if err != nil || res.Error == nil || res.Error.Type != "NameError" {
		t.Errorf("bob's execute in %q: %v %+v; want a NameError in a fresh namespace", id, err, res)
	}
	if err := eng.WriteFile(ctx, bob, id, "notes.txt", []byte("bob was here")); err != nil {
		t.Fatal(err)
	}
	if list, _ := eng.ListSessions(ctx, bob); len(list) != 1 {
		t.Errorf("bob lists %+v; want his one session", list)
	}
	res, err = eng.Execute(ctx, engine.Request{Principal: alice, SessionID: id, Code: "secret"})
	if err != nil || res.Result != "alice only" {
		t.Errorf("alice's session after bob's calls: %v %+v; want her variable", err, res)
	}
	if b, err := eng.ReadFile(ctx, alice, id, "notes.txt"); err != nil || string(b) != "alice's notes" {
		t.Errorf("alice's file after bob's calls: %q %v", b, err)
	}
	if _, err := eng.Execute(ctx, engine.Request{SessionID: id, Code: "secret"}); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("a request without a principal: got %v, want ErrInvalidRequest", err)
	}
}
