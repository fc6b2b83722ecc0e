package e2b

// envd's process.Process service: commands.run. A command runs as a child
// of the session's agent (subprocess.Popen of /bin/bash -l -c CMD, started
// by a short run in the session), so it has the sandbox's confinement
// exactly: same user, namespaces, seccomp filter, cgroup limits, read-only
// root. Its stdin (when asked for), stdout and stderr are pipes held by
// threads of the agent (commandSnippet): output waits there, bounded, and
// input queues there, bounded.
//
// A command does not hold its session: a poller on the host (one per
// command) fetches its output in short runs, each at most pollWait long,
// and fans it out to the streams attached to it (Start's, and Connect's).
// Between those runs the session is free for run_code, files and other
// commands; during any run the command runs (a session's sandbox is frozen
// only between runs, and the poller keeps those gaps short). A client that
// goes away leaves the command running, as E2B's envd does; Connect
// re-attaches. The command ends when it exits, on SendSignal, at its
// timeout, or with its sandbox (kill, pause, the timeout reaper).
//
// A command's pid is its pid inside the sandbox (as E2B's: `kill -0 PID`
// and ps agree with it). PTYs are refused.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// Limits of a command's request (on top of maxRPCMessage).
const (
	maxArgs    = 4096
	maxEnvs    = 1024
	minTimeout = time.Second
	// defaultKeepalive is how often a quiet stream gets a keepalive event
	// when the client names no Keepalive-Ping-Interval.
	defaultKeepalive = 30 * time.Second
	// maxPendingOutput bounds the output waiting for one slow client; past
	// it that client's stream ends with resource_exhausted (the command
	// goes on; Connect re-attaches).
	maxPendingOutput = 4 << 20
	// MaxStdinChunk is the most one SendInput may carry, and
	// maxPendingStdin the most input a command may have queued unread in
	// the sandbox (commandSnippet's MAX_STDIN): past either the call is
	// refused naming the limit.
	MaxStdinChunk   = 256 << 10
	maxPendingStdin = 1 << 20
	// pollWait is how long one poll waits in the sandbox for output, so
	// how long it holds the session; pollChunk the most output one poll
	// brings back (the sandbox keeps at most commandSnippet's MAX_PENDING
	// per command, then the command blocks on its pipe, as with any slow
	// reader).
	pollWait = 100 * time.Millisecond
	// pollWaitBusy is the poll's wait for busyFor after another call had
	// the session: calls that come in a row wait less for the session.
	pollWaitBusy = 10 * time.Millisecond
	busyFor      = 2 * time.Second
	pollChunk    = 512 << 10 // base64, it stays within the agent's default output cap (1 MiB)
	// opTimeout bounds one run of commandSnippet.
	opTimeout = 15 * time.Second
)

// processConfig is process.ProcessConfig.
type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// startRequest is process.StartRequest.
type startRequest struct {
	Process *processConfig  `json:"process"`
	Pty     json.RawMessage `json:"pty"`
	Tag     *string         `json:"tag"`
	Stdin   *bool           `json:"stdin"`
}

// processSelector is process.ProcessSelector (a oneof: pid or tag).
type processSelector struct {
	Pid *protoUint32 `json:"pid"`
	Tag *string      `json:"tag"`
}

type selectRequest struct {
	Process *processSelector `json:"process"`
	Signal  protoEnum        `json:"signal"`
}

// processEvent is process.ProcessEvent; exactly one field is set.
type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	Pid uint32 `json:"pid,omitempty"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"` // bytes: base64
	Stderr []byte `json:"stderr,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// eventResponse is process.StartResponse and ConnectResponse.
type eventResponse struct {
	Event processEvent `json:"event"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	Pid    uint32        `json:"pid,omitempty"`
	Tag    *string       `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfo `json:"processes,omitempty"`
}

// commandTable is the running commands of every sandbox; its zero value
// is ready.
type commandTable struct {
	mu   sync.Mutex
	runs map[string]map[uint32]*command // by sandbox id, then pid
	// The session demand of each sandbox id: how many other calls want or
	// hold its session (a poll then waits), a channel closed when none do
	// any more, and when a call last wanted it (polls are short then).
	want map[string]int
	free map[string]chan struct{}
	last map[string]time.Time
}

// use marks sandboxID's session wanted by a call until release: the next
// polls wait for release, and are short for a while after it.
func (t *commandTable) use(sandboxID string) (release func()) {
	t.mu.Lock()
	if t.want == nil {
		t.want, t.free, t.last = map[string]int{}, map[string]chan struct{}{}, map[string]time.Time{}
	}
	t.want[sandboxID]++
	if t.free[sandboxID] == nil {
		t.free[sandboxID] = make(chan struct{})
	}
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.last[sandboxID] = time.Now()
			if t.want[sandboxID]--; t.want[sandboxID] == 0 {
				delete(t.want, sandboxID)
				close(t.free[sandboxID])
				delete(t.free, sandboxID)
			}
		})
	}
}

// beginPoll waits until no call wants sandboxID's session, then returns
// how long the next poll may wait in the sandbox: pollWait, or
// pollWaitBusy while calls come.
func (t *commandTable) beginPoll(ctx context.Context, sandboxID string) (time.Duration, error) {
	for {
		t.mu.Lock()
		free, last := t.free[sandboxID], t.last[sandboxID]
		if free == nil && !last.IsZero() && time.Since(last) > busyFor {
			delete(t.last, sandboxID)
		}
		t.mu.Unlock()
		if free == nil {
			if time.Since(last) < busyFor {
				return pollWaitBusy, nil
			}
			return pollWait, nil
		}
		select {
		case <-free:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// command is one running command: its poller publishes events to the
// streams attached to it until the command ends.
type command struct {
	pid    uint32
	tag    *string
	config processConfig
	stdin  bool
	limit  time.Duration      // its timeout
	stop   context.CancelFunc // stops the poller (the sandbox is going away)
	done   chan struct{}      // closed when the poller has finished

	// mu guards the fields below.
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	ended   bool
	killed  bool // SendSignal was sent
	timeout bool // killed at its timeout
}

// subscriber is one stream attached to a command: events queue here and
// its handler sends them.
type subscriber struct {
	kick    chan struct{}
	mu      sync.Mutex
	queue   []processEvent
	pending int
	final   error // the stream's end (nil: {}), once ended is set
	ended   bool
}

func (t *commandTable) add(sandboxID string, c *command) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.runs == nil {
		t.runs = map[string]map[uint32]*command{}
	}
	if t.runs[sandboxID] == nil {
		t.runs[sandboxID] = map[uint32]*command{}
	}
	t.runs[sandboxID][c.pid] = c
}

func (t *commandTable) remove(sandboxID string, pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.runs[sandboxID], pid)
	if len(t.runs[sandboxID]) == 0 {
		delete(t.runs, sandboxID)
	}
}

func (t *commandTable) list(sandboxID string) []processInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []processInfo{}
	for _, c := range t.runs[sandboxID] {
		out = append(out, processInfo{Config: c.config, Pid: c.pid, Tag: c.tag})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out
}

// find is the command sel names, or nil.
func (t *commandTable) find(sandboxID string, sel *processSelector) *command {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.runs[sandboxID] {
		if sel.Pid != nil && c.pid == uint32(*sel.Pid) || sel.Pid == nil && sel.Tag != nil && c.tag != nil && *c.tag == *sel.Tag {
			return c
		}
	}
	return nil
}

// stopSandbox stops the pollers of sandboxID's commands and waits for them
// (at most until ctx ends): its sandbox is being paused or killed, which
// ends the commands, and a poller must not bring the session back.
func (t *commandTable) stopSandbox(ctx context.Context, sandboxID, why string) {
	t.mu.Lock()
	var cs []*command
	for _, c := range t.runs[sandboxID] {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.finish(nil, connectErrorf(codeUnavailable, "the command ended: %s", why))
		c.stop()
	}
	for _, c := range cs {
		select {
		case <-c.done:
		case <-ctx.Done():
			return
		}
	}
}

// subscribe attaches a stream; nil if the command has ended.
func (c *command) subscribe() *subscriber {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return nil
	}
	s := &subscriber{kick: make(chan struct{}, 1)}
	c.subs[s] = struct{}{}
	return s
}

func (c *command) unsubscribe(s *subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, s)
}

// publish queues ev to every attached stream; one that has more than
// maxPendingOutput unsent is ended (its client reads too slowly).
func (c *command) publish(ev processEvent, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		s.mu.Lock()
		if s.pending+size > maxPendingOutput {
			s.ended, s.final = true, connectErrorf(codeResourceExhausted, "the client read the command's output too slowly (over %d bytes waiting); the command goes on: connect to pid %d again", maxPendingOutput, c.pid)
			delete(c.subs, s)
		} else {
			s.queue = append(s.queue, ev)
			s.pending += size
		}
		s.mu.Unlock()
		s.wake()
	}
}

// finish ends every attached stream with the end event or err (once).
func (c *command) finish(end *endEvent, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	for s := range c.subs {
		s.mu.Lock()
		if end != nil {
			s.queue = append(s.queue, processEvent{End: end})
		}
		s.ended, s.final = true, err
		s.mu.Unlock()
		s.wake()
	}
	c.subs = nil
}

func (s *subscriber) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// take returns the queued events, and whether the stream has ended.
func (s *subscriber) take() ([]processEvent, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue, s.pending = nil, 0
	return q, s.ended, s.final
}

// serveProcess is POST /process.Process/{method}.
func (h *Handler) serveProcess(w http.ResponseWriter, r *http.Request, sb *Sandbox, method string) {
	if err := rpcUser(r); err != nil {
		if method == "Start" || method == "Connect" {
			newStreamWriter(w).End(err)
		} else {
			writeConnectError(w, err)
		}
		return
	}
	switch method {
	case "Start":
		h.startProcess(w, r, sb)
	case "Connect":
		h.connectProcess(w, r, sb)
	case "List":
		serveUnary(w, r, func(_ *http.Request, _ *struct{}) (*listResponse, error) {
			return &listResponse{Processes: h.cmds.list(sb.ID)}, nil
		})
	case "SendSignal":
		serveUnary(w, r, func(r *http.Request, q *selectRequest) (*struct{}, error) {
			return &struct{}{}, h.signalProcess(r.Context(), sb, q)
		})
	case "SendInput":
		serveUnary(w, r, func(r *http.Request, q *inputRequest) (*struct{}, error) {
			return &struct{}{}, h.sendInput(r.Context(), sb, q)
		})
	case "CloseStdin":
		serveUnary(w, r, func(r *http.Request, q *selectRequest) (*struct{}, error) {
			c, err := h.selectCommand(sb, q.Process)
			if err != nil {
				return nil, err
			}
			return &struct{}{}, h.commandOp(r.Context(), sb, map[string]any{"op": "close", "id": c.pid}, nil)
		})
	case "StreamInput":
		writeConnectError(w, connectErrorf(codeUnimplemented, "process.Process/StreamInput (a client stream): forge takes input with SendInput (commands.send_stdin), at most %d bytes a call", MaxStdinChunk))
	case "Update":
		writeConnectError(w, errNoPTY)
	default:
		writeConnectError(w, connectErrorf(codeUnimplemented, "process.Process has no method %q here (forge serves Start, Connect, List, SendSignal, SendInput, CloseStdin)", truncate(method, 60)))
	}
}

// inputRequest is process.SendInputRequest.
type inputRequest struct {
	Process *processSelector `json:"process"`
	Input   *struct {
		Stdin []byte          `json:"stdin"` // bytes: base64
		Pty   json.RawMessage `json:"pty"`
	} `json:"input"`
}

func (h *Handler) sendInput(ctx context.Context, sb *Sandbox, q *inputRequest) error {
	c, err := h.selectCommand(sb, q.Process)
	switch {
	case err != nil:
		return err
	case q.Input == nil || len(q.Input.Pty) > 0 && string(q.Input.Pty) != "null":
		return connectErrorf(codeInvalidArgument, "no input: give input.stdin (forge has no PTY)")
	case !c.stdin:
		return connectErrorf(codeFailedPrecondition, "process %d was started without stdin: start it with stdin=True to send it input", c.pid)
	case len(q.Input.Stdin) > MaxStdinChunk:
		return connectErrorf(codeInvalidArgument, "input of %d bytes, over forge's limit of %d bytes per SendInput: send it in smaller parts", len(q.Input.Stdin), MaxStdinChunk)
	}
	return h.commandOp(ctx, sb, map[string]any{"op": "input", "id": c.pid, "data": q.Input.Stdin}, nil)
}

func (h *Handler) signalProcess(ctx context.Context, sb *Sandbox, q *selectRequest) error {
	c, err := h.selectCommand(sb, q.Process)
	if err != nil {
		return err
	}
	var sig syscall.Signal
	switch {
	case q.Signal.IsName && q.Signal.Name == "SIGNAL_SIGKILL", !q.Signal.IsName && q.Signal.Number == 9:
		sig = syscall.SIGKILL
	case q.Signal.IsName && q.Signal.Name == "SIGNAL_SIGTERM", !q.Signal.IsName && q.Signal.Number == 15:
		sig = syscall.SIGTERM
	default:
		return connectErrorf(codeInvalidArgument, "signal %v: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", signalName(q.Signal))
	}
	c.mu.Lock()
	c.killed = true
	c.mu.Unlock()
	return h.commandOp(ctx, sb, map[string]any{"op": "signal", "id": c.pid, "sig": int(sig)}, nil)
}

var errNoPTY = connectErrorf(codeUnimplemented, "forge has no PTY (pseudo-terminal) for sandboxes: run commands with commands.run, whose output streams as it is produced")

func signalName(e protoEnum) string {
	if e.IsName {
		return strconv.Quote(truncate(e.Name, 40))
	}
	return strconv.FormatInt(e.Number, 10)
}

func (h *Handler) selectCommand(sb *Sandbox, sel *processSelector) (*command, error) {
	if sel == nil || sel.Pid == nil && sel.Tag == nil {
		return nil, connectErrorf(codeInvalidArgument, "no process selected: give its pid or tag")
	}
	c := h.cmds.find(sb.ID, sel)
	if c == nil {
		what := "tag " + strconv.Quote(truncate(deref(sel.Tag), 60))
		if sel.Pid != nil {
			what = "pid " + strconv.FormatUint(uint64(*sel.Pid), 10)
		}
		return nil, connectErrorf(codeNotFound, "process with %s not found (it ended, or was never started in sandbox %s)", what, sb.ID)
	}
	return c, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// commandSpec is a validated Start request: what the sandbox runs.
type commandSpec struct {
	argv    []string
	env     map[string]string
	cwd     string // in the sandbox
	timeout time.Duration
}

// checkStart validates a Start request of sb against forge's limits.
func (h *Handler) checkStart(r *http.Request, sb *Sandbox, q *startRequest) (commandSpec, error) {
	var spec commandSpec
	switch {
	case q.Process == nil || q.Process.Cmd == "":
		return spec, connectErrorf(codeInvalidArgument, "no command: process.cmd is required")
	case len(q.Pty) > 0 && string(q.Pty) != "null":
		return spec, errNoPTY
	case len(q.Process.Args) > maxArgs:
		return spec, connectErrorf(codeInvalidArgument, "%d arguments, over the limit of %d", len(q.Process.Args), maxArgs)
	case len(q.Process.Envs)+len(sb.EnvVars) > maxEnvs:
		return spec, connectErrorf(codeInvalidArgument, "%d environment variables, over the limit of %d", len(q.Process.Envs)+len(sb.EnvVars), maxEnvs)
	}
	spec.argv = append([]string{q.Process.Cmd}, q.Process.Args...)
	for _, a := range spec.argv {
		if strings.ContainsRune(a, 0) {
			return spec, connectErrorf(codeInvalidArgument, "the command line contains a NUL byte")
		}
	}
	spec.env = map[string]string{}
	for _, m := range []map[string]string{sb.EnvVars, q.Process.Envs} {
		for k, v := range m {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				return spec, connectErrorf(codeInvalidArgument, "environment variable %q: want a name without '=' or NUL and a value without NUL", truncate(k, 60))
			}
			spec.env[k] = v
		}
	}
	cwd := HomeDir
	if q.Process.Cwd != nil && *q.Process.Cwd != "" {
		cwd = *q.Process.Cwd
	}
	var err error
	if spec.cwd, err = workspacePath(cwd); err != nil {
		return spec, err
	}
	if spec.timeout, err = connectTimeout(r); err != nil {
		return spec, err
	}
	maxT := time.Duration(h.config().Execution.MaxTimeout)
	if spec.timeout == 0 || spec.timeout > maxT {
		spec.timeout = maxT // the longest a run may take (execution.max_timeout)
	}
	spec.timeout = max(spec.timeout, minTimeout)
	return spec, nil
}

// commandSnippet keeps a sandbox's commands in the agent, in a module of
// its own (sys.modules, not the user's namespace), across runs: the
// process, a thread per pipe, their output waiting for the host's polls
// (at most MAX_PENDING, then the reader waits, so the command blocks on
// its pipe) and the input queued for its stdin (at most MAX_STDIN). Each
// run does one op and prints one JSON line: {"ok": …} or {"error": [code,
// message]}.
const commandSnippet = `
import base64, json, os, signal, subprocess, sys, threading, time, types

