package e2b

// The Connect protocol as envd's clients speak it: the JSON codec only
// (the SDKs' ProtoJSON codec, no compression), unary calls as
// application/json and server streams as application/connect+json
// envelopes. Only what the E2B SDKs send is served; everything else gets a
// Connect error that says what is supported.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// maxRPCMessage bounds one request message (a unary body or the one
	// envelope of a server-stream request): envd's requests are a path or
	// a command line with its environment.
	maxRPCMessage = 1 << 20

	contentTypeUnary  = "application/json"
	contentTypeStream = "application/connect+json"

	// Envelope flags (connectrpc.com/docs/protocol: Streaming-Request and
	// Streaming-Response).
	flagCompressed byte = 0x01
	flagEndStream  byte = 0x02

	envelopeHeader = 5 // flags u8, length u32 big-endian
)

// Connect error codes (the protocol's names; the SDKs map them to their
// exceptions: not_found → NotFoundException or False, already_exists →
// False from make_dir, invalid_argument → InvalidArgumentException,
// deadline_exceeded → TimeoutException, unauthenticated →
// AuthenticationException).
const (
	codeCanceled           = "canceled"
	codeUnknown            = "unknown"
	codeInvalidArgument    = "invalid_argument"
	codeDeadlineExceeded   = "deadline_exceeded"
	codeNotFound           = "not_found"
	codeAlreadyExists      = "already_exists"
	codePermissionDenied   = "permission_denied"
	codeResourceExhausted  = "resource_exhausted"
	codeFailedPrecondition = "failed_precondition"
	codeUnimplemented      = "unimplemented"
	codeInternal           = "internal"
	codeUnavailable        = "unavailable"
	codeUnauthenticated    = "unauthenticated"
)

// connectStatus is the HTTP status of a unary error (the protocol's table).
var connectStatus = map[string]int{
	codeCanceled:           499,
	codeUnknown:            http.StatusInternalServerError,
	codeInvalidArgument:    http.StatusBadRequest,
	codeDeadlineExceeded:   http.StatusGatewayTimeout,
	codeNotFound:           http.StatusNotFound,
	codeAlreadyExists:      http.StatusConflict,
	codePermissionDenied:   http.StatusForbidden,
	codeResourceExhausted:  http.StatusTooManyRequests,
	codeFailedPrecondition: http.StatusBadRequest,
	codeUnimplemented:      http.StatusNotImplemented,
	codeInternal:           http.StatusInternalServerError,
	codeUnavailable:        http.StatusServiceUnavailable,
	codeUnauthenticated:    http.StatusUnauthorized,
}

// ConnectError is an RPC's failure as the protocol carries it.
type ConnectError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *ConnectError) Error() string { return e.Code + ": " + e.Message }

