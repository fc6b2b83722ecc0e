package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func open(t *testing.T, opts Options) (*Logger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sub", "audit.log")
	l, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

// lines reads path and decodes every line, failing on invalid JSON.
func lines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v: %q", len(out)+1, err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func TestModes(t *testing.T) {
	l, path := open(t, Options{})
	l.Log(Event{Event: EventSessionCreate})
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: got mode %v, want %v", p, got, want)
		}
	}
}

func TestExistingFileModeTightened(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(`{"event":"old"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(Event{Event: EventSessionCreate})
	l.Close()
	fi, _ := os.Stat(path)
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("got mode %v, want %v", got, os.FileMode(0o600))
	}
	if got := len(lines(t, path)); got != 2 {
		t.Errorf("got %v lines, want %v (appended, not truncated)", got, 2)
	}
}

func TestEventFormat(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891, time.FixedZone("CET", 3600))
	l, path := open(t, Options{Clock: func() time.Time { return at }})
	l.Log(Event{Event: EventExecutionRequest, SandboxID: "sb1", CodeSHA256: CodeHash("print(1)"), Fields: map[string]any{"timeout_s": 30}})
	l.Log(Event{Event: EventSecurityViolation, Severity: SeverityInfo, Reason: "seccomp kill"})
	l.Log(Event{Event: EventToolCall, Severity: "bogus", Time: at.Add(time.Hour)})
	l.Close()
	got := lines(t, path)
	want := []map[string]any{
		{"time": "2026-03-04T04:06:07.000000891Z", "event": "execution.request", "severity": "info", "sandbox_id": "sb1",
			"code_sha256": CodeHash("print(1)"), "fields": map[string]any{"timeout_s": 30.0}},
		{"time": "2026-03-04T04:06:07.000000891Z", "event": "security.violation", "severity": "critical", "reason": "seccomp kill"},
		{"time": "2026-03-04T05:06:07.000000891Z", "event": "tool.call", "severity": "warning"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit lines (-want +got):\n%s", diff)
	}
	if ts := got[0]["time"].(string); !strings.HasSuffix(ts, "Z") {
		t.Errorf("got time %v, want UTC", ts)
	}
	if _, err := time.Parse(time.RFC3339Nano, got[0]["time"].(string)); err != nil {
		t.Errorf("time is not RFC 3339: %v", err)
	}
}

func TestCodeHash(t *testing.T) {
	if got, want := CodeHash(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestCodeNeverLogged(t *testing.T) {
	l, path := open(t, Options{})
	const code = "SECRET_CODE_xyz"
	long := strings.Repeat("x", 300) + code
	l.Log(Event{
		Event:      EventExecutionRequest,
		CodeSHA256: CodeHash(code),
		Fields: map[string]any{
			"code":         code,
			"Code":         code,
			"arguments":    map[string]any{"code": code},
			"env":          map[string]string{"X": code},
			"content":      code,
			"password":     code,
			"api_key":      code,
			"GITHUB_TOKEN": code,
			"clientSecret": code,
			"snippet":      long,
			"nested":       map[string]any{"deeper": []any{map[string]any{"token": code}, long}},
			"raw":          []byte(code),
			"struct":       struct{ Code string }{code},
			"exit_code":    0,
			"memory":       int64(512 << 20),
		},
	})
	l.Close()
	data, _ := os.ReadFile(path)
	if bytes.Contains(data, []byte(code)) {
		t.Fatalf("audit log contains the code:\n%s", data)
	}
	fields := lines(t, path)[0]["fields"].(map[string]any)
	want := map[string]any{
		"snippet":   "[omitted: 315-byte string]",
		"nested":    map[string]any{"deeper": []any{map[string]any{}, "[omitted: 315-byte string]"}},
		"raw":       "[omitted: []uint8]",
		"struct":    "[omitted: struct { Code string }]",
		"exit_code": 0.0,
		"memory":    float64(512 << 20),
	}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
}

func TestTopLevelStringsCut(t *testing.T) {
	l, path := open(t, Options{})
	l.Log(Event{Event: EventContainerStop, Reason: strings.Repeat("é", 300)})
	l.Close()
	r := lines(t, path)[0]["reason"].(string)
	if len(r) > MaxStringLen+len("…") {
		t.Errorf("got reason of %v bytes, want at most %v", len(r), MaxStringLen+len("…"))
	}
}

func TestConcurrent(t *testing.T) {
	l, path := open(t, Options{})
	const goroutines, each = 100, 20
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				l.Log(Event{Event: EventToolCall, Tool: fmt.Sprintf("t%d", g), Fields: map[string]any{"i": i, "pad": strings.Repeat("p", 200)}})
			}
		})
	}
	wg.Wait()
	l.Close()
	if got := len(lines(t, path)); got != goroutines*each {
		t.Errorf("got %v lines, want %v", got, goroutines*each)
	}
}

func TestRotation(t *testing.T) {
	l, path := open(t, Options{MaxSize: 1000, MaxBackups: 2})
	const n = 60 // ~100 bytes each: several rotations
	for i := range n {
		l.Log(Event{Event: EventContainerStart, SandboxID: fmt.Sprintf("sb-%03d", i)})
	}
	l.Close()
	var total int
	var ids []string
	for _, p := range []string{path + ".2", path + ".1", path} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 1000 {
			t.Errorf("%s: got %v bytes, want <= %v", p, fi.Size(), 1000)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: got mode %v, want 0600", p, fi.Mode().Perm())
		}
		for _, m := range lines(t, p) {
			ids = append(ids, m["sandbox_id"].(string))
		}
		total++
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3: got %v, want it not to exist (MaxBackups 2)", path, err)
	}
	// The newest events survive, in order, with nothing lost in between.
	last := ids[len(ids)-1]
	if last != fmt.Sprintf("sb-%03d", n-1) {
		t.Errorf("got last id %v, want sb-%03d", last, n-1)
	}
	for i := 1; i < len(ids); i++ {
		var a, b int
		fmt.Sscanf(ids[i-1], "sb-%d", &a)
		fmt.Sscanf(ids[i], "sb-%d", &b)
		if b != a+1 {
			t.Errorf("ids not consecutive at %d: got %v after %v", i, ids[i], ids[i-1])
		}
	}
}

func TestRotationNoBackups(t *testing.T) {
	l, path := open(t, Options{MaxSize: 300, MaxBackups: 0})
	for range 10 {
		l.Log(Event{Event: EventContainerStart})
	}
	l.Close()
	if _, err := os.Stat(path + ".1"); !os.IsNotExist(err) {
		t.Errorf("got %v, want no backup", err)
	}
	if got := len(lines(t, path)); got == 0 || got == 10 {
		t.Errorf("got %v lines, want some but not all 10", got)
	}
}

func TestDiscardAndClosed(t *testing.T) {
	Discard().Log(Event{Event: EventToolCall})
	if err := Discard().Close(); err != nil {
		t.Errorf("Discard().Close(): got %v, want nil", err)
	}
	var nilLogger *Logger
	nilLogger.Log(Event{Event: EventToolCall})

	l, path := open(t, Options{})
	l.Close()
	l.Log(Event{Event: EventToolCall}) // after Close: dropped, no panic
	if err := l.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	if got := len(lines(t, path)); got != 0 {
		t.Errorf("got %v lines, want 0", got)
	}
}

func TestWriteFailureReportedOnce(t *testing.T) {
	var logs bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(path, Options{MaxSize: 10, MaxBackups: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Log(Event{Event: EventToolCall})
	// Make rotation fail: the directory is replaced by a file.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l.Log(Event{Event: EventToolCall})
	}
	if got := strings.Count(logs.String(), "audit log write failed"); got != 1 {
		t.Errorf("got %v slog reports, want %v:\n%s", got, 1, logs.String())
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open("", Options{}); err == nil {
		t.Error("Open(\"\"): got nil, want error")
	}
	if _, err := Open(t.TempDir(), Options{}); err == nil {
		t.Error("Open(directory): got nil, want error")
	}
}

func TestObserveSeesScrubbedEvents(t *testing.T) {
	var seen []Event
	l, err := Open(filepath.Join(t.TempDir(), "audit.log"), Options{Observe: func(ev Event) { seen = append(seen, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Log(Event{Event: EventSecurityViolation, RequestID: "abc", Fields: map[string]any{"code": "print(1)"}})
	if len(seen) != 1 || seen[0].RequestID != "abc" || seen[0].Time.IsZero() || seen[0].Severity != SeverityCritical {
		t.Fatalf("observed %+v, want one stamped critical event with its request id", seen)
	}
	if _, ok := seen[0].Fields["code"]; ok {
		t.Errorf("the observer saw an unscrubbed field: %v", seen[0].Fields)
	}
}