MAX_PENDING = 4 << 20
MAX_STDIN = %d

def host():
    m = sys.modules.get("_forge_e2b_commands")
    if m is None:
        m = types.ModuleType("_forge_e2b_commands")
        m.procs, m.cv = {}, threading.Condition()
        sys.modules[m.__name__] = m
    return m

def reader(m, rec, f, kind):
    fd = f.fileno()
    while True:
        try:
            b = os.read(fd, 65536)
        except OSError:
            b = b""
        with m.cv:
            if not b:
                rec["open"] -= 1
                m.cv.notify_all()
                return
            while rec["pending"] > MAX_PENDING and not rec["dropped"]:
                m.cv.wait()
            if rec["dropped"]:  # the command ended; a process it left holds the pipe
                continue
            rec["events"].append((kind, b))
            rec["pending"] += len(b)
            m.cv.notify_all()

def waiter(m, rec):
    rc = rec["p"].wait()
    with m.cv:
        rec["rc"], rec["exited"] = rc, time.monotonic()
        m.cv.notify_all()

def writer(m, rec):
    f = rec["p"].stdin
    while True:
        with m.cv:
            while not rec["input"] and not rec["dropped"]:
                m.cv.wait()
            item = rec["input"].pop(0) if rec["input"] and not rec["dropped"] else None
        if item is None:
            try:
                f.close()
            except OSError:
                pass
            return
        try:
            f.write(item)
            f.flush()
        except OSError:
            pass  # the command closed its stdin or ended: the input is dropped, as in envd
        with m.cv:
            rec["queued"] -= len(item)