func connectErrorf(code, format string, args ...any) *ConnectError {
	return &ConnectError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// asConnectError is err as a Connect error; errors that are not one are
// forge's own failures (internal), with their message.
func asConnectError(err error) *ConnectError {
	var ce *ConnectError
	if errors.As(err, &ce) {
		return ce
	}
	return &ConnectError{Code: codeInternal, Message: "forge failed (not the request's fault): " + err.Error()}
}

// writeConnectError answers a unary call with err.
func writeConnectError(w http.ResponseWriter, err error) {
	ce := asConnectError(err)
	status, ok := connectStatus[ce.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	b, _ := json.Marshal(ce)
	w.Header().Set("Content-Type", contentTypeUnary)
	w.WriteHeader(status)
	w.Write(b)
}

// baseContentType is the media type of a Content-Type header, lowercased,
// without parameters ("" when it does not parse).
func baseContentType(h string) string {
	t, _, err := mime.ParseMediaType(h)
	if err != nil {
		return ""
	}
	return t
}

// connectTimeout is the Connect-Timeout-Ms header: 0 when absent.
func connectTimeout(r *http.Request) (time.Duration, error) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	// The protocol allows at most 10 digits.
	ms, err := strconv.ParseUint(v, 10, 64)
	if err != nil || len(v) > 10 {
		return 0, connectErrorf(codeInvalidArgument, "Connect-Timeout-Ms %q: want a positive integer of at most 10 digits", truncate(v, 20))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// decodeMessage parses one proto3-JSON message into v: unknown fields are
// ignored (a newer SDK may send fields this forge does not know), the
// value must be one JSON object.
func decodeMessage(data []byte, v any) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return connectErrorf(codeInvalidArgument, "request message is not the expected JSON object: %s", truncate(err.Error(), 200))
	}
	if dec.More() {
		return connectErrorf(codeInvalidArgument, "request message has data after its JSON object")
	}
	return nil
}

// readUnary reads and decodes the body of a unary call.
func readUnary(r *http.Request, v any) error {
	if r.Method != http.MethodPost {
		return connectErrorf(codeUnimplemented, "%s: Connect calls are POST requests here (GET calls are not supported)", r.Method)
	}
	if ct := baseContentType(r.Header.Get("Content-Type")); ct != contentTypeUnary {
		return errUnsupportedCodec(r.Header.Get("Content-Type"))
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return connectErrorf(codeUnimplemented, "Content-Encoding %q: forge accepts uncompressed requests only", truncate(enc, 40))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRPCMessage+1))
	if err != nil {
		return connectErrorf(codeInvalidArgument, "reading the request: %v", err)
	}
	if len(body) > maxRPCMessage {
		return connectErrorf(codeInvalidArgument, "request message over the limit of %d bytes", maxRPCMessage)
	}
	return decodeMessage(body, v)
}

func errUnsupportedCodec(ct string) *ConnectError {
	return connectErrorf(codeUnimplemented, "Content-Type %q: forge speaks the Connect protocol with the JSON codec only (%s for unary calls, %s for streams)",
		truncate(ct, 60), contentTypeUnary, contentTypeStream)
}

// serveUnary runs one unary call: decode, f, encode.
func serveUnary[Req, Resp any](w http.ResponseWriter, r *http.Request, f func(*http.Request, *Req) (*Resp, error)) {
	var req Req
	if err := readUnary(r, &req); err != nil {
		writeConnectError(w, err)
		return
	}
	resp, err := f(r, &req)
	if err != nil {
		writeConnectError(w, err)
		return
	}
	b, err := json.Marshal(resp)
	if err != nil {
		writeConnectError(w, err)
		return
	}
	w.Header().Set("Content-Type", contentTypeUnary)
	w.Write(b)
}

// readEnvelope reads one envelope of at most max payload bytes. io.EOF
// means none began; every other failure is a Connect error.
func readEnvelope(r io.Reader, max int) (flags byte, payload []byte, err error) {
	var hdr [envelopeHeader]byte
	n, err := io.ReadFull(r, hdr[:])
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return 0, nil, io.EOF
	case err != nil:
		return 0, nil, connectErrorf(codeInvalidArgument, "malformed envelope: %d of its 5 header bytes (flags, length) arrived", n)
	}
	flags = hdr[0]
	size := binary.BigEndian.Uint32(hdr[1:])
	if flags&flagCompressed != 0 {
		return 0, nil, connectErrorf(codeUnimplemented, "compressed envelope: forge accepts uncompressed messages only (send no Connect-Content-Encoding)")
	}
	if flags&^(flagCompressed|flagEndStream) != 0 {
		return 0, nil, connectErrorf(codeInvalidArgument, "malformed envelope: unknown flags 0x%02x", flags)
	}
	if uint64(size) > uint64(max) {
		return 0, nil, connectErrorf(codeInvalidArgument, "envelope of %d bytes over the limit of %d bytes", size, max)
	}
	payload = make([]byte, size)
	if n, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, connectErrorf(codeInvalidArgument, "malformed envelope: %d of its %d bytes arrived", n, size)
	}
	return flags, payload, nil
}

