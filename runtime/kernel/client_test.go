package kernel

import (
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

const helloLine = `{"op":"hello","python":"3.11.2","pid":1,"modules":{"numpy":false}}` + "\n"

// fakeAgent returns a client whose replies are the given stream; requests are read and dropped.
func fakeAgent(t *testing.T, replies io.Reader, opts Options) *Client {
	t.Helper()
	pr, pw := io.Pipe()
	go io.Copy(io.Discard, pr)
	c := NewClient(replies, pw, opts)
	t.Cleanup(func() { c.Close(); pr.Close() })
	return c
}

// endless yields n bytes of 'a' with no newline, then EOF.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	k := min(len(p), e.n)
	for i := range k {
		p[i] = 'a'
	}
	e.n -= k
	return k, nil
}

func TestHostileReplies(t *testing.T) {
	tests := []struct {
		name   string
		stream io.Reader
		want   error
	}{
		{"non-JSON", strings.NewReader(helloLine + "not json\n"), ErrProtocol},
		{"wrong id", strings.NewReader(helloLine + `{"id":7,"ok":true,"pong":true}` + "\n"), ErrProtocol},
		{"string id", strings.NewReader(helloLine + `{"id":"1","ok":true,"pong":true}` + "\n"), ErrProtocol},
		{"no id", strings.NewReader(helloLine + `{"ok":true,"pong":true}` + "\n"), ErrProtocol},
		{"null", strings.NewReader(helloLine + "null\n"), ErrProtocol},
		{"array", strings.NewReader(helloLine + "[1]\n"), ErrProtocol},
		{"trailing garbage", strings.NewReader(helloLine + `{"id":1,"ok":true,"pong":true} x` + "\n"), ErrProtocol},
		{"no pong", strings.NewReader(helloLine + `{"id":1,"ok":true}` + "\n"), ErrProtocol},
		{"second hello", strings.NewReader(helloLine + helloLine), ErrProtocol},
		{"no hello", strings.NewReader(`{"id":1,"ok":true,"pong":true}` + "\n"), ErrProtocol},
		{"EOF", strings.NewReader(helloLine), ErrAgentExited},
		{"EOF inside a line", strings.NewReader(helloLine + `{"id":1,`), ErrAgentExited},
		{"100 MB line", io.MultiReader(strings.NewReader(helloLine), &endless{n: 100 << 20}), ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, tt.stream, Options{MaxReplyBytes: 1 << 20})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := c.Ping(ctx)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			// Broken for good.
			if err2 := c.Ping(ctx); !errors.Is(err2, tt.want) {
				t.Errorf("second call: got %v, want %v", err2, tt.want)
			}
		})
	}
}