def start(m, a):
    home, cwd = "/workspace", a["cwd"]
    try:
        if os.path.samefile("/home/user", "/workspace"):
            home, cwd = "/home/user", "/home/user" + cwd[len("/workspace"):]
    except OSError:
        pass
    if not os.path.isdir(cwd):
        return {"error": ["invalid_argument", "cwd %%s is not a directory" %% a["shown_cwd"]]}
    env = dict(os.environ)
    env.update({"HOME": home, "USER": "user", "LOGNAME": "user", "PWD": cwd})
    env.update(a["env"])
    try:
        p = subprocess.Popen(a["argv"], cwd=cwd, env=env, bufsize=0,
                             stdin=subprocess.PIPE if a["stdin"] else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True, close_fds=True)
    except OSError as e:
        return {"error": ["invalid_argument", "starting %%s: %%s" %% (a["argv"][0], e.strerror or e)]}
    rec = {"p": p, "events": [], "pending": 0, "open": 2, "rc": None, "exited": 0,
           "input": [], "queued": 0, "dropped": False}
    m.procs[p.pid] = rec
    for f, kind in ((p.stdout, "o"), (p.stderr, "e")):
        threading.Thread(target=reader, args=(m, rec, f, kind), daemon=True).start()
    threading.Thread(target=waiter, args=(m, rec), daemon=True).start()
    if a["stdin"]:
        threading.Thread(target=writer, args=(m, rec), daemon=True).start()
    return {"ok": p.pid}

