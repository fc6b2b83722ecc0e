package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/egress"
	"github.com/mcp-forge/forge/runtime/session"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeExecuteArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    ExecuteArgs
		wantErr string // substring; "" = success
	}{
		{"minimal", `{"code":"print(1)"}`, ExecuteArgs{Code: "print(1)"}, ""},
		{"all fields", `{"code":"x","session_id":"s1","backend":"jupyter","timeout":2.5,"memory":"256m","custom_image":"forge/python:3.11","environment":"data-science","env":{"A":"1"},"mcp_tools":["gh"]}`,
			ExecuteArgs{Code: "x", SessionID: "s1", Backend: "jupyter", Timeout: 2500 * time.Millisecond, Memory: 256 << 20,
				CustomImage: "forge/python:3.11", Environment: "data-science", Env: map[string]string{"A": "1"}, MCPTools: []string{"gh"}}, ""},
		{"nulls are absent", `{"code":"x","session_id":null,"timeout":null,"memory":null}`, ExecuteArgs{Code: "x"}, ""},
		{"empty memory is default", `{"code":"x","memory":""}`, ExecuteArgs{Code: "x"}, ""},
		{"huge timeout clamps", `{"code":"x","timeout":1e300}`, ExecuteArgs{Code: "x", Timeout: time.Duration(maxTimeoutSeconds * float64(time.Second))}, ""},
		{"missing code", `{}`, ExecuteArgs{}, "code: is required"},
		{"no arguments", ``, ExecuteArgs{}, "code: is required"},
		{"null arguments", `null`, ExecuteArgs{}, "code: is required"},
		{"empty code", `{"code":"  \n"}`, ExecuteArgs{}, "code: must not be empty"},
		{"code not a string", `{"code":42}`, ExecuteArgs{}, "code: want a string, got number"},
		{"timeout as string", `{"code":"x","timeout":"30"}`, ExecuteArgs{}, "timeout: want a number, got string"},
		{"negative timeout", `{"code":"x","timeout":-1}`, ExecuteArgs{}, "timeout: is -1"},
		{"zero timeout", `{"code":"x","timeout":0}`, ExecuteArgs{}, "timeout: is 0"},
		{"bad memory", `{"code":"x","memory":"lots"}`, ExecuteArgs{}, "memory:"},
		{"memory as number", `{"code":"x","memory":512}`, ExecuteArgs{}, "memory: want a string"},
		{"bad backend", `{"code":"x","backend":"docker"}`, ExecuteArgs{}, `backend: is "docker"`},
		{"unknown field", `{"code":"x","langauge":"py"}`, ExecuteArgs{}, `unknown field "langauge"`},
		{"array", `[1]`, ExecuteArgs{}, "want a JSON object"},
		{"not json", `{code:1}`, ExecuteArgs{}, "not valid JSON"},
		{"trailing", `{"code":"x"} {}`, ExecuteArgs{}, "trailing data"},
		{"env values", `{"code":"x","env":{"A":1}}`, ExecuteArgs{}, "env"},
		{"environment as variables (the old form)", `{"code":"x","environment":{"A":"1"}}`, ExecuteArgs{}, "environment variables for the code go in env"},
		{"environment not a string", `{"code":"x","environment":7}`, ExecuteArgs{}, "the name of a preset"},
		{"egress", `{"code":"x","egress":["pypi.org:443","*.pythonhosted.org:443"]}`,
			ExecuteArgs{Code: "x", Egress: new(egress.MustParse("pypi.org:443", "*.pythonhosted.org:443"))}, ""},
		{"egress none", `{"code":"x","egress":[]}`, ExecuteArgs{Code: "x", Egress: &egress.Policy{}}, ""},
		{"bad egress rule", `{"code":"x","egress":["https://pypi.org"]}`, ExecuteArgs{}, `egress: invalid egress rule "https://pypi.org": a rule names a host, not a URL`},
		{"egress not a list", `{"code":"x","egress":"pypi.org"}`, ExecuteArgs{}, "egress: want an array of strings"},
		{"env values", `{"code":"x","env":{"A":1}}`, ExecuteArgs{}, "env"},
		{"environment as variables (the old form)", `{"code":"x","environment":{"A":"1"}}`, ExecuteArgs{}, "environment variables for the code go in env"},
		{"environment not a string", `{"code":"x","environment":7}`, ExecuteArgs{}, "the name of a preset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeExecuteArgs([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				if !errors.Is(err, ErrInvalidArguments) {
					t.Errorf("got %v, want errors.Is(err, ErrInvalidArguments)", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func FuzzDecodeExecuteArgs(f *testing.F) {
	for _, s := range []string{
		`{"code":"print(1)"}`, `{"code":"x","timeout":1e308,"memory":"9999999t"}`, `{"code":"x","memory":"0.5k"}`,
		`{"code":"x","env":{"a":"b"},"environment":"web","mcp_tools":["t"]}`, `null`, `{"code":null}`, `{"timeout":-0}`,
		`{"code":"x","timeout":5e-324}`, `{"code":"\u0000"}`, `{"code":"x","backend":"simple"}`,
	} {
		f.Add([]byte(s))
	}
	srv := New(newStub(), Options{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := DecodeExecuteArgs(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidArguments) {
				t.Fatalf("error %v does not match ErrInvalidArguments", err)
			}
			return
		}
		if strings.TrimSpace(a.Code) == "" || a.Timeout < 0 || a.Memory < 0 {
			t.Fatalf("accepted bad arguments %+v from %q", a, raw)
		}
		if a.Backend != "" && a.Backend != BackendSimple && a.Backend != BackendJupyter {
			t.Fatalf("accepted backend %q", a.Backend)
		}
		// Whatever decodes must also pass preflight.
		msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_python","arguments":` + string(raw) + `}}`)
		m, reply := checkMessage(msg)
		if reply != nil {
			t.Fatalf("checkMessage refused a tools/call with arguments that decode: %q", raw)
		}
		if _, resp, _ := srv.preflight(context.Background(), m); resp != nil {
			t.Fatalf("preflight refused arguments that decode: %q", raw)
		}
	})
}

func TestListenAddr(t *testing.T) {
	for _, tc := range []struct {
		in          string
		allowRemote bool
		authn       bool
		want        string
		wantErr     error
	}{
		{"8080", false, false, "127.0.0.1:8080", nil},
		{":8080", false, false, "127.0.0.1:8080", nil},
		{"127.0.0.1:0", false, false, "127.0.0.1:0", nil},
		{"localhost:9", false, false, "localhost:9", nil},
		{"[::1]:9", false, false, "[::1]:9", nil},
		{"0.0.0.0:8080", false, false, "", ErrRemoteBind},
		{"[::]:8080", false, false, "", ErrRemoteBind},
		{"192.168.1.5:80", false, false, "", ErrRemoteBind},
		{"example.com:80", false, false, "", ErrRemoteBind},
		{"0.0.0.0:8080", true, false, "", ErrRemoteBind}, // no token: never remote
		{"0.0.0.0:8080", false, true, "", ErrRemoteBind}, // a token, but not asked for
		{"0.0.0.0:8080", true, true, "0.0.0.0:8080", nil},
	} {
		got, err := ListenAddr(tc.in, tc.allowRemote, tc.authn)
		if !errors.Is(err, tc.wantErr) || got != tc.want {
			t.Errorf("ListenAddr(%q, %v, %v) = %q, %v; want %q, %v", tc.in, tc.allowRemote, tc.authn, got, err, tc.want, tc.wantErr)
		}
	}
	for _, bad := range []string{"", "host", "1.2.3.4:99999", "x:y"} {
		if _, err := ListenAddr(bad, true, true); err == nil {
			t.Errorf("ListenAddr(%q) = nil error, want one", bad)
		}
	}
}

func FuzzDecodeSessionArgs(f *testing.F) {
	for _, s := range []string{`{}`, `{"session_id":"a"}`, `{"session_id":"a","path":"x","content":"y","encoding":"base64"}`,
		`{"session_id":"../a"}`, `{"variables":{"x":"y"},"session_id":"s","clear":true}`, `null`, `[1]`, `{"session_id":1}`} {
		f.Add(toolWriteFile, s)
		f.Add(toolDocumentState, s)
	}
	f.Fuzz(func(t *testing.T, tool, raw string) {
		a, err := decodeSessionArgs(tool, []byte(raw))
		if err == nil && a.SessionID != "" {
			if verr := session.ValidID(a.SessionID); verr != nil {
				t.Fatalf("accepted an invalid session id %q", a.SessionID)
			}
		}
	})
}