func TestLongLineIsBounded(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	src := &endless{n: 100 << 20}
	c := fakeAgent(t, io.MultiReader(strings.NewReader(helloLine), src), Options{MaxReplyBytes: 1 << 20})
	if err := c.Ping(context.Background()); !errors.Is(err, ErrProtocol) {
		t.Fatalf("got %v, want ErrProtocol", err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("allocated %d bytes for a 100 MB line with a 1 MiB limit", alloc)
	}
	if read := 100<<20 - src.n; read > 2<<20 {
		t.Errorf("read %d bytes of the line, want at most about the 1 MiB limit", read)
	}
}

func TestRequestErrorKeepsClient(t *testing.T) {
	c := fakeAgent(t, strings.NewReader(helloLine+
		`{"id":1,"ok":false,"error":{"type":"ProtocolError","message":"unknown op"}}`+"\n"+
		`{"id":2,"ok":true,"pong":true}`+"\n"), Options{})
	var re *RequestError
	if err := c.Ping(context.Background()); !errors.As(err, &re) || !errors.Is(err, ErrRequest) || re.Type != "ProtocolError" {
		t.Fatalf("got %v, want a RequestError", err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Errorf("got %v after a refused request, want nil", err)
	}
}

func TestCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 10 {
		reqR, reqW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		repR, repW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c := NewClient(repR, reqW, Options{})
		repW.WriteString(helloLine)
		if _, err := c.Hello(context.Background()); err != nil {
			t.Fatal(err)
		}
		// A call blocked on a silent agent returns ErrClosed when the client closes.
		done := make(chan error, 1)
		go func() { done <- c.Ping(context.Background()) }()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("blocked call got %v, want ErrClosed", err)
		}
		reqR.Close()
		repW.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}

func TestExecRejectsBadLimit(t *testing.T) {
	c := fakeAgent(t, strings.NewReader(helloLine), Options{})
	for _, limit := range []int{-1, MaxOutputLimit + 1} {
		if _, err := c.Exec(context.Background(), ExecRequest{Code: "1", OutputLimit: limit}); err == nil {
			t.Errorf("limit %d: got nil error", limit)
		}
	}
}

// fuzzOps are the requests FuzzDecodeReply checks replies against.
var fuzzOps = []*request{
	{Op: "ping"}, {Op: "exec", OutputLimit: DefaultOutputLimit}, {Op: "inspect"},
	{Op: "warm", Modules: []string{"numpy", "json"}}, {Op: "pickle_state"}, {Op: "restore_state"},
	{Op: "list_files"}, {Op: "read_file"}, {Op: "write_file"},
}

func FuzzDecodeReply(f *testing.F) {
	for i, s := range []string{
		helloLine,
		`{"id":1,"ok":true,"pong":true}`,
		`{"id":2,"ok":true,"stdout":"a","stderr":"","truncated":false,"result":{"a":[1,2.5e300]},"display":[{"mime_type":"image/png","data":"iVBORw=="}],"error":null}`,
		`{"id":3,"ok":true,"stdout":"","stderr":"","result":null,"display":[],"error":{"type":"SyntaxError","message":"m","traceback":"t","line":2,"column":5}}`,
		`{"id":4,"ok":false,"error":{"type":"ProtocolError","message":"unknown op"}}`,
		`{"id":5,"ok":true,"variables":[{"name":"x","type":"list","kind":"value","size_bytes":72,"length":3,"repr":"[1, 2, 3]"}]}`,
		`{"id":6,"ok":true,"imported":["numpy"]}`,
		`{"id":7,"ok":true,"saved":["a","b"],"failed":["f"]}`,
		`{"id":8,"ok":true,"restored":["a"],"failed":[]}`,
		`{"id":9,"ok":true,"files":[{"path":"a/b","size":3,"symlink":false}]}`,
		`{"id":1e400}`, `{"id":-1,"ok":true}`, `{"display":[{"mime_type":"text/html"}]}`, `[]`, `null`, `"x"`, `{"op":"hello"}`,
	} {
		f.Add(uint8(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, op uint8, line []byte) {
		req := fuzzOps[int(op)%len(fuzzOps)]
		r, err := decodeReply(line)
		if err == nil && r.Op == "" && *r.OK {
			err = r.validate(req)
		}
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v is not ErrProtocol", err)
			}
			return
		}
		if r.Op == "hello" {
			if r.Python == "" || r.PID <= 0 || len(r.modules) > maxHelloModules {
				t.Fatalf("accepted a bad hello: %q", line)
			}
			return
		}
		if r.ID == nil || r.OK == nil || (!*r.OK && r.Error == nil) || (r.Error != nil && r.Error.Type == "") {
			t.Fatalf("accepted an incomplete reply: %q", line)
		}
		if r.Error != nil && (len(r.Error.Type) > maxNameBytes || len(r.Error.Message) > maxErrorTextBytes) {
			t.Fatalf("accepted an oversized error: %q", line)
		}
		for _, d := range r.display {
			if !strings.Contains(d.MimeType, "/") {
				t.Fatalf("accepted mime type %q", d.MimeType)
			}
		}
		if len(r.display) > maxDisplayItems || len(r.variables) > maxInspectVariables || len(r.files) > maxListFiles ||
			len(r.saved) > maxStateNames || len(r.restored) > maxStateNames || len(r.failed) > maxStateNames ||
			len(r.imported) > len(req.Modules) {
			t.Fatalf("accepted a list over its cap for %s: %q", req.Op, line)
		}
		for _, v := range r.variables {
			if checkVariable(&v) != nil {
				t.Fatalf("accepted variable %+v", v)
			}
		}
	})
}