def done(rec):
    # Exited, and its pipes closed (or still held by a process it left
    # behind, a second after it exited).
    return rec["rc"] is not None and not rec["events"] and (
        rec["open"] == 0 or time.monotonic() - rec["exited"] > 1)

def poll(m, a):
    # Waits up to a["wait"] for output or the end, holding the session that
    # long at most.
    rec = m.procs.get(a["id"])
    if rec is None:
        return {"error": ["not_found", "the command is gone from the sandbox (it was restarted)"]}
    end = time.monotonic() + a["wait"]
    with m.cv:
        while not rec["events"] and not done(rec):
            left = end - time.monotonic()
            if left <= 0:
                break
            m.cv.wait(min(left, 0.05))
        out, size = [], 0
        while rec["events"] and size < a["chunk"]:
            kind, b = rec["events"].pop(0)
            out.append([kind, base64.b64encode(b).decode()])
            size += len(b)
        rec["pending"] -= size
        fin = done(rec)
        if fin:
            rec["dropped"] = True  # the reader and writer threads end
            del m.procs[a["id"]]
        m.cv.notify_all()
    return {"ok": {"out": out, "rc": rec["rc"] if fin else None, "done": fin}}

def run(a):
    # An interrupt meant for other code (a run's timeout) must not cut an op
    # short: output taken and not answered would be lost.
    old = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        return main(a)
    finally:
        signal.signal(signal.SIGINT, old)

