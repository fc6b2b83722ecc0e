package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"time"
)

var errHelloRead = errors.New("hello read")

// readClientHello reads a TLS ClientHello from r (at most maxHello bytes)
// and returns its SNI (lower case, without a trailing dot) and every byte
// it read. crypto/tls parses it: a server handshake on a read-only conn
// that stops as soon as the hello is decoded.
func readClientHello(r io.Reader) (sni string, head []byte, err error) {
	var buf bytes.Buffer
	conn := &helloConn{r: io.TeeReader(io.LimitReader(r, maxHello), &buf)}
	got := false
	err = tls.Server(conn, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, got = h.ServerName, true
		return nil, errHelloRead
	}}).Handshake()
	if !got {
		if err == nil {
			err = errors.New("no ClientHello")
		}
		return "", nil, err
	}
	return strings.ToLower(strings.TrimSuffix(sni, ".")), buf.Bytes(), nil
}

// helloConn is a net.Conn that only reads; the handshake's alerts go nowhere.
type helloConn struct{ r io.Reader }

func (c *helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *helloConn) Write(p []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return nil }
func (c *helloConn) RemoteAddr() net.Addr             { return nil }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }
