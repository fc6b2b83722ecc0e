package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// One engine per test binary: it owns the sandbox runtime of this process.
var (
	realOnce sync.Once
	realEng  *engine.Engine
	realErr  error
	dataOK   bool
)

// realEngine returns an engine on the shared test state directory with
// forge/python:3.11 (and forge/python-data:3.13 when its layout is cached)
// imported.
func realEngine(t *testing.T) *engine.Engine {
	t.Helper()
	testutil.RequiresRoot(t)
	// Everything that may t.Fatal runs before the Do: a Fatal inside it
	// would end the Do with no engine and no error, and every later test
	// would get a nil engine. Inside, realErr says "not finished" until the
	// end, so that even a panic leaves later tests failing with a message.
	layout := testutil.BaseImageLayout(t, "forge/python:3.11")
	stateDir := testutil.StateDir(t)
	mcpServer := testenv.MCPServer(t)
	wheels := realWheelhouse(t)
	realOnce.Do(func() {
		realErr = errors.New("the engine's setup did not finish (see the first test that failed)")
		ctx := context.Background()
		cfg := profiles.Default()
		cfg.StateDir = stateDir
		cfg.Pool.Size = 1
		cfg.Server.ShutdownGrace = profiles.Duration(5 * time.Second)
		cfg.MCPTools = map[string]profiles.MCPToolServer{"test": {Command: mcpServer}}
		b := &cfg.EnvironmentBuilder
		b.Enabled, b.Offline, b.Wheelhouse, b.AllowedPackages = true, true, wheels, []string{"*"}
		var eng *engine.Engine
		if eng, realErr = engine.New(ctx, engine.Options{Config: cfg, Observer: &testObserver}); realErr != nil {
			return
		}
		realEng = eng
		if _, realErr = realEng.Store().Pull(ctx, "oci:"+layout); realErr != nil {
			return
		}
		if dl := testutil.LayoutDir("forge/python-data:3.13"); fileExists(dl + "/index.json") {
			_, err := realEng.Store().Pull(ctx, "oci:"+dl)
			dataOK = err == nil
		}
	})
	if realErr != nil {
		t.Fatalf("starting the engine: %v", realErr)
	}
	return realEng
}

// realWheelValue is forgetestpkg.VALUE in the real engine's wheelhouse.
var realWheelValue = fmt.Sprintf("v%d", time.Now().UnixNano())

var realWheels struct {
	once sync.Once
	dir  string
}

// realWheelhouse is the real engine's offline wheelhouse, made once.
func realWheelhouse(t *testing.T) string {
	realWheels.once.Do(func() {
		dir, err := os.MkdirTemp("", "forge-wheels-")
		if err == nil {
			os.Chmod(dir, 0o755) // the build sandbox's user reads it
			testenv.MakeWheel(t, dir, "forgetestpkg", "1.0", realWheelValue)
		}
		realWheels.dir = dir
	})
	return realWheels.dir
}