def main(a):
    m = host()
    if a["op"] == "start":
        return start(m, a)
    if a["op"] == "poll":
        return poll(m, a)
    rec = m.procs.get(a["id"])
    if rec is None:
        return {"error": ["not_found", "process %%d has ended" %% a["id"]]}
    if a["op"] == "signal":
        try:
            os.killpg(rec["p"].pid, a["sig"])
        except OSError:
            pass
        return {"ok": None}
    with m.cv:
        if a["op"] == "close":
            if rec["p"].stdin is not None:
                rec["input"].append(None)
        else:
            data = base64.b64decode(a["data"])
            if rec["queued"] + len(data) > MAX_STDIN:
                return {"error": ["resource_exhausted", "process %%d has %%d bytes of input it has not read; forge queues at most %%d bytes" %% (a["id"], rec["queued"], MAX_STDIN)]}
            rec["input"].append(data)
            rec["queued"] += len(data)
        m.cv.notify_all()
    return {"ok": None}

`

// commandCode is commandSnippet doing op args, in a namespace of its own.
func commandCode(args map[string]any) (string, error) {
	a, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	lit, _ := json.Marshal(string(a))
	s, _ := json.Marshal(fmt.Sprintf(commandSnippet, maxPendingStdin) + "\nprint(json.dumps(run(json.loads(" + string(lit) + "))))\n")
	return fmt.Sprintf("exec(%s, {'__name__': '__forge_e2b__'})", s), nil
}

// errPreempted: the op was interrupted before it answered (a late
// SIGINT meant for a run before it, before the op could ignore it).
var errPreempted = errors.New("interrupted before it answered")

// commandOp runs one op of commandSnippet in sb's running sandbox and
// decodes its "ok" into out. It takes the session for the op only, and
// bypasses the tenant gate: the command it serves was admitted at Start.
func (h *Handler) commandOp(ctx context.Context, sb *Sandbox, args map[string]any, out any) error {
	for try := 0; ; try++ {
		err := h.commandOpOnce(ctx, sb, args, out)
		if !errors.Is(err, errPreempted) || try == 2 {
			return err
		}
	}
}

func (h *Handler) commandOpOnce(ctx context.Context, sb *Sandbox, args map[string]any, out any) error {
	code, err := commandCode(args)
	if err != nil {
		return err
	}
	if args["op"] != "poll" {
		defer h.cmds.use(sb.ID)()
	}
	var line string
	err = h.opts.Engine.WithSession(ctx, sb.Principal(), sb.ID, func(s *sandbox.Sandbox) error {
		// Not cancelled with ctx: an op is short, and a run cut off while
		// its request is written breaks the sandbox's channel.
		res, err := s.Exec(context.WithoutCancel(ctx), code, sandbox.ExecOptions{Timeout: opTimeout, KeepAlive: true, Grace: time.Second})
		if err != nil {
			return err
		}
		line = strings.TrimSpace(res.Stdout)
		if i := strings.LastIndexByte(line, '\n'); i >= 0 {
			line = line[i+1:]
		}
		switch {
		case line != "" && json.Valid([]byte(line)):
			return nil // the answer came, whatever happened after it (an interrupt)
		case res.OOMKilled:
			return connectErrorf(codeResourceExhausted, "the sandbox ran out of memory (its memory limit); the session is lost")
		case res.Error != nil && res.Error.Type == "KeyboardInterrupt":
			return errPreempted // an interrupt meant for a run before it
		case res.TimedOut:
			return connectErrorf(codeDeadlineExceeded, "forge's command helper did not answer within %s", opTimeout)
		case res.Error != nil:
			return connectErrorf(codeInternal, "forge's command helper failed in the sandbox: %s: %s", res.Error.Type, truncate(res.Error.Message, 300))
		}
		return nil
	})
	switch {
	case errors.Is(err, errPreempted):
		return errPreempted
	case err != nil:
		return engineError(err)
	}
	var rep struct {
		OK    json.RawMessage `json:"ok"`
		Error []string        `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		return connectErrorf(codeInternal, "forge's command helper in the sandbox gave no reply it could read (%s)", truncate(line, 100))
	}
	if len(rep.Error) == 2 {
		return &ConnectError{Code: rep.Error[0], Message: rep.Error[1]}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rep.OK, out)
}

