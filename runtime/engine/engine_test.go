package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/internal/hooks"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

func TestMain(m *testing.M) {
	if hooks.Reexec() {
		return
	}
	os.Exit(m.Run())
}

func TestValidate(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	tests := []struct {
		name string
		req  engine.Request
		want string // substring of the error; "" = valid
	}{
		{"defaults", engine.Request{Principal: engine.LocalPrincipal, Code: "1"}, ""},
		{"tighter", engine.Request{Principal: engine.LocalPrincipal, Code: "1", Timeout: time.Second, Memory: 64 << 20, CPUs: 0.5}, ""},
		{"timeout over max", engine.Request{Principal: engine.LocalPrincipal, Code: "1", Timeout: time.Hour}, "execution.max_timeout"},
		{"negative timeout", engine.Request{Principal: engine.LocalPrincipal, Code: "1", Timeout: -time.Second}, "must be positive"},
		{"memory over max", engine.Request{Principal: engine.LocalPrincipal, Code: "1", Memory: 64 << 30}, "memory"},
		{"cpus over max", engine.Request{Principal: engine.LocalPrincipal, Code: "1", CPUs: 64}, "cpus"},
		{"image not allowed", engine.Request{Principal: engine.LocalPrincipal, Code: "1", Image: "docker.io/library/evil:1"}, "not allowed"},
		{"code too big", engine.Request{Principal: engine.LocalPrincipal, Code: strings.Repeat("#", 2<<20)}, "max_code_size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := eng.Validate(tc.req)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			case tc.want != "" && !errors.Is(err, engine.ErrInvalidRequest):
				t.Errorf("got %v, want errors.Is ErrInvalidRequest", err)
			case tc.want != "" && !errors.As(err, new(*engine.RefusedError)):
				t.Errorf("got %#v, want an *engine.RefusedError", err)
			}
		})
	}
}

func TestExecuteCold(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "print(6*7)"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || res.Stdout != "42\n" || res.SessionID != nil {
		t.Errorf("got %+v", res)
	}
}

func TestExecuteWarm(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.Pool.Enabled, c.Pool.Size = true, 2
	})
	eng.Prewarm()
	waitPool(t, eng, 2)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: fmt.Sprintf("print(%d)", i)})
			if err != nil {
				errs <- err
				return
			}
			if res.Stdout != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("run %d: stdout %q", i, res.Stdout)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := eng.PoolStats()
	if len(st) != 1 || st[0].Hits == 0 || st[0].Hits+st[0].Misses != 8 {
		t.Errorf("pool stats %+v", st)
	}
}

// TestRefillWaitsForRun: a run that took a pooled sandbox while others are
// ready does not share the CPU with the start of its replacement; the refill
// starts when the run ends. Stateless runs and a session's first call.
func TestRefillWaitsForRun(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.Pool.Enabled, c.Pool.Size = true, 2
	})
	eng.Prewarm()
	for _, session := range []bool{false, true} {
		waitPool(t, eng, 2)
		hits := eng.PoolStats()[0].Hits
		done := make(chan error, 1)
		go func() {
			_, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal,
				NewSession: session, Code: "import time; time.sleep(1)"})
			done <- err
		}()
		testutil.Eventually(t, 30*time.Second, "the run's take from the pool", func() bool { return eng.PoolStats()[0].Hits != hits })
		// The hold lasts 500 ms from the take at most, the run 1 s; a zygote
		// child or a container would be ready well within the 200 ms looked at.
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if st := eng.PoolStats()[0]; st.Ready+st.Starting > 1 {
				t.Fatalf("session %t: the refill started while the run held its sandbox: %+v", session, st)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		waitPool(t, eng, 2)
	}
}

func TestRequestMemoryLimitWithPool(t *testing.T) {
	eng := testenv.Engine(t, false, func(c *profiles.Config) {
		c.Pool.Enabled, c.Pool.Size = true, 1
	})
	eng.Prewarm()
	waitPool(t, eng, 1)
	res, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "x = bytearray(200 << 20)", Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OOMKilled || res.Success {
		t.Errorf("200m under a 64m request: oom_killed %v success %v error %+v", res.OOMKilled, res.Success, res.Error)
	}
}

func waitPool(t *testing.T, eng *engine.Engine, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := eng.PoolStats()
		if len(st) == 1 && st[0].Ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not ready: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAuditTrail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log, err := audit.Open(path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := profiles.Default()
	cfg.StateDir = testutil.StateDir(t)
	cfg.Pool.Enabled = false
	eng, err := engine.New(context.Background(), engine.Options{Config: cfg, Audit: log})
	if err != nil {
		t.Fatal(err)
	}
	testenv.ImportImages(t, eng.Store(), false)
	code := "print('SECRET_CODE_4711')"
	if _, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: code}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Execute(context.Background(), engine.Request{Principal: engine.LocalPrincipal, Code: "x = 1", SessionID: "audited"}); err != nil {
		t.Fatal(err)
	}
	if err := eng.DestroySession(context.Background(), engine.LocalPrincipal, "audited"); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	log.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "SECRET_CODE_4711") {
		t.Error("the audit log contains the code")
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev audit.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		seen[ev.Event]++
		if ev.Event == audit.EventExecutionRequest && ev.CodeSHA256 == audit.CodeHash(code) {
			seen["hash"]++
		}
		switch ev.Event {
		case audit.EventExecutionRequest, audit.EventSessionCreate, audit.EventSessionDestroy:
			if ev.Principal != engine.LocalPrincipal.Tenant {
				t.Errorf("%s event names principal %q, want %q", ev.Event, ev.Principal, engine.LocalPrincipal.Tenant)
			}
		}
	}
	for _, ev := range []string{audit.EventExecutionRequest, audit.EventContainerCreate, audit.EventContainerStart,
		audit.EventContainerStop, audit.EventContainerRemove, audit.EventSessionCreate, audit.EventSessionDestroy, "hash"} {
		if seen[ev] == 0 {
			t.Errorf("no %s event in the audit log: %v", ev, seen)
		}
	}
}
