package e2b

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func envelope(flags byte, payload string) []byte {
	var b bytes.Buffer
	writeEnvelope(&b, flags, []byte(payload))
	return b.Bytes()
}

func streamRequest(body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/process.Process/Start", bytes.NewReader(body))
	r.Header.Set("Content-Type", contentTypeStream)
	return r
}

func TestReadStreamRequest(t *testing.T) {
	huge := make([]byte, 5)
	binary.BigEndian.PutUint32(huge[1:], 0xFFFFFFFF)
	tests := []struct {
		name     string
		body     []byte
		ct       string
		wantCode string // "" = ok
		wantMsg  string
	}{
		{"ok", envelope(0, `{"path":"/home/user"}`), "", "", ""},
		{"ok with charset", envelope(0, `{"path":"x"}`), "application/connect+json; charset=utf-8", "", ""},
		{"empty body", nil, "", codeInvalidArgument, "no message"},
		{"short header", []byte{0, 0, 0}, "", codeInvalidArgument, "3 of its 5 header bytes"},
		{"short payload", append([]byte{0, 0, 0, 0, 10}, "{}"...), "", codeInvalidArgument, "2 of its 10 bytes"},
		{"oversized length", huge, "", codeInvalidArgument, "over the limit"},
		{"compressed", envelope(flagCompressed, `{}`), "", codeUnimplemented, "uncompressed"},
		{"unknown flags", envelope(0x80, `{}`), "", codeInvalidArgument, "unknown flags 0x80"},
		{"end flag on a request", envelope(flagEndStream, `{}`), "", codeInvalidArgument, "end-of-stream"},
		{"two messages", append(envelope(0, `{}`), envelope(0, `{}`)...), "", codeInvalidArgument, "exactly one envelope"},
		{"trailing byte", append(envelope(0, `{}`), 7), "", codeInvalidArgument, "exactly one envelope"},
		{"not JSON", envelope(0, `{"path":`), "", codeInvalidArgument, "not the expected JSON object"},
		{"JSON array", envelope(0, `[1]`), "", codeInvalidArgument, "not the expected JSON object"},
		{"two JSON values", envelope(0, `{} {}`), "", codeInvalidArgument, "after its JSON object"},
		{"binary codec", envelope(0, `{}`), "application/connect+proto", codeUnimplemented, "JSON codec only"},
		{"unary type on a stream", envelope(0, `{}`), "application/json", codeUnimplemented, "JSON codec only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := streamRequest(tt.body)
			if tt.ct != "" {
				r.Header.Set("Content-Type", tt.ct)
			}
			var v struct {
				Path string `json:"path"`
			}
			err := readStreamRequest(r, &v)
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var ce *ConnectError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *ConnectError", err)
			}
			if ce.Code != tt.wantCode || !strings.Contains(ce.Message, tt.wantMsg) {
				t.Errorf("got %s %q, want %s containing %q", ce.Code, ce.Message, tt.wantCode, tt.wantMsg)
			}
		})
	}
}

func TestReadEnvelopeOversizedNotAllocated(t *testing.T) {
	// A length over the cap is refused before any payload is allocated
	// or read.
	hdr := []byte{0, 0x7F, 0xFF, 0xFF, 0xFF}
	_, _, err := readEnvelope(bytes.NewReader(hdr), 1024)
	if err == nil || !strings.Contains(err.Error(), "over the limit of 1024") {
		t.Fatalf("got %v, want the limit named", err)
	}
}

func FuzzReadStreamRequest(f *testing.F) {
	f.Add(envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"]}}`))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, body []byte) {
		var v startRequest
		readStreamRequest(streamRequest(body), &v) // must not panic
	})
}