// startProcess is process.Process/Start: the command started, then its
// events streamed until it ends or the client goes (it then runs on).
func (h *Handler) startProcess(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	// The request is read before the response begins: net/http closes an
	// HTTP/1 request's body once the response is under way.
	var q startRequest
	err := readStreamRequest(r, &q)
	s := newStreamWriter(w)
	if err != nil {
		s.End(err)
		return
	}
	spec, err := h.checkStart(r, sb, &q)
	if err != nil {
		s.End(err)
		return
	}
	cfg := processConfig{Cmd: q.Process.Cmd, Args: q.Process.Args, Envs: q.Process.Envs, Cwd: q.Process.Cwd}
	pctx, stop := context.WithCancel(context.WithoutCancel(r.Context()))
	c := &command{tag: q.Tag, config: cfg, stdin: q.Stdin != nil && *q.Stdin, limit: spec.timeout, stop: stop,
		done: make(chan struct{}), subs: map[*subscriber]struct{}{}}
	cwdShown := HomeDir
	if q.Process.Cwd != nil && *q.Process.Cwd != "" {
		cwdShown = *q.Process.Cwd
	}
	// Started through the execute path: the tenant gate, rate limits and
	// the audit log see the command.
	args := map[string]any{"op": "start", "argv": spec.argv, "env": spec.env, "cwd": spec.cwd,
		"shown_cwd": cwdShown, "stdin": c.stdin}
	if c.pid, err = h.startCommand(pctx, sb, args); err != nil {
		stop()
		s.End(err)
		return
	}
	h.cmds.add(sb.ID, c)
	sub := c.subscribe()
	go h.pollCommand(pctx, sb, c, time.Now().Add(spec.timeout))
	if s.Send(eventResponse{Event: processEvent{Start: &startEvent{Pid: c.pid}}}) != nil {
		c.unsubscribe(sub)
		return
	}
	h.follow(r.Context(), s, c, sub, keepaliveInterval(r))
}

// startCommand runs the start op through the server's execute path.
func (h *Handler) startCommand(ctx context.Context, sb *Sandbox, args map[string]any) (pid uint32, _ error) {
	code, err := commandCode(args)
	if err != nil {
		return 0, err
	}
	if h.opts.Execute == nil {
		return 0, connectErrorf(codeUnavailable, "forge's E2B face has no execute path configured")
	}
	defer h.cmds.use(sb.ID)()
	res, err := h.opts.Execute(ctx, engine.Request{Principal: sb.Principal(), Client: "e2b", Code: code,
		SessionID: sb.ID, Image: sb.Image, Timeout: opTimeout})
	switch {
	case err != nil:
		return 0, engineError(err)
	case res.OOMKilled:
		return 0, connectErrorf(codeResourceExhausted, "the sandbox ran out of memory (its memory limit); the session is lost")
	case res.Error != nil:
		return 0, connectErrorf(codeInternal, "forge's command helper failed in the sandbox: %s: %s", res.Error.Type, truncate(res.Error.Message, 300))
	}
	var rep struct {
		OK    uint32   `json:"ok"`
		Error []string `json:"error"`
	}
	line := strings.TrimSpace(res.Stdout)
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		return 0, connectErrorf(codeInternal, "forge's command helper in the sandbox gave no reply it could read (%s)", truncate(line, 100))
	}
	if len(rep.Error) == 2 {
		return 0, &ConnectError{Code: rep.Error[0], Message: rep.Error[1]}
	}
	if rep.OK == 0 {
		return 0, connectErrorf(codeInternal, "forge's command helper in the sandbox gave no pid")
	}
	return rep.OK, nil
}

// connectProcess is process.Process/Connect: a stream attached to a
// running command, from its next output on.
func (h *Handler) connectProcess(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	var q selectRequest
	err := readStreamRequest(r, &q)
	s := newStreamWriter(w)
	if err != nil {
		s.End(err)
		return
	}
	c, err := h.selectCommand(sb, q.Process)
	if err != nil {
		s.End(err)
		return
	}
	sub := c.subscribe()
	if sub == nil {
		s.End(connectErrorf(codeNotFound, "process with pid %d has ended", c.pid))
		return
	}
	if s.Send(eventResponse{Event: processEvent{Start: &startEvent{Pid: c.pid}}}) != nil {
		c.unsubscribe(sub)
		return
	}
	h.follow(r.Context(), s, c, sub, keepaliveInterval(r))
}

