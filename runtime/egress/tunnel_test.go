package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
)

// self is the test process standing in for a sandbox: the proxy's peer
// check (SO_PEERCRED, pidfd, uid) admits the test's own connections, so
// these tests drive a real proxy on a real socket without starting one.
type self struct{ dir string }

func (s self) ID() string                      { return "self" }
func (s self) BridgeDir() string               { return s.dir }
func (self) HostUID() int                      { return os.Getuid() }
func (self) HostGID() int                      { return os.Getgid() }
func (self) OwnsProcess(pid int) (bool, error) { return pid == os.Getpid(), nil }

// auditLog keeps the proxy's audit events in memory.
type auditLog struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (a *auditLog) Log(ev audit.Event) {
	a.mu.Lock()
	a.evs = append(a.evs, ev)
	a.mu.Unlock()
}

func (a *auditLog) reset() {
	a.mu.Lock()
	a.evs = nil
	a.mu.Unlock()
}

// reasons are the reasons of the events named name.
func (a *auditLog) reasons(name string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, ev := range a.evs {
		if ev.Event == name {
			out = append(out, ev.Reason)
		}
	}
	return out
}

// serveSelf starts a proxy with opts serving the test process under rules.
func serveSelf(t *testing.T, opts Options, rules ...string) (*Listener, *auditLog) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fe-") // short: the socket path must fit in sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	log := &auditLog{}
	opts.Audit = log
	p := New(opts)
	t.Cleanup(func() { p.Close() })
	l, err := p.Serve(self{dir}, MustParse(rules...), Who{Purpose: "test"})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	return l, log
}

// dial connects to l's socket as a sandbox's process would.
func (l *Listener) dial(t *testing.T) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: l.SocketPath(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawTarget is a TCP server on loopback that greets each connection with
// banner (when not empty), then reports everything the connection sent
// until it closed.
type rawTarget struct {
	port int
	got  chan string
}

func newRawTarget(t *testing.T, banner string) *rawTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rt := &rawTarget{port: ln.Addr().(*net.TCPAddr).Port, got: make(chan string, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if banner != "" {
					c.Write([]byte(banner))
				}
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				b, _ := io.ReadAll(c)
				rt.got <- string(b)
			}()
		}
	}()
	return rt
}

// received is what the target's next connection sent, or "(no connection)".
func (rt *rawTarget) received(t *testing.T) string {
	t.Helper()
	select {
	case s := <-rt.got:
		return s
	case <-time.After(15 * time.Second):
		return "(no connection)"
	}
}

// connect sends CONNECT hostport on c and reads the answer's status line
// and headers (nothing more: the tunnel's bytes stay unread).
func connect(t *testing.T, c net.Conn, hostport string) string {
	t.Helper()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	var head []byte
	b := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := c.Read(b); err != nil {
			t.Fatalf("reading the CONNECT answer (%q so far): %v", head, err)
		}
		head = append(head, b[0])
	}
	_ = c.SetReadDeadline(time.Time{})
	return strings.SplitN(string(head), "\r\n", 2)[0]
}

// readRest reads c until it closes (within 15 s), reporting what came and
// how. A reset is a close: the proxy closes with the client's bytes unread.
func readRest(c net.Conn) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := io.ReadAll(c)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil
	}
	return string(b), err
}

func hasReason(reasons []string, want string) bool {
	for _, r := range reasons {
		if strings.Contains(r, want) {
			return true
		}
	}
	return false
}

// TestTunnelOnlyTLS: a CONNECT tunnel to an allowed host carries a TLS
// ClientHello and nothing else. Plain HTTP (with a leading CRLF, or a
// method no list would have), SSH, other TLS records and a ClientHello's
// look-alikes are refused after the 200: the tunnel closes, the target
// gets not one byte, and the client sees none of the target's (its banner
// stays unread), and each refusal is audited.
func TestTunnelOnlyTLS(t *testing.T) {
	target := newRawTarget(t, "SSH-2.0-target\r\n")
	l, log := serveSelf(t, Options{HelloTimeout: 5 * time.Second}, fmt.Sprintf("localhost:%d!private", target.port))
	for _, tc := range []struct{ name, send, reason string }{
		{"leading CRLF", "\r\nGET / HTTP/1.1\r\nHost: other.example\r\n\r\n", "record type 0x0d, not handshake"},
		{"unlisted method", "PROPFIND / HTTP/1.1\r\nHost: other.example\r\n\r\n", "record type 0x50, not handshake"},
		{"ssh", "SSH-2.0-OpenSSH_9.2\r\n", "record type 0x53, not handshake"},
		{"tls alert", "\x15\x03\x03\x00\x02\x02\x28", "record type 0x15"},
		{"record version", "\x16\x03\x07\x00\x40\x01\x00\x00\x3c", "record version 3.7"},
		{"record too long", "\x16\x03\x01\x40\x01\x01\x00\x00\x3c", "record length 16385"},
		{"not a ClientHello", "\x16\x03\x03\x00\x40\x02\x00\x00\x3c" + strings.Repeat("\x00", 60), "handshake type 2, not ClientHello"},
		{"hello that is garbage", "\x16\x03\x01\x00\x08\x01\x00\x00\x04GET /", "unreadable TLS ClientHello"},
		{"closed early", "\x16\x03", "tunnel closed before a TLS ClientHello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.reset()
			c := l.dial(t)
			if got := connect(t, c, fmt.Sprintf("localhost:%d", target.port)); got != "HTTP/1.1 200 Connection established" {
				t.Fatalf("CONNECT: %q", got)
			}
			c.Write([]byte(tc.send))
			if tc.name == "closed early" {
				c.CloseWrite()
			}
			if rest, err := readRest(c); rest != "" || err != nil {
				t.Errorf("after the refused bytes the client read %q, %v; want the tunnel closed with nothing from the target", rest, err)
			}
			if got := target.received(t); got != "" {
				t.Errorf("the target received %q, want nothing", got)
			}
			if r := log.reasons(audit.EventEgressDeny); !hasReason(r, tc.reason) {
				t.Errorf("deny reasons %q, want one with %q", r, tc.reason)
			}
			if r := log.reasons(audit.EventEgressAllow); len(r) != 0 {
				t.Errorf("allowed: %q", r)
			}
		})
	}
}