func TestUnary(t *testing.T) {
	type req struct {
		Path string `json:"path"`
	}
	type resp struct {
		Size int64 `json:"size,string,omitempty"`
	}
	h := func(w http.ResponseWriter, r *http.Request) {
		serveUnary(w, r, func(_ *http.Request, q *req) (*resp, error) {
			switch q.Path {
			case "missing":
				return nil, connectErrorf(codeNotFound, "path %s not found", q.Path)
			case "boom":
				return nil, errors.New("disk on fire")
			case "zero":
				return &resp{}, nil
			}
			return &resp{Size: 1 << 40}, nil
		})
	}
	tests := []struct {
		name, ct, body string
		method         string
		wantStatus     int
		wantBody       string
	}{
		{"ok", "application/json", `{"path":"a","unknownField":1}`, "", 200, `{"size":"1099511627776"}`},
		{"zero values omitted", "application/json", `{"path":"zero"}`, "", 200, `{}`},
		{"empty body is the empty message", "application/json", ``, "", 200, `{"size":"1099511627776"}`},
		{"not found", "application/json", `{"path":"missing"}`, "", 404, `{"code":"not_found","message":"path missing not found"}`},
		{"internal", "application/json", `{"path":"boom"}`, "", 500, `{"code":"internal","message":"forge failed (not the request's fault): disk on fire"}`},
		{"bad JSON", "application/json", `{"path":1}`, "", 400, `"code":"invalid_argument"`},
		{"proto codec", "application/proto", `x`, "", 501, `JSON codec only`},
		{"GET", "application/json", ``, http.MethodGet, 501, `POST`},
		{"oversized", "application/json", `{"path":"` + strings.Repeat("a", maxRPCMessage) + `"}`, "", 400, `over the limit`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.method
			if m == "" {
				m = http.MethodPost
			}
			r := httptest.NewRequest(m, "/filesystem.Filesystem/Stat", strings.NewReader(tt.body))
			r.Header.Set("Content-Type", tt.ct)
			w := httptest.NewRecorder()
			h(w, r)
			if w.Code != tt.wantStatus || !strings.Contains(w.Body.String(), tt.wantBody) {
				t.Errorf("got %d %s, want %d with %s", w.Code, w.Body, tt.wantStatus, tt.wantBody)
			}
			if got := w.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type %q, want application/json", got)
			}
		})
	}
}

// readEnvelopes parses a whole response stream.
func readEnvelopes(t *testing.T, r io.Reader) (msgs []string, end string) {
	t.Helper()
	for {
		flags, payload, err := readEnvelope(r, 1<<24)
		if errors.Is(err, io.EOF) {
			t.Fatalf("stream ended without an end-of-stream envelope (got %q)", msgs)
		}
		if err != nil {
			t.Fatal(err)
		}
		if flags&flagEndStream != 0 {
			if _, _, err := readEnvelope(r, 1<<24); !errors.Is(err, io.EOF) {
				t.Fatalf("data after end-of-stream: %v", err)
			}
			return msgs, string(payload)
		}
		msgs = append(msgs, string(payload))
	}
}

func TestStreamWriter(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		wantEnd string
	}{
		{"ok", nil, `{}`},
		{"error", connectErrorf(codeDeadlineExceeded, "too slow"), `{"error":{"code":"deadline_exceeded","message":"too slow"}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			s := newStreamWriter(w)
			if err := s.Send(map[string]any{"event": map[string]any{"data": map[string]any{"stdout": []byte("hi\n")}}}); err != nil {
				t.Fatal(err)
			}
			s.End(tt.err)
			s.End(nil) // a second End writes nothing
			if err := s.Send(map[string]any{}); err == nil {
				t.Error("Send after End succeeded")
			}
			if w.Code != 200 || w.Header().Get("Content-Type") != contentTypeStream {
				t.Errorf("got %d %q, want 200 %s", w.Code, w.Header().Get("Content-Type"), contentTypeStream)
			}
			msgs, end := readEnvelopes(t, w.Body)
			if want := []string{`{"event":{"data":{"stdout":"aGkK"}}}`}; len(msgs) != 1 || msgs[0] != want[0] {
				t.Errorf("messages %q, want %q", msgs, want)
			}
			if end != tt.wantEnd {
				t.Errorf("end %s, want %s", end, tt.wantEnd)
			}
		})
	}
}

func TestConnectTimeout(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{{"", 0, true}, {"60000", time.Minute, true}, {"-1", 0, false}, {"12345678901", 0, false}, {"1.5", 0, false}} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if tt.v != "" {
			r.Header.Set("Connect-Timeout-Ms", tt.v)
		}
		got, err := connectTimeout(r)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("%q: got %v, %v; want %v, ok=%v", tt.v, got, err, tt.want, tt.ok)
		}
	}
}

func TestProtoTypes(t *testing.T) {
	var v struct {
		Pid    protoUint32 `json:"pid"`
		Depth  protoUint32 `json:"depth"`
		Signal protoEnum   `json:"signal"`
		Other  protoEnum   `json:"other"`
	}
	if err := json.Unmarshal([]byte(`{"pid":"42","depth":3,"signal":"SIGNAL_SIGKILL","other":15}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.Pid != 42 || v.Depth != 3 || v.Signal.Name != "SIGNAL_SIGKILL" || !v.Signal.IsName || v.Other.Number != 15 {
		t.Errorf("got %+v", v)
	}
	for _, bad := range []string{`{"pid":-1}`, `{"pid":"x"}`, `{"pid":4294967296}`, `{"signal":1.5}`} {
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if got := protoTimestamp(time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))); got != "2024-01-02T02:04:05Z" {
		t.Errorf("got %s", got)
	}
	if got := protoTimestamp(time.Date(2024, 1, 2, 3, 4, 5, 120, time.UTC)); got != "2024-01-02T03:04:05.000000120Z" {
		t.Errorf("got %s", got)
	}
}
