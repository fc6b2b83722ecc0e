// Package audit writes forge's security audit log: one JSON object per line,
// appended to a 0600 file that is rotated by size.
//
// The log records who ran what where, never the what itself: code appears
// only as its SHA-256 (CodeHash), Fields entries whose keys look like code or
// credentials are dropped, and long strings are omitted. Logging never fails
// the caller; a write error is reported to slog once per run of failures.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Event names.
const (
	EventExecutionRequest  = "execution.request"
	EventContainerCreate   = "container.create"
	EventContainerStart    = "container.start"
	EventContainerStop     = "container.stop"
	EventContainerRemove   = "container.remove"
	EventSecurityViolation = "security.violation" // always SeverityCritical
	EventSessionCreate     = "session.create"
	EventSessionDestroy    = "session.destroy"
	EventBuildRequest      = "build.request"
	EventBuildComplete     = "build.complete"
	EventBuildRefused      = "build.refused"
	EventBuildFailed       = "build.failed"
	EventBuildApproved     = "build.approved" // a person approved packages of environment_builder.approval_packages
	EventBuildDeclined     = "build.declined" // a person was asked and did not approve
	EventToolApproved      = "tool.approved"  // a person approved a save_tool (hosted_tools.save_tool: approve)
	EventToolDeclined      = "tool.declined"  // a person was asked and did not approve a save_tool
	EventToolCall          = "tool.call"
	EventEgressAllow       = "egress.allow"   // a connection out of a sandbox, allowed
	EventEgressDeny        = "egress.deny"    // one refused (policy, address, SNI, limits)
	EventEgressSummary     = "egress.summary" // counts of a closed egress socket, audited or not
	// EventHTTPRefusedSummary counts the HTTP refusals (invalid token, Host
	// or Origin) of a minute past the audit budget, not audited one by one.
	EventHTTPRefusedSummary = "http.refused.summary"
	// EventExecutionCancel: the client cancelled a run (notifications/cancelled
	// or a closed HTTP stream); no result was sent.
	EventExecutionCancel = "execution.cancel"
)