// TestTunnelTLS: a real crypto/tls client through a tunnel reaches a TLS
// server, by name (SNI = the CONNECT host) and by IP (no SNI, the
// certificate verified against the IP); a hello naming another server is
// refused.
func TestTunnelTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	l, log := serveSelf(t, Options{HelloTimeout: 5 * time.Second}, fmt.Sprintf("localhost:%d!private", port), fmt.Sprintf("127.0.0.1:%d", port))
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	for _, tc := range []struct {
		name, host string
		cfg        *tls.Config
		want       string // "" = refused
	}{
		{"name", "localhost", &tls.Config{ServerName: "localhost", InsecureSkipVerify: true}, "hello from localhost"},
		{"ip", "127.0.0.1", &tls.Config{ServerName: "127.0.0.1", RootCAs: roots}, "hello from 127.0.0.1"},
		{"other SNI", "localhost", &tls.Config{ServerName: "evil.example", InsecureSkipVerify: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.reset()
			hostport := fmt.Sprintf("%s:%d", tc.host, port)
			c := l.dial(t)
			if got := connect(t, c, hostport); got != "HTTP/1.1 200 Connection established" {
				t.Fatalf("CONNECT: %q", got)
			}
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			tc.cfg.NextProtos = []string{"http/1.1"}
			tlc := tls.Client(c, tc.cfg)
			err := tlc.Handshake()
			if tc.want == "" {
				if err == nil {
					t.Fatal("handshake succeeded, want the tunnel closed")
				}
				if r := log.reasons(audit.EventEgressDeny); !hasReason(r, `TLS SNI "evil.example" does not match the CONNECT host localhost`) {
					t.Errorf("deny reasons %q", r)
				}
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			fmt.Fprintf(tlc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostport)
			resp, err := http.ReadResponse(bufio.NewReader(tlc), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if want := tc.want + fmt.Sprintf(":%d", port); string(body) != want {
				t.Errorf("body %q, want %q", body, want)
			}
			if r := log.reasons(audit.EventEgressAllow); len(r) != 1 {
				t.Errorf("allow events: %q, want one", r)
			}
		})
	}
}

// TestHelloTimeout: the whole ClientHello must arrive within HelloTimeout
// of the tunnel's opening, whether the client sends nothing (a protocol
// where the server speaks first) or dribbles a hello's first bytes one at
// a time; the idle timeout, far longer, does not extend it.
func TestHelloTimeout(t *testing.T) {
	target := newRawTarget(t, "")
	const hello = 700 * time.Millisecond
	l, log := serveSelf(t, Options{HelloTimeout: hello, IdleTimeout: time.Minute}, fmt.Sprintf("localhost:%d!private", target.port))
	for _, tc := range []struct {
		name   string
		burst  string // sent at once
		send   string // then dribbled a byte every 100 ms
		reason string
	}{
		{"silent", "", "", "no TLS ClientHello within 700ms"},
		{"dribbled header", "", "\x16\x03\x01\x00", "no TLS ClientHello within 700ms"},
		{"dribbled hello", "\x16\x03\x01\x00\x40\x01\x00\x00\x3c\x03\x03", strings.Repeat("\x00", 100), "no complete TLS ClientHello within 700ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.reset()
			c := l.dial(t)
			// Timed from before the CONNECT: the proxy's hello deadline
			// starts when it has answered it, a moment before the client
			// reads the answer.
			start := time.Now()
			if got := connect(t, c, fmt.Sprintf("localhost:%d", target.port)); got != "HTTP/1.1 200 Connection established" {
				t.Fatalf("CONNECT: %q", got)
			}
			c.Write([]byte(tc.burst))
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for i := 0; i < len(tc.send); i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := c.Write([]byte{tc.send[i]}); err != nil {
						return
					}
				}
			}()
			rest, err := readRest(c)
			took := time.Since(start)
			if err != nil || rest != "" {
				t.Fatalf("after %s: read %q, %v; want the tunnel closed by the proxy", took, rest, err)
			}
			if took < hello || took > hello+3*time.Second {
				t.Errorf("the tunnel closed after %s, want about the hello timeout %s", took, hello)
			}
			if r := log.reasons(audit.EventEgressDeny); !hasReason(r, tc.reason) {
				t.Errorf("deny reasons %q, want one with %q", r, tc.reason)
			}
			if got := target.received(t); got != "" {
				t.Errorf("the target received %q, want nothing", got)
			}
		})
	}
}