// readStreamRequest reads the one request message of a server-stream call.
func readStreamRequest(r *http.Request, v any) error {
	if r.Method != http.MethodPost {
		return connectErrorf(codeUnimplemented, "%s: Connect calls are POST requests", r.Method)
	}
	if ct := baseContentType(r.Header.Get("Content-Type")); ct != contentTypeStream {
		return errUnsupportedCodec(r.Header.Get("Content-Type"))
	}
	if enc := r.Header.Get("Connect-Content-Encoding"); enc != "" && enc != "identity" {
		return connectErrorf(codeUnimplemented, "Connect-Content-Encoding %q: forge accepts uncompressed messages only", truncate(enc, 40))
	}
	body := io.LimitReader(r.Body, maxRPCMessage+2*envelopeHeader+1)
	flags, payload, err := readEnvelope(body, maxRPCMessage)
	if errors.Is(err, io.EOF) {
		return connectErrorf(codeInvalidArgument, "the request has no message: a server-stream call takes exactly one envelope")
	}
	if err != nil {
		return err
	}
	if flags&flagEndStream != 0 {
		return connectErrorf(codeInvalidArgument, "malformed envelope: a request message may not carry the end-of-stream flag")
	}
	var extra [1]byte
	if n, _ := io.ReadFull(body, extra[:]); n > 0 {
		return connectErrorf(codeInvalidArgument, "data after the request message: a server-stream call takes exactly one envelope")
	}
	return decodeMessage(payload, v)
}

// streamWriter writes the response envelopes of a server stream, each
// flushed as it is written. Safe for concurrent use (keepalives).
type streamWriter struct {
	mu    sync.Mutex
	w     io.Writer
	flush func()
	err   error // the first write error: the client is gone
	ended bool
}

// newStreamWriter starts a 200 application/connect+json response.
func newStreamWriter(w http.ResponseWriter) *streamWriter {
	w.Header().Set("Content-Type", contentTypeStream)
	w.WriteHeader(http.StatusOK)
	s := &streamWriter{w: w, flush: func() {}}
	if f, ok := w.(http.Flusher); ok {
		s.flush = f.Flush
	}
	s.flush()
	return s
}

// Send writes one message; an error means the client went away.
func (s *streamWriter) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(0, b)
}

// End writes the end-of-stream message: {} or {"error": …}. Later calls
// do nothing.
func (s *streamWriter) End(err error) {
	var end struct {
		Error *ConnectError `json:"error,omitempty"`
	}
	if err != nil {
		end.Error = asConnectError(err)
	}
	b, _ := json.Marshal(end)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	s.writeLocked(flagEndStream, b)
}

func (s *streamWriter) writeLocked(flags byte, b []byte) error {
	if s.err != nil {
		return s.err
	}
	if s.ended && flags&flagEndStream == 0 {
		return errors.New("stream ended")
	}
	s.err = writeEnvelope(s.w, flags, b)
	if s.err == nil {
		s.flush()
	}
	return s.err
}

// writeEnvelope writes one envelope: flags, big-endian length, payload.
func writeEnvelope(w io.Writer, flags byte, payload []byte) error {
	buf := make([]byte, envelopeHeader+len(payload))
	buf[0] = flags
	binary.BigEndian.PutUint32(buf[1:], uint32(len(payload)))
	copy(buf[envelopeHeader:], payload)
	_, err := w.Write(buf)
	return err
}

// protoUint32 is a proto3-JSON uint32: a number or a decimal string.
type protoUint32 uint32

func (u *protoUint32) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if string(b) == "null" {
		*u = 0
		return nil
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return fmt.Errorf("%s is not a uint32", truncate(string(b), 30))
	}
	*u = protoUint32(v)
	return nil
}

// protoEnum is a proto3-JSON enum value: its name or its number.
type protoEnum struct {
	Name   string
	Number int64
	IsName bool
}

func (e *protoEnum) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &e.Name); err != nil {
			return err
		}
		e.IsName = true
		return nil
	}
	if string(b) == "null" {
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 32)
	if err != nil {
		return fmt.Errorf("%s is not an enum name or number", truncate(string(b), 30))
	}
	e.Number = v
	return nil
}

// protoTimestamp formats t as a google.protobuf.Timestamp in JSON: UTC, Z,
// nanoseconds only when there are any.
func protoTimestamp(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond() == 0 {
		return t.Format("2006-01-02T15:04:05Z")
	}
	return t.Format("2006-01-02T15:04:05.000000000Z")
}