// Severities.
const (
	SeverityInfo     = "info"
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// Event is one audit record. Time is filled in (UTC) when zero; Severity
// defaults to info. Never put code, tool arguments or secrets in an Event:
// use CodeSHA256 for code; Fields entries that look like them are dropped.
type Event struct {
	Time       time.Time      `json:"time"`
	Event      string         `json:"event"`
	Severity   string         `json:"severity"`
	SandboxID  string         `json:"sandbox_id,omitempty"`
	SessionID  string         `json:"session_id,omitempty"`
	Image      string         `json:"image,omitempty"`
	CodeSHA256 string         `json:"code_sha256,omitempty"`
	Tool       string         `json:"tool,omitempty"`
	Server     string         `json:"server,omitempty"`
	Client     string         `json:"client,omitempty"`
	Principal  string         `json:"principal,omitempty"`  // who the request acted for (a tenant)
	RequestID  string         `json:"request_id,omitempty"` // the HTTP request's id, as in its logs and error replies
	Reason     string         `json:"reason,omitempty"`
	Fields     map[string]any `json:"fields,omitempty"`
}

// Options configures a Logger.
type Options struct {
	// MaxSize rotates the file before a write would take it past this many
	// bytes; 0 disables rotation.
	MaxSize int64
	// MaxBackups is how many rotated files (path.1 … path.N) are kept; with
	// 0 the log is simply started afresh when it is full.
	MaxBackups int
	// Clock stamps events; nil means time.Now.
	Clock func() time.Time
	// Observe, when set, sees every event after scrubbing (metrics count
	// security violations and tool calls from it). It must not block.
	Observe func(Event)
}

// Logger appends events to an audit log. It is safe for concurrent use; a
// nil *Logger discards everything.
type Logger struct {
	path    string
	opts    Options
	discard bool // set by Discard, never changed

	mu       sync.Mutex
	f        *os.File // nil after a failed reopen, or when discarding
	size     int64
	closed   bool
	reported bool // a failure has been logged and nothing has succeeded since
}

// CodeHash returns the hex SHA-256 of code, the only form in which code is
// ever audited.
func CodeHash(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// Discard returns a Logger that writes nothing.
func Discard() *Logger { return &Logger{discard: true, closed: true} }

// Open opens (creating it if needed) the audit log at path, with mode 0600
// enforced also on an existing file; a missing parent directory is created
// with mode 0700.
func Open(path string, opts Options) (*Logger, error) {
	if path == "" {
		return nil, errors.New("audit log path is empty")
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.MaxBackups < 0 {
		opts.MaxBackups = 0
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating audit log directory: %w", err)
	}
	l := &Logger{path: path, opts: opts}
	if err := l.openLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Logger) openLocked() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("opening audit log: %w", err)
	}
	// OpenFile's mode applies only to a new file; an existing one may have
	// been created looser by hand.
	fi, err := f.Stat()
	if err == nil && fi.Mode().Perm() != 0o600 {
		err = f.Chmod(0o600)
	}
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("securing audit log %s: %w", l.path, err)
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Log appends ev. It never fails the caller: errors are reported to slog.
func (l *Logger) Log(ev Event) {
	if l == nil || l.discard {
		return
	}
	ev = l.prepare(ev)
	if l.opts.Observe != nil {
		l.opts.Observe(ev)
	}
	line, err := json.Marshal(ev)
	if err != nil { // unreachable: prepare leaves only JSON-safe values
		line, _ = json.Marshal(Event{Time: ev.Time, Event: ev.Event, Severity: SeverityWarning, Reason: "unencodable audit event"})
	}
	line = append(line, '\n')

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.fail(l.writeLocked(line))
}

// prepare stamps, normalizes and scrubs ev.
func (l *Logger) prepare(ev Event) Event {
	if ev.Time.IsZero() {
		ev.Time = l.opts.Clock()
	}
	ev.Time = ev.Time.UTC()
	switch {
	case ev.Event == EventSecurityViolation:
		ev.Severity = SeverityCritical
	case ev.Severity == "":
		ev.Severity = SeverityInfo
	case ev.Severity != SeverityInfo && ev.Severity != SeverityWarning && ev.Severity != SeverityCritical:
		ev.Severity = SeverityWarning
	}
	for _, s := range []*string{&ev.Event, &ev.SandboxID, &ev.SessionID, &ev.Image, &ev.CodeSHA256, &ev.Tool, &ev.Server, &ev.Client, &ev.Reason} {
		*s = truncate(*s)
	}
	ev.Fields = scrubFields(ev.Fields, 0)
	return ev
}

func (l *Logger) writeLocked(line []byte) error {
	if l.opts.MaxSize > 0 && l.f != nil && l.size > 0 && l.size+int64(len(line)) > l.opts.MaxSize {
		if err := l.rotateLocked(); err != nil {
			return err
		}
	}
	if l.f == nil {
		if err := l.openLocked(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	return err
}

// rotateLocked shifts path.i to path.i+1, dropping the oldest, moves the
// current file to path.1 and opens a new one.
func (l *Logger) rotateLocked() error {
	err := l.f.Close()
	l.f = nil
	if l.opts.MaxBackups == 0 {
		return errors.Join(err, ignoreNotExist(os.Remove(l.path)), l.openLocked())
	}
	err = errors.Join(err, ignoreNotExist(os.Remove(l.backup(l.opts.MaxBackups))))
	for i := l.opts.MaxBackups - 1; i >= 1; i-- {
		err = errors.Join(err, ignoreNotExist(os.Rename(l.backup(i), l.backup(i+1))))
	}
	err = errors.Join(err, os.Rename(l.path, l.backup(1)))
	if err != nil {
		err = fmt.Errorf("rotating audit log: %w", err)
	}
	return errors.Join(err, l.openLocked())
}

func (l *Logger) backup(i int) string { return fmt.Sprintf("%s.%d", l.path, i) }

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// fail reports err to slog unless a failure was already reported and
// nothing has succeeded since.
func (l *Logger) fail(err error) {
	if err == nil {
		l.reported = false
		return
	}
	if !l.reported {
		l.reported = true
		slog.Error("audit log write failed; further failures are not reported until a write succeeds", "path", l.path, "err", err)
	}
}

// Close flushes and closes the log; later events are discarded.
func (l *Logger) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.f == nil {
		return nil
	}
	err := errors.Join(l.f.Sync(), l.f.Close())
	l.f = nil
	return err
}
