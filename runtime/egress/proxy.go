package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-forge/forge/internal/audit"
	"github.com/mcp-forge/forge/internal/ownedsock"
	"github.com/mcp-forge/forge/internal/peercred"
	"github.com/mcp-forge/forge/profiles"
)

// SocketName is a sandbox's egress socket inside its bridge directory, and
// SandboxSocketPath where the sandbox sees it (the directory is mounted at
// /run/forge, which every base image's skeleton has).
const (
	SocketName        = "egress.sock"
	SandboxSocketPath = "/run/forge/" + SocketName
)

// Defaults of Options' zero fields.
const (
	DefaultMaxTunnels     = 16
	DefaultMaxHeaderBytes = 16 << 10
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultResolveTimeout = 5 * time.Second
	DefaultDialTimeout    = 10 * time.Second
	DefaultHelloTimeout   = 10 * time.Second
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultMaxAudited     = 50
)

// maxHello caps the bytes read while looking for a ClientHello's SNI (a
// hello with post-quantum key shares is ~2 KiB; a record is at most 16 KiB).
const maxHello = 64 << 10

// Who is what the audit log says about a socket's connections.
type Who struct {
	SandboxID string
	SessionID string // "" for a stateless run or a build
	Principal string // the tenant the sandbox runs for
	Purpose   string // "execute", "build", ...
}

// Sandbox is what Serve needs of the sandbox it serves (*sandbox.Sandbox
// is one).
type Sandbox interface {
	ID() string
	// BridgeDir is the host directory mounted at /run/forge in this
	// sandbox and no other; the socket is made there.
	BridgeDir() string
	peercred.Owner
}

// Auditor receives audit events; *audit.Logger is one.
type Auditor interface {
	Log(audit.Event)
}

// Options configure a Proxy.
type Options struct {
	Logger *slog.Logger // nil: discard
	Audit  Auditor      // nil: nothing is audited
	// Resolver resolves names; nil means net.DefaultResolver (the host's).
	Resolver *net.Resolver
	// MaxTunnels caps one sandbox's concurrent connections.
	MaxTunnels int
	// MaxHeaderBytes caps a request's line and headers.
	MaxHeaderBytes int
	// Timeouts of each phase: reading the request, resolving, connecting,
	// a tunnel's TLS ClientHello (all of it, from the 200 answer on,
	// however slowly it comes), and a connection with no traffic either
	// way.
	HeaderTimeout, ResolveTimeout, DialTimeout, HelloTimeout, IdleTimeout time.Duration
	// MaxAudited caps the allow and the deny events audited one by one per
	// socket; later ones are counted, and the counts audited at Close.
	MaxAudited int
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Audit == nil {
		o.Audit = audit.Discard()
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxTunnels, DefaultMaxTunnels)
	def(&o.MaxHeaderBytes, DefaultMaxHeaderBytes)
	def(&o.MaxAudited, DefaultMaxAudited)
	for _, t := range []struct {
		v *time.Duration
		d time.Duration
	}{{&o.HeaderTimeout, DefaultHeaderTimeout}, {&o.ResolveTimeout, DefaultResolveTimeout}, {&o.DialTimeout, DefaultDialTimeout},
		{&o.HelloTimeout, DefaultHelloTimeout}, {&o.IdleTimeout, DefaultIdleTimeout}} {
		if *t.v <= 0 {
			*t.v = t.d
		}
	}
	return o
}

// Proxy is forge's egress proxy: one per forge process, serving one socket
// per sandbox that has egress. It is safe for concurrent use.
type Proxy struct {
	opts Options

	mu        sync.Mutex
	closed    bool
	listeners map[*Listener]struct{}
}

// New returns a proxy; it listens on nothing until Serve.
func New(opts Options) *Proxy {
	return &Proxy{opts: opts.withDefaults(), listeners: map[*Listener]struct{}{}}
}

// Close closes every socket.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	ls := make([]*Listener, 0, len(p.listeners))
	for l := range p.listeners {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// Listener is one sandbox's egress socket.
type Listener struct {
	p    *Proxy
	sb   Sandbox
	who  Who
	path string
	ln   *net.UnixListener
	pol  atomic.Pointer[Policy]
	wg   sync.WaitGroup
	// ctx is cancelled by Close: it ends resolving and dialing, which
	// closing the connections does not.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	// counts of this socket's connections, for the capped audit
	allowed, denied, refused int
}

// Serve listens on <sb.BridgeDir()>/egress.sock, owned by the sandbox
// user's host uid/gid with mode 0600, and proxies for the sandbox under
// pol. Only connections whose peer (SO_PEERCRED) is a live process of sb
// running as that user are served; others are closed and audited as a
// security violation. Close the Listener when the sandbox goes; a
// directory has at most one live egress socket.
func (p *Proxy) Serve(sb Sandbox, pol Policy, who Who) (_ *Listener, retErr error) {
	dir := sb.BridgeDir()
	if dir == "" {
		return nil, fmt.Errorf("egress socket of sandbox %s: the sandbox has no bridge directory (sandbox.Config.BridgeDir)", sb.ID())
	}
	if who.SandboxID == "" {
		who.SandboxID = sb.ID()
	}
	l := &Listener{p: p, sb: sb, who: who, path: filepath.Join(dir, SocketName), conns: map[net.Conn]struct{}{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	pol = pol.Normalize()
	l.pol.Store(&pol)
	var err error
	if l.ln, err = ownedsock.Listen(dir, l.path, sb.HostUID(), sb.HostGID()); err != nil {
		return nil, fmt.Errorf("egress socket of sandbox %s: %w", sb.ID(), err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.ln.Close()
		l.cancel()
		_ = ownedsock.Remove(l.path)
		return nil, ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	l.wg.Go(l.serve)
	p.opts.Logger.Debug("egress: serving", "sandbox", who.SandboxID, "policy", pol.String(), "socket", l.path)
	return l, nil
}

// SocketPath is the socket's host path.
func (l *Listener) SocketPath() string { return l.path }

// Policy is the policy in force.
func (l *Listener) Policy() Policy { return *l.pol.Load() }

// SetPolicy replaces the policy for new connections (a session whose
// request narrowed its policy); open ones keep what they were allowed.
func (l *Listener) SetPolicy(pol Policy) {
	pol = pol.Normalize()
	l.pol.Store(&pol)
}

// SetWho replaces what the audit says about later connections (a pooled
// sandbox handed to another request).
func (l *Listener) SetWho(who Who) {
	l.mu.Lock()
	if who.SandboxID == "" {
		who.SandboxID = l.sb.ID()
	}
	l.who = who
	l.mu.Unlock()
}

// Close stops the socket, ends its connections, removes it and audits
// the socket's counts. It is idempotent.
func (l *Listener) Close() error {
	l.p.mu.Lock()
	delete(l.p.listeners, l)
	l.p.mu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.cancel()
	err := l.ln.Close()
	l.wg.Wait()
	if rerr := ownedsock.Remove(l.path); rerr != nil {
		err = errors.Join(err, rerr)
	}
	l.mu.Lock()
	allowed, denied, refused, who := l.allowed, l.denied, l.refused, l.who
	l.mu.Unlock()
	if allowed+denied+refused > 0 {
		l.p.opts.Audit.Log(audit.Event{Event: audit.EventEgressSummary, SandboxID: who.SandboxID, SessionID: who.SessionID,
			Principal: who.Principal, Fields: map[string]any{"allowed": allowed, "denied": denied, "refused_peers": refused,
				"audited_max": l.p.opts.MaxAudited, "purpose": who.Purpose}})
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (l *Listener) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.p.opts.Logger.Warn("egress: accept", "sandbox", l.who.SandboxID, "err", err)
			}
			return
		}
		if !l.admit(c) {
			continue
		}
		if !l.track(c) {
			continue
		}
		l.wg.Go(func() { l.handle(c) })
	}
}

// admit checks that the peer is a process of the sandbox, as the bridge
// does for its socket.
func (l *Listener) admit(c net.Conn) bool {
	p, err := peercred.Of(c)
	defer p.Close()
	if err == nil {
		err = p.Check(l.sb)
	}
	if err == nil {
		return true
	}
	c.Close()
	l.mu.Lock()
	l.refused++
	n, who := l.refused, l.who
	l.mu.Unlock()
	if n > l.p.opts.MaxAudited {
		return false
	}
	ev := audit.Event{Event: audit.EventSecurityViolation, SandboxID: who.SandboxID, SessionID: who.SessionID, Principal: who.Principal,
		Reason: "connection to the sandbox's egress socket from outside the sandbox refused: " + err.Error(),
		Fields: map[string]any{"peer_pid": p.PID, "peer_uid": p.UID, "peer_gid": p.GID}}
	if n == l.p.opts.MaxAudited {
		ev.Reason = fmt.Sprintf("%d connections to the egress socket from outside the sandbox refused; further ones are refused without audit", n)
	}
	l.p.opts.Audit.Log(ev)
	l.p.opts.Logger.Warn("egress: refused a connection from outside the sandbox", "sandbox", who.SandboxID, "peer_pid", p.PID, "err", err)
	return false
}

// track registers c, or refuses it when the socket is closed or has
// MaxTunnels connections already.
func (l *Listener) track(c net.Conn) bool {
	l.mu.Lock()
	full := !l.closed && len(l.conns) >= l.p.opts.MaxTunnels
	if !l.closed && !full {
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		return true
	}
	l.mu.Unlock()
	if full {
		ev := event{reason: fmt.Sprintf("more than %d concurrent connections from this sandbox", l.p.opts.MaxTunnels)}
		l.deny(c, ev, http.StatusServiceUnavailable)
	}
	c.Close()
	return false
}

// event is what one connection's audit entry says.
type event struct {
	method, host string
	port         int
	addr         string // the address connected to
	rule         string // the rule that allowed the connection
	reason       string // why it was denied
	// rules are the rules that allow the connection to addr (connect sets
	// them); a tunnel is raw when one of them is !tcp.
	rules []Rule
}

func (l *Listener) audit(allowed bool, e event) {
	l.mu.Lock()
	n := &l.denied
	if allowed {
		n = &l.allowed
	}
	*n++
	c, who := *n, l.who
	l.mu.Unlock()
	max := l.p.opts.MaxAudited
	if c > max {
		return
	}
	ev := audit.Event{Event: audit.EventEgressDeny, Severity: audit.SeverityWarning, SandboxID: who.SandboxID,
		SessionID: who.SessionID, Principal: who.Principal, Reason: e.reason,
		Fields: map[string]any{"host": clip(e.host, 253), "port": e.port, "method": e.method, "purpose": who.Purpose}}
	if allowed {
		ev.Event, ev.Severity = audit.EventEgressAllow, audit.SeverityInfo
	}
	if e.addr != "" {
		ev.Fields["address"] = e.addr
	}
	if e.rule != "" {
		ev.Fields["rule"] = e.rule
	}
	if c == max {
		kind := "denied"
		if allowed {
			kind = "allowed"
		}
		ev.Fields["further_not_audited"] = true
		ev.Reason = strings.TrimSpace(fmt.Sprintf("%s (%d connections %s: later ones on this socket are only counted, in the egress.summary event at its close)", e.reason, c, kind))
	}
	l.p.opts.Audit.Log(ev)
}

// deny audits a refused request and answers it with status and the reason.
func (l *Listener) deny(c net.Conn, e event, status int) {
	l.audit(false, e)
	l.p.opts.Logger.Debug("egress: denied", "sandbox", l.who.SandboxID, "host", clip(e.host, 253), "port", e.port, "reason", e.reason)
	if status != 0 {
		writeStatus(c, status, "forge egress: "+e.reason)
	}
}

func writeStatus(c net.Conn, status int, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	msg += "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(msg), msg)
}

// handle serves one connection: one CONNECT tunnel, or one plain-HTTP
// request with an absolute URI (answered with Connection: close).
func (l *Listener) handle(c net.Conn) {
	defer func() {
		if r := recover(); r != nil {
			l.p.opts.Logger.Error("egress: panic serving a sandbox", "sandbox", l.who.SandboxID, "panic", r, "stack", string(debug.Stack()))
		}
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
		c.Close()
	}()
	o := l.p.opts
	cr := &clientReader{c: c, deadline: time.Now().Add(o.HeaderTimeout)}
	lim := &headerLimit{r: cr, n: o.MaxHeaderBytes}
	br := bufio.NewReaderSize(lim, 4<<10)
	req, err := http.ReadRequest(br)
	if err != nil {
		e := event{reason: "malformed proxy request"}
		status := http.StatusBadRequest
		switch {
		case lim.n <= 0:
			e.reason, status = fmt.Sprintf("request headers larger than %d bytes", o.MaxHeaderBytes), http.StatusRequestHeaderFieldsTooLarge
		case isTimeout(err):
			e.reason, status = fmt.Sprintf("no complete request within %s", o.HeaderTimeout), http.StatusRequestTimeout
		case errors.Is(err, io.EOF):
			return // connected and went away: nothing asked, nothing to audit
		}
		l.deny(c, e, status)
		return
	}
	lim.n = -1 // the body and the tunnel are not headers
	// A proxy request's body streams through cr: a client that stops
	// sending is cut off after IdleTimeout, one that keeps sending is not.
	cr.deadline, cr.idle = time.Time{}, o.IdleTimeout
	e := event{method: req.Method}
	host, port, err := target(req)
	e.host, e.port = host, port
	if err == nil && req.Method != http.MethodConnect {
		err = checkHostHeader(lim.head, host, port)
	}
	if err != nil {
		e.reason = err.Error()
		l.deny(c, e, http.StatusBadRequest)
		return
	}
	up, status := l.connect(&e)
	if up == nil {
		l.deny(c, e, status)
		return
	}
	defer up.Close()
	if req.Method == http.MethodConnect {
		l.tunnel(c, br, cr, up, e)
	} else {
		l.forward(c, req, up, e)
	}
}

// headerLimit fails reads past n bytes while n >= 0 (the request's
// headers), and keeps what it read then in head; n < 0 lifts both.
type headerLimit struct {
	r    io.Reader
	n    int
	head []byte // the bytes read while n >= 0: the request's line and headers (and perhaps more)
}

func (h *headerLimit) Read(p []byte) (int, error) {
	if h.n < 0 {
		return h.r.Read(p)
	}
	if h.n == 0 {
		return 0, errors.New("header limit reached")
	}
	if len(p) > h.n {
		p = p[:h.n]
	}
	n, err := h.r.Read(p)
	h.n -= n
	h.head = append(h.head, p[:n]...)
	return n, err
}

// target is the host (canonical: a lower-case name or an IP) and port a
// request asks for.
func target(req *http.Request) (string, int, error) {
	if req.Method == http.MethodConnect {
		return splitTarget(req.Host, 0)
	}
	if !req.URL.IsAbs() || req.URL.Scheme != "http" {
		return "", 0, fmt.Errorf("a proxy request needs an absolute http:// URI, or CONNECT host:port for anything else (got %.100q)", req.RequestURI)
	}
	return splitTarget(req.URL.Host, 80)
}

// splitTarget splits host[:port] (port defPort when missing and defPort is
// not 0) into the canonical host and the port.
func splitTarget(hostport string, defPort int) (string, int, error) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil && defPort != 0 {
		h, p, err = strings.Trim(hostport, "[]"), strconv.Itoa(defPort), nil
	}
	if err != nil {
		return clip(hostport, 253), 0, fmt.Errorf("want host:port, got %.100q", hostport)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return clip(h, 253), 0, fmt.Errorf("port %.20q is not a number in 1-65535", p)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return clip(h, 253), port, errors.New("an IPv6 zone is not allowed")
		}
		return a.Unmap().String(), port, nil
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	if err := profiles.CheckHostName(name); err != nil {
		return clip(h, 253), port, fmt.Errorf("bad host: %w", err)
	}
	return name, port, nil
}

// checkHostHeader refuses a proxy request whose Host headers (in head,
// the raw request, read again with the parser http.ReadRequest uses, which
// drops them) name another host or port than its absolute URI. Upstream
// gets the URI's host, the one the policy checked, either way; a request
// that names two is refused rather than guessed at.
func checkHostHeader(head []byte, host string, port int) error {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return fmt.Errorf("reading the request line again: %w", err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return fmt.Errorf("reading the headers again: %w", err)
	}
	for _, v := range h.Values("Host") {
		hh, hp, err := splitTarget(v, 80)
		if err != nil || hh != host || hp != port {
			return fmt.Errorf("the Host header %.100q does not name the request URI's host %s: the request is sent to the URI's host with it as Host, so the two must agree",
				v, net.JoinHostPort(host, strconv.Itoa(port)))
		}
	}
	return nil
}

// connect checks the policy, resolves the host and connects to the first
// permitted address that answers; e.rules are the rules that allow the
// connection to it. On failure it returns nil, the status to answer with,
// and e.reason set.
func (l *Listener) connect(e *event) (net.Conn, int) {
	o := l.p.opts
	pol := l.Policy()
	rules := pol.RulesFor(e.host, e.port)
	if len(rules) == 0 {
		e.reason = fmt.Sprintf("%s is not allowed by this sandbox's egress policy (%s)", net.JoinHostPort(e.host, strconv.Itoa(e.port)), describe(pol))
		return nil, http.StatusForbidden
	}
	private := slices.DeleteFunc(slices.Clone(rules), func(r Rule) bool { return !r.Private })
	e.rule = rules[0].String()
	ctx, cancel := context.WithTimeout(l.ctx, o.ResolveTimeout)
	addrs, err := l.resolve(ctx, e.host)
	cancel()
	if err != nil {
		e.reason = fmt.Sprintf("resolving %s: %v", e.host, trimDNSError(err))
		return nil, http.StatusBadGateway
	}
	var ok2 []netip.Addr
	var why []string
	for _, a := range addrs {
		a = a.Unmap()
		r := specialReason(a)
		if r == "" || len(private) > 0 || pol.AllowsAddr(a, e.port) {
			ok2 = append(ok2, a)
		} else {
			why = append(why, fmt.Sprintf("%s (%s)", a, r))
		}
	}
	if len(ok2) == 0 {
		e.reason = fmt.Sprintf("%s resolves only to addresses the policy does not name: %s; allow them with an IP or CIDR rule, or mark the host rule !private",
			e.host, strings.Join(why, ", "))
		return nil, http.StatusForbidden
	}
	d := net.Dialer{Timeout: o.DialTimeout}
	deadline := time.Now().Add(o.DialTimeout)
	var errs []error
	for _, a := range ok2 {
		dctx, cancel := context.WithDeadline(l.ctx, deadline)
		c, err := d.DialContext(dctx, "tcp", netip.AddrPortFrom(a, uint16(e.port)).String())
		cancel()
		if err == nil {
			e.addr, e.rules = a.String(), rules
			if specialReason(a) != "" && !pol.AllowsAddr(a, e.port) {
				e.rules = private // only a !private rule reaches it
			}
			e.rule = e.rules[0].String()
			return c, 0
		}
		errs = append(errs, err)
		if time.Now().After(deadline) {
			break
		}
	}
	e.reason = fmt.Sprintf("connecting to %s: %v", e.host, errors.Join(errs...))
	return nil, http.StatusBadGateway
}

func (l *Listener) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := l.p.opts.Resolver.LookupNetIP(ctx, "ip", host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	return addrs, err
}

func trimDNSError(err error) error {
	var de *net.DNSError
	if errors.As(err, &de) {
		if de.IsNotFound {
			return errors.New("no such host")
		}
		if de.IsTimeout {
			return errors.New("timed out")
		}
		return errors.New(de.Err)
	}
	return err
}

// tunnel answers a CONNECT and pipes both ways. Unless a rule of the
// connection is !tcp, nothing moves either way until the client's first
// bytes, read within HelloTimeout, have proved to be a TLS ClientHello
// naming the CONNECT host (see checkHello).
func (l *Listener) tunnel(c net.Conn, br *bufio.Reader, cr *clientReader, up net.Conn, e event) {
	o := l.p.opts
	_ = c.SetWriteDeadline(time.Now().Add(o.HeaderTimeout))
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	_ = c.SetWriteDeadline(time.Time{})
	var head []byte
	if i := slices.IndexFunc(e.rules, func(r Rule) bool { return r.RawTCP }); i >= 0 {
		e.rule = e.rules[i].String() // any protocol: the bytes go unread
	} else {
		// A deadline of its own, which the reads cannot push out: a
		// client dribbling a byte at a time gets no longer than one that
		// sends nothing.
		cr.deadline = time.Now().Add(o.HelloTimeout)
		var reason string
		head, reason = checkHello(br, e.host, o.HelloTimeout)
		if reason != "" {
			e.reason = reason
			l.deny(c, e, 0)
			return
		}
	}
	// From here idle.copy keeps the client's read deadline.
	cr.deadline, cr.idle = time.Time{}, 0
	l.audit(true, e)
	l.p.opts.Logger.Debug("egress: tunnel", "sandbox", l.who.SandboxID, "host", e.host, "port", e.port, "address", e.addr, "rule", e.rule)
	idle := newIdle(o.IdleTimeout)
	down := make(chan struct{})
	go func() {
		defer close(down)
		idle.copy(c, up, up)
		_ = c.(*net.UnixConn).CloseWrite()
	}()
	_ = up.SetWriteDeadline(time.Now().Add(o.IdleTimeout))
	if _, err := up.Write(head); err == nil {
		idle.copy(up, br, c)
	}
	if tc, ok := up.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	<-down
}

// forward sends one plain-HTTP request upstream in origin form, without
// the proxy's and the hop-by-hop headers, and pipes the response back.
func (l *Listener) forward(c net.Conn, req *http.Request, up net.Conn, e event) {
	l.audit(true, e)
	for _, f := range req.Header.Values("Connection") {
		for name := range strings.SplitSeq(f, ",") {
			req.Header.Del(strings.TrimSpace(name))
		}
	}
	for _, h := range []string{"Connection", "Proxy-Connection", "Proxy-Authorization", "Keep-Alive", "Upgrade", "Te", "Trailer"} {
		req.Header.Del(h)
	}
	req.RequestURI = ""
	req.Close = true
	idle := newIdle(l.p.opts.IdleTimeout)
	up = &idleWriter{Conn: up, timeout: l.p.opts.IdleTimeout}
	if err := req.Write(up); err != nil {
		writeStatus(c, http.StatusBadGateway, "forge egress: sending the request upstream: "+err.Error())
		return
	}
	idle.copy(c, up, up)
}

// TLS record and handshake framing (RFC 8446 5.1, 4).
const (
	recordTypeHandshake  = 0x16
	handshakeClientHello = 0x01
	recordHeaderLen      = 5
	handshakeHeaderLen   = 4
	maxRecordLen         = 1 << 14
)

// checkHello reads a tunnel's first bytes: they must be a TLS handshake
// record (type 0x16, version 3.x, a length a record can have) whose
// handshake message is a ClientHello (type 1) of at most maxHello bytes,
// and crypto/tls must decode that hello, with an SNI equal to host (for
// an IP host, none, or the IP). Anything else (plain HTTP, with a leading
// CRLF or any method, SSH, a server-speaks-first protocol waiting for the
// server) is refused: the allowlist names hosts, and only a ClientHello
// says which host the bytes are for. The caller's read deadline bounds the
// whole read; timeout is what it was, for the reason. It returns every
// byte read, to send upstream first, or why the tunnel is refused.
func checkHello(br *bufio.Reader, host string, timeout time.Duration) ([]byte, string) {
	// Byte by byte, so a wrong one is refused when it comes, not when
	// enough others have.
	var hdr []byte
	var err error
	for n := 1; n <= recordHeaderLen+handshakeHeaderLen && err == nil; n++ {
		hdr, err = br.Peek(n)
		if why := helloHeader(hdr); why != "" {
			return nil, fmt.Sprintf("the tunnel does not start with a TLS ClientHello (%s; first bytes %s): a tunnel carries TLS only unless its rule is marked !tcp; send plain http:// requests as proxy requests (HTTP_PROXY), whose Host is checked",
				why, quoteStart(br))
		}
	}
	switch {
	case err != nil && isTimeout(err):
		return nil, fmt.Sprintf("no TLS ClientHello within %s of the tunnel's opening (got %d bytes)", timeout, len(hdr))
	case err != nil:
		return nil, fmt.Sprintf("tunnel closed before a TLS ClientHello (got %d bytes): %v", len(hdr), err)
	}
	sni, head, err := readClientHello(br)
	switch {
	case err != nil && isTimeout(err):
		return nil, fmt.Sprintf("no complete TLS ClientHello within %s of the tunnel's opening", timeout)
	case err != nil:
		return nil, "unreadable TLS ClientHello: " + err.Error()
	case sni == "" && !isIP(host):
		return nil, fmt.Sprintf("TLS ClientHello without SNI in a tunnel to %s: the server name must be sent", host)
	case sni != "" && sni != host:
		return nil, fmt.Sprintf("TLS SNI %.253q does not match the CONNECT host %s", sni, host)
	}
	return head, ""
}

// helloHeader says what in b, the first bytes of a record (all of them or
// fewer), is not the start of a TLS record carrying a ClientHello, or ""
// when nothing is wrong so far.
func helloHeader(b []byte) string {
	at := func(i int) (byte, bool) {
		if i < len(b) {
			return b[i], true
		}
		return 0, false
	}
	if v, ok := at(0); ok && v != recordTypeHandshake {
		return fmt.Sprintf("record type 0x%02x, not handshake (0x16)", v)
	}
	if v, ok := at(1); ok && v != 3 {
		return fmt.Sprintf("record version major %d, not 3", v)
	}
	if v, ok := at(2); ok && v > 4 {
		return fmt.Sprintf("record version 3.%d, not 3.0-3.4", v)
	}
	if len(b) >= recordHeaderLen {
		if n := int(b[3])<<8 | int(b[4]); n < handshakeHeaderLen || n > maxRecordLen {
			return fmt.Sprintf("record length %d, not %d-%d", n, handshakeHeaderLen, maxRecordLen)
		}
	}
	if v, ok := at(5); ok && v != handshakeClientHello {
		return fmt.Sprintf("handshake type %d, not ClientHello (1)", v)
	}
	if len(b) >= recordHeaderLen+handshakeHeaderLen {
		if n := int(b[6])<<16 | int(b[7])<<8 | int(b[8]); n == 0 || n > maxHello {
			return fmt.Sprintf("ClientHello length %d, not 1-%d", n, maxHello)
		}
	}
	return ""
}

// quoteStart quotes the first bytes buffered in br, for a reason.
func quoteStart(br *bufio.Reader) string {
	b, _ := br.Peek(min(br.Buffered(), 16))
	return fmt.Sprintf("%q", b)
}

func isIP(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// clientReader reads the client's connection under the read deadline of
// the phase the connection is in: a fixed one (the request's headers, a
// tunnel's ClientHello: it holds however the bytes are dribbled), else
// idle ahead of each read (a proxy request's body), else none of its own
// (a tunnel's pipe, where idle.copy sets it). Only the connection's
// handler reads and changes it.
type clientReader struct {
	c        net.Conn
	deadline time.Time
	idle     time.Duration
}

func (r *clientReader) Read(p []byte) (int, error) {
	switch {
	case !r.deadline.IsZero():
		_ = r.c.SetReadDeadline(r.deadline)
	case r.idle > 0:
		_ = r.c.SetReadDeadline(time.Now().Add(r.idle))
	}
	return r.c.Read(p)
}

// idleWriter writes to a Conn with a write deadline timeout ahead of each write.
type idleWriter struct {
	net.Conn
	timeout time.Duration
}

func (w *idleWriter) Write(p []byte) (int, error) {
	_ = w.Conn.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.Conn.Write(p)
}

// idle ends a connection when neither direction has moved a byte for
// timeout.
type idle struct {
	timeout time.Duration
	last    atomic.Int64 // unix nanos of the last byte either way
}

func newIdle(timeout time.Duration) *idle {
	i := &idle{timeout: timeout}
	i.last.Store(time.Now().UnixNano())
	return i
}

// copy copies src to dst; rc is the connection src reads from, whose read
// deadline it keeps pushing out while either direction is active.
func (i *idle) copy(dst io.Writer, src io.Reader, rc net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		_ = rc.SetReadDeadline(time.Unix(0, i.last.Load()).Add(i.timeout))
		n, err := src.Read(buf)
		if n > 0 {
			i.last.Store(time.Now().UnixNano())
			if wc, ok := dst.(net.Conn); ok {
				_ = wc.SetWriteDeadline(time.Now().Add(i.timeout))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if isTimeout(err) && time.Since(time.Unix(0, i.last.Load())) < i.timeout {
				continue // the other direction was busy
			}
			return
		}
	}
}