// follow sends sub's events to s, with keepalives, until the command ends
// (the stream then ends) or ctx does (the client left; the command goes
// on).
func (h *Handler) follow(ctx context.Context, s *streamWriter, c *command, sub *subscriber, keepalive time.Duration) {
	defer c.unsubscribe(sub)
	t := time.NewTicker(keepalive)
	defer t.Stop()
	for {
		select {
		case <-sub.kick:
		case <-t.C:
			if s.Send(eventResponse{Event: processEvent{Keepalive: &struct{}{}}}) != nil {
				return
			}
			continue
		case <-ctx.Done():
			return
		}
		evs, ended, final := sub.take()
		for _, ev := range evs {
			if s.Send(eventResponse{Event: ev}) != nil {
				return
			}
		}
		if ended {
			s.End(final)
			return
		}
	}
}

// pollCommand fetches c's output and end from the sandbox, publishes them,
// and kills c at its deadline. It ends with the command, or when ctx does
// (stopSandbox).
func (h *Handler) pollCommand(ctx context.Context, sb *Sandbox, c *command, deadline time.Time) {
	defer close(c.done)
	defer h.cmds.remove(sb.ID, c.pid)
	defer c.stop()
	for {
		if ctx.Err() != nil {
			c.finish(nil, connectErrorf(codeUnavailable, "the command ended with its sandbox"))
			return
		}
		if !c.timeoutHit() && time.Now().After(deadline) {
			c.mu.Lock()
			c.timeout = true
			c.mu.Unlock()
			_ = h.commandOp(ctx, sb, map[string]any{"op": "signal", "id": c.pid, "sig": int(syscall.SIGKILL)}, nil)
		}
		var rep struct {
			Out  [][2]string `json:"out"`
			RC   *int        `json:"rc"`
			Done bool        `json:"done"`
		}
		wait, err := h.cmds.beginPoll(ctx, sb.ID)
		if err != nil {
			continue // ctx ended: the loop's top finishes
		}
		err = h.commandOp(ctx, sb, map[string]any{"op": "poll", "id": c.pid, "wait": wait.Seconds(), "chunk": pollChunk}, &rep)
		switch {
		case errors.Is(err, errPreempted):
			continue // interrupted before it took anything: poll again
		case err != nil:
			if ctx.Err() == nil {
				h.log.Warn("a command's output could not be fetched; its streams end", "sandbox", sb.ID, "pid", c.pid, "err", err)
				c.finish(nil, err)
			}
			return
		}
		for _, o := range rep.Out {
			b, err := base64.StdEncoding.DecodeString(o[1])
			if err != nil {
				continue
			}
			ev := dataEvent{Stdout: b}
			if o[0] == "e" {
				ev = dataEvent{Stderr: b}
			}
			c.publish(processEvent{Data: &ev}, len(b))
		}
		if rep.Done {
			c.finish(h.endOf(c, rep.RC))
			return
		}
	}
}

func (c *command) timeoutHit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeout
}

// endOf is the end event of a command that exited with rc (negative: the
// signal that killed it), or the error its stream ends with.
func (h *Handler) endOf(c *command, rc *int) (*endEvent, error) {
	if c.timeoutHit() {
		return nil, connectErrorf(codeDeadlineExceeded, "the command did not finish within %s and was killed (the call's timeout, at most execution.max_timeout)", c.limit)
	}
	end := &endEvent{}
	code := -int(syscall.SIGKILL)
	if rc != nil {
		code = *rc
	}
	if code >= 0 {
		end.ExitCode, end.Exited, end.Status = int32(code), true, fmt.Sprintf("exit status %d", code)
	} else {
		end.ExitCode, end.Status = -1, "signal: "+syscall.Signal(-code).String()
	}
	return end, nil
}

func (h *Handler) config() *profiles.Config {
	if h.opts.Config != nil {
		return h.opts.Config
	}
	return h.opts.Engine.Config()
}

// keepaliveInterval is the client's Keepalive-Ping-Interval (seconds),
// within 1..60 s.
func keepaliveInterval(r *http.Request) time.Duration {
	if n, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(min(n, 60)) * time.Second
	}
	return defaultKeepalive
}