// TestRawTCPRule: a rule marked !tcp lets its tunnels carry any protocol,
// the server's bytes first; the flag is the rule's own: a !tcp rule for
// public addresses does not lend it to a !private rule for the same name.
func TestRawTCPRule(t *testing.T) {
	target := newRawTarget(t, "SSH-2.0-target\r\n")
	l, log := serveSelf(t, Options{HelloTimeout: 5 * time.Second}, fmt.Sprintf("localhost:%d!private!tcp", target.port))
	c := l.dial(t)
	if got := connect(t, c, fmt.Sprintf("localhost:%d", target.port)); got != "HTTP/1.1 200 Connection established" {
		t.Fatalf("CONNECT: %q", got)
	}
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	banner := make([]byte, len("SSH-2.0-target\r\n"))
	if _, err := io.ReadFull(c, banner); err != nil || string(banner) != "SSH-2.0-target\r\n" {
		t.Fatalf("banner: %q, %v", banner, err)
	}
	c.Write([]byte("SSH-2.0-client\r\n"))
	c.CloseWrite()
	if got := target.received(t); got != "SSH-2.0-client\r\n" {
		t.Errorf("the target received %q", got)
	}
	if r := log.reasons(audit.EventEgressAllow); len(r) != 1 {
		t.Errorf("allow events %q, want one", r)
	}

	// Two rules for the name: TLS to private addresses, any protocol to
	// public ones. localhost is private: the tunnel must be TLS.
	l2, log2 := serveSelf(t, Options{HelloTimeout: 5 * time.Second},
		fmt.Sprintf("localhost:%d!private", target.port), fmt.Sprintf("localhost:%d!tcp", target.port))
	c = l2.dial(t)
	if got := connect(t, c, fmt.Sprintf("localhost:%d", target.port)); got != "HTTP/1.1 200 Connection established" {
		t.Fatalf("CONNECT: %q", got)
	}
	c.Write([]byte("SSH-2.0-client\r\n"))
	if rest, err := readRest(c); rest != "" || err != nil {
		t.Errorf("read %q, %v; want the tunnel closed", rest, err)
	}
	if got := target.received(t); got != "" {
		t.Errorf("the target received %q, want nothing", got)
	}
	if r := log2.reasons(audit.EventEgressDeny); !hasReason(r, "does not start with a TLS ClientHello") {
		t.Errorf("deny reasons %q", r)
	}
}

// TestProxyRequestHost: plain HTTP goes as a proxy request with an
// absolute http:// URI; a Host header that names another host or port is
// refused before anything is sent upstream, and a name rule without ports
// allows 443 only, not plain http:// on 80.
func TestProxyRequestHost(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host)
		mu.Unlock()
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	l, log := serveSelf(t, Options{}, fmt.Sprintf("localhost:%d!private", port), "localhost!private")
	hp := fmt.Sprintf("localhost:%d", port)
	for _, tc := range []struct {
		name, uri, headers string
		status             int
		reason             string // of the deny, when refused
	}{
		{"host agrees", "http://" + hp + "/a", "Host: " + hp + "\r\n", 200, ""},
		{"host agrees, other case and dot", "http://" + hp + "/a", "Host: LocalHost.:" + fmt.Sprint(port) + "\r\n", 200, ""},
		{"no host header", "http://" + hp + "/a", "", 200, ""},
		{"other host", "http://" + hp + "/a", "Host: other.example\r\n", 400, `the Host header "other.example" does not name the request URI's host ` + hp},
		{"other port", "http://" + hp + "/a", "Host: localhost:1\r\n", 400, "does not name the request URI's host"},
		{"two hosts", "http://" + hp + "/a", "Host: " + hp + "\r\nHost: other.example\r\n", 400, "malformed proxy request"},
		{"origin form", "/a", "Host: " + hp + "\r\n", 400, "needs an absolute http:// URI"},
		{"name rule default port", "http://localhost/a", "Host: localhost\r\n", 403, "localhost:80 is not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.reset()
			mu.Lock()
			seen = nil
			mu.Unlock()
			c := l.dial(t)
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\n%sConnection: close\r\n\r\n", tc.uri, tc.headers)
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.status)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.status == 200 {
				if string(body) != "hello from "+hp || len(seen) != 1 {
					t.Errorf("body %q, upstream saw Hosts %q; want %q once", body, seen, hp)
				}
				return
			}
			if len(seen) != 0 {
				t.Errorf("upstream saw requests for %q, want none", seen)
			}
			if r := log.reasons(audit.EventEgressDeny); !hasReason(r, tc.reason) {
				t.Errorf("deny reasons %q, want one with %q", r, tc.reason)
			}
		})
	}
}
