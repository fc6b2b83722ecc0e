package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/server/hello"
	"github.com/mcp-forge/forge/server/hello/wire"
	"github.com/mcp-forge/forge/test/testutil"
)

// serverReply is the line ServeStdio writes for one request line.
func serverReply(t *testing.T, cfg *profiles.Config, version, line string) string {
	t.Helper()
	e := newStub()
	e.cfg = cfg
	out := &testutil.LogBuffer{}
	if err := New(e, Options{Version: version}).ServeStdio(t.Context(), strings.NewReader(line+"\n"), out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func helloConfigs() map[string]*profiles.Config {
	named := profiles.Default()
	named.Server.Name = "lab-forge"
	named.Execution.DefaultTimeout = profiles.Duration(7 * time.Second)
	builder := profiles.Default()
	builder.EnvironmentBuilder.Enabled = true
	builder.Images.Data = ""
	noPresets := profiles.Default()
	noPresets.EnvironmentBuilder.Presets = nil
	return map[string]*profiles.Config{"default": profiles.Default(), "named": named, "builder": builder, "noPresets": noPresets}
}

// What `forge serve` sends before its server runs (server/hello) is, byte
// for byte, what the server sends: for every protocol version mcp-go knows
// and some it does not, ids of both kinds, and configurations that change
// the name and the instructions.
func TestHelloIsTheServersReply(t *testing.T) {
	versions := append([]string{"", "1999-01-01", "2025-06-18"}, mcp.ValidProtocolVersions...)
	for name, cfg := range helloConfigs() {
		for _, v := range versions {
			for _, id := range []string{"0", "7", "-3", "123456789012345", `"abc"`, `"a b/c:d"`} {
				line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{"roots":{}},"clientInfo":{"name":"t","version":"1"}}}`, id, v)
				req, err := wire.Parse([]byte(line))
				if err != nil {
					t.Fatalf("%s: Parse: %v", line, err)
				}
				got, err := hello.Reply(req, cfg, "1.2.3")
				if err != nil {
					t.Fatal(err)
				}
				if want := serverReply(t, cfg, "1.2.3", line); string(got) != want {
					t.Fatalf("config %s, %s:\nhello:  %s\nserver: %s", name, line, got, want)
				}
			}
		}
	}
}

// Parse leaves to the server what it would not answer as an initialize
// result, or whose id would not come back as sent.
func TestHelloParseLeavesTheRest(t *testing.T) {
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","id":null,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"1.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","id":1e3,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","id":007,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","id":1234567890123456,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","id":"<&>","method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","id":"\u0041","method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":[]}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":7}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"},"extra":1}`,
		`[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}]`,
		`not json`,
	} {
		if _, err := wire.Parse([]byte(line)); err == nil {
			t.Errorf("Parse accepted %s", line)
		}
	}
}

// prelude is stdin whose first request was answered before ServeStdio.
type prelude struct {
	io.Reader
	req, reply []byte
}

func (p *prelude) Answered() ([]byte, []byte) { return p.req, p.reply }

// A request a Prelude answered is handled first (the session is
// initialized and knows its client) but not answered again, and what
// follows it is served as usual. A reply that was not the server's is
// logged as a bug.
func TestServeStdioPrelude(t *testing.T) {
	const line = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"early-client","version":"1"}}}`
	req, _ := wire.Parse([]byte(line))
	cfg := profiles.Default()
	sent, _ := hello.Reply(req, cfg, "dev")
	next := `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" + `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"
	for _, c := range []struct {
		name  string
		sent  []byte
		wantE bool
	}{{"same", sent, false}, {"differs", bytes.Replace(sent, []byte(`"dev"`), []byte(`"other"`), 1), true}} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			e := newStub()
			s := New(e, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			out := &testutil.LogBuffer{}
			in := &prelude{Reader: strings.NewReader(next), req: []byte(line), reply: c.sent}
			if err := s.ServeStdio(context.Background(), in, out); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("want only ping's reply, got %q", lines)
			}
			var r struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			if json.Unmarshal([]byte(lines[0]), &r) != nil || r.ID != 1 || r.Result == nil {
				t.Fatalf("want ping's result, got %s", lines[0])
			}
			select {
			case <-s.Answered():
			default:
				t.Fatal("the server does not count the answered request as its first reply")
			}
			if !c.wantE && !strings.Contains(logs.String(), "answered while forge started") {
				t.Fatalf("the answered request was not handled; log:\n%s", logs.String())
			}
			if got := strings.Contains(logs.String(), "differs from the server's"); got != c.wantE {
				t.Fatalf("logged a difference: %v, want %v; log:\n%s", got, c.wantE, logs.String())
			}
		})
	}
}