func closeRealEngine() {
	if realEng != nil {
		realEng.Close(5 * time.Second)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func structured(t *testing.T, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return m
}

func TestExecuteReal(t *testing.T) {
	c := connect(t, New(realEngine(t), Options{}))
	t.Run("print", func(t *testing.T) {
		res, err := call(t, c, map[string]any{"code": "print(1)"})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || !strings.Contains(text(res), "stdout:\n1") || structured(t, res)["stdout"] != "1\n" {
			t.Errorf("got isError=%v %q %v, want stdout 1", res.IsError, text(res), res.StructuredContent)
		}
	})
	t.Run("result", func(t *testing.T) {
		res, err := call(t, c, map[string]any{"code": "x = 6\nx * 7", "timeout": 10, "memory": "256m"})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || structured(t, res)["result"] != float64(42) || !strings.Contains(text(res), "result:\n42") {
			t.Errorf("got isError=%v %q, want result 42", res.IsError, text(res))
		}
	})
	t.Run("failing cell", func(t *testing.T) {
		res, err := call(t, c, map[string]any{"code": "print('before')\nraise ValueError('boom')"})
		if err != nil {
			t.Fatal(err)
		}
		sc := structured(t, res)
		e, _ := sc["error"].(map[string]any)
		if !res.IsError || e["type"] != "ValueError" || !strings.Contains(text(res), `line 2`) || !strings.Contains(text(res), "before") {
			t.Errorf("got isError=%v %q %v, want a ValueError at line 2 with the output", res.IsError, text(res), sc)
		}
	})
	t.Run("env", func(t *testing.T) {
		res, err := call(t, c, map[string]any{"code": "import os, subprocess\n[os.environ['FORGE_T'], subprocess.run(['sh', '-c', 'echo $FORGE_T'], capture_output=True, text=True).stdout.strip()]",
			"env": map[string]string{"FORGE_T": "a b"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || fmt.Sprint(structured(t, res)["result"]) != "[a b a b]" {
			t.Errorf("got isError=%v %q, want the variable in the code and its children", res.IsError, text(res))
		}
		res, err = call(t, c, map[string]any{"code": "1", "env": map[string]string{"1BAD": "x"}})
		if err != nil || !res.IsError || !strings.Contains(text(res), "not a variable name") {
			t.Errorf("bad env name: %v %q", err, text(res))
		}
	})
	t.Run("timed out", func(t *testing.T) {
		res, err := call(t, c, map[string]any{"code": "while True: pass", "timeout": 1})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || structured(t, res)["timed_out"] != true || !strings.Contains(text(res), "timeout") {
			t.Errorf("got isError=%v %q, want a timed-out tool error", res.IsError, text(res))
		}
	})
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"timeout over max", map[string]any{"code": "1", "timeout": 301}, "execution.max_timeout"},
		{"memory over max", map[string]any{"code": "1", "memory": "3g"}, "2g"},
		{"image not allowed", map[string]any{"code": "1", "custom_image": "docker.io/library/python:3.12"}, "not allowed"},
		{"image missing", map[string]any{"code": "1", "custom_image": "forge/nope:1"}, "image not found"},
		{"code too large", map[string]any{"code": "#" + strings.Repeat("x", 1<<20)}, "execution.max_code_size"},
		{"egress widened", map[string]any{"code": "1", "egress": []string{"pypi.org:80"}},
			"pypi.org:80 not allowed by the profile's egress (execution.egress), which allows no egress (none); a request may only narrow it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := call(t, c, tc.args)
			if err != nil {
				t.Fatalf("got protocol error %v, want a tool error", err)
			}
			if !res.IsError || !strings.Contains(text(res), tc.want) {
				t.Errorf("got isError=%v %q, want a tool error naming %q", res.IsError, text(res), tc.want)
			}
		})
	}
}

func TestPlotReal(t *testing.T) {
	eng := realEngine(t)
	testutil.BaseImageLayout(t, "forge/python-data:3.13")
	if !dataOK {
		t.Fatal("importing forge/python-data:3.13 failed")
	}
	c := connect(t, New(eng, Options{}))
	res, err := call(t, c, map[string]any{"custom_image": "forge/python-data:3.13", "timeout": 60,
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')"})
	if err != nil {
		t.Fatal(err)
	}
	var imgs int
	for _, c := range res.Content {
		if img, ok := c.(mcp.ImageContent); ok && img.MIMEType == "image/png" && len(img.Data) > 100 {
			imgs++
		}
	}
	if res.IsError || imgs != 1 {
		t.Errorf("got isError=%v, %d png images, text %q; want one image", res.IsError, imgs, text(res))
	}
}

func TestResourcesReal(t *testing.T) {
	c := connect(t, New(realEngine(t), Options{Version: "t"}))
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uriEnvironments
	res, err := c.ReadResource(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var list EnvironmentList
	if err := json.Unmarshal([]byte(res.Contents[0].(mcp.TextResourceContents).Text), &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, img := range list.Images {
		if img.Name == "forge/python:3.11" {
			found = img.Present && img.Allowed && img.Python == "3.11"
		}
	}
	if !found {
		t.Errorf("got images %+v, want forge/python:3.11, present, allowed, python 3.11", list.Images)
	}
	req.Params.URI = uriEnvironmentInfo
	if res, err = c.ReadResource(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	var info EnvironmentInfo
	if err := json.Unmarshal([]byte(res.Contents[0].(mcp.TextResourceContents).Text), &info); err != nil {
		t.Fatal(err)
	}
	if !info.DefaultImage.Present || info.DefaultImage.Python != "3.11" {
		t.Errorf("got default image %+v, want present with python 3.11", info.DefaultImage)
	}
}

// TestStdinEOFDrains: the client closes stdin while code runs; the reply
// still arrives, and ServeStdio returns after it.
func TestStdinEOFDrains(t *testing.T) {
	s := New(realEngine(t), Options{})
	in, out := strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"import time\ntime.sleep(1)\nprint('done')"}}}`,
	}, "\n")+"\n"), &testutil.LogBuffer{}
	start := time.Now()
	if err := s.ServeStdio(t.Context(), in, out); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("ServeStdio returned after %s, before the 1 s execution finished", d)
	}
	var got bool
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			ID     int
			Result struct{ StructuredContent struct{ Stdout string } }
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.ID == 2 {
			got = m.Result.StructuredContent.Stdout == "done\n"
		}
	}
	if !got {
		t.Errorf("no reply with stdout done to the call in flight at EOF; output:\n%s", out)
	}
}

// TestShutdownKillsAfterGrace: code that outlives the grace period is killed
// and answered, and ServeStdio returns about when the grace period ends.
func TestShutdownKillsAfterGrace(t *testing.T) {
	eng := realEngine(t)
	s := New(eng, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	out := &testutil.LogBuffer{}
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(ctx, pr, out) }()
	fmt.Fprintln(pw, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	// The progress token makes the code's "started" come out as a
	// notification: once it is seen, the code runs and a shutdown must wait.
	fmt.Fprintln(pw, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"execute_python","arguments":{"code":"import time\nprint('started', flush=True)\ntime.sleep(60)","timeout":120}}}`)
	testutil.Eventually(t, 30*time.Second, "the code's started in a progress notification", func() bool {
		return strings.Contains(out.String(), `"stdout":"started\n"`)
	})
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ServeStdio did not return within 30 s of the shutdown")
	}
	grace := s.shutdownGrace()
	if d := time.Since(start); d < grace-100*time.Millisecond || d > grace+10*time.Second {
		t.Errorf("shutdown took %s, want about the grace period %s", d, grace)
	}
	if !strings.Contains(out.String(), `"id":2`) {
		t.Errorf("the killed call got no reply; output:\n%s", out)
	}
	pw.Close()
}

func TestHTTPReal(t *testing.T) {
	s := New(realEngine(t), Options{InsecureNoAuth: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeHTTP(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	}()
	c, err := client.NewStreamableHttpClient("http://" + ln.Addr().String() + EndpointPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	res, err := call(t, c, map[string]any{"code": "print(2 + 2)"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || structured(t, res)["stdout"] != "4\n" {
		t.Errorf("got isError=%v %q, want stdout 4", res.IsError, text(res))
	}
	if _, err := call(t, c, map[string]any{"code": false}); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("malformed arguments over HTTP: got %v, want an invalid-params error", err)
	}
}

// TestBuildToolReal builds an environment through the MCP tool (offline,
// from a wheelhouse the test made), with progress notifications, then
// runs code in it and finds it in forge://environments/list.
func TestBuildToolReal(t *testing.T) {
	eng := realEngine(t)
	c := connect(t, New(eng, Options{}))
	var mu sync.Mutex
	var progress []mcp.JSONRPCNotification
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			mu.Lock()
			progress = append(progress, n)
			mu.Unlock()
		}
	})
	name := fmt.Sprintf("t-mcp-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for eng.RemoveEnvironment(context.Background(), engine.LocalPrincipal, name) != nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling for the run's sandbox to go, with a deadline
		}
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = toolBuild
	req.Params.Arguments = map[string]any{"name": name, "packages": []string{"forgetestpkg"}, "description": "test"}
	req.Params.Meta = &mcp.Meta{ProgressToken: "build-1"}
	res, err := c.CallTool(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	sc := structured(t, res)
	if res.IsError || sc["image"] != "forge/custom:"+name || sc["cached"] != false {
		t.Fatalf("got isError=%v %q %v", res.IsError, text(res), sc)
	}
	mu.Lock()
	n := len(progress)
	mu.Unlock()
	if n < 3 {
		t.Errorf("%d progress notifications, want one per step", n)
	}
	run, err := call(t, c, map[string]any{"code": "import forgetestpkg\nforgetestpkg.VALUE", "custom_image": name})
	if err != nil || run.IsError || structured(t, run)["result"] != realWheelValue {
		t.Errorf("run in the environment: %v %q", err, text(run))
	}
	// Code mode in the environment: a downstream tool and the package together.
	run, err = call(t, c, map[string]any{"code": "import forgetestpkg\n[add(a=40, b=2)['sum'], forgetestpkg.VALUE]", "custom_image": name, "mcp_tools": []string{"add"}})
	if err != nil || run.IsError || fmt.Sprint(structured(t, run)["result"]) != fmt.Sprint([]any{float64(42), realWheelValue}) {
		t.Errorf("code mode in the environment: %v %q", err, text(run))
	}
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = uriEnvironments
	list, err := c.ReadResource(t.Context(), rr)
	if err != nil {
		t.Fatal(err)
	}
	if body := list.Contents[0].(mcp.TextResourceContents).Text; !strings.Contains(body, `"name": "`+name+`"`) || !strings.Contains(body, `"forgetestpkg"`) {
		t.Errorf("environments/list does not show %s with its package: %s", name, body)
	}
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"name": name, "packages": []string{"numpy; os_name == 'posix' or"}}, "invalid package specification"},
		{map[string]any{"name": "bad name", "packages": []string{"forgetestpkg"}}, "letters, digits and hyphens"},
		{map[string]any{"name": name, "packages": []string{"forgetestpkg"}, "preset": "nope"}, `unknown preset "nope"; configured: data-science, web (environment_builder.presets)`},
		{map[string]any{"name": name, "packages": []string{"forgetestpkg"}, "template": "nope"}, `unknown preset "nope"`}, // preset's old name
	} {
		req.Params.Arguments, req.Params.Meta = tc.args, nil
		res, err := c.CallTool(t.Context(), req)
		if err != nil || !res.IsError || !strings.Contains(text(res), tc.want) {
			t.Errorf("%v: got %v %q, want a tool error naming %q", tc.args, err, text(res), tc.want)
		}
	}
	req.Params.Arguments = map[string]any{"packages": []string{"x"}}
	if _, err := c.CallTool(t.Context(), req); err == nil || !strings.Contains(err.Error(), "name") {
		t.Errorf("missing name: got %v, want an invalid-params error naming name", err)
	}
}
