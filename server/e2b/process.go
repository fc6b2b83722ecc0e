package e2b

// envd's process.Process service: commands.run. A command runs as a child
// of the session's agent (subprocess.Popen of /bin/bash -l -c CMD in a
// run of the session), so it has the sandbox's confinement exactly: same
// user, namespaces, seccomp filter, cgroup limits, read-only root. Its
// stdout and stderr are the run's fds 1 and 2, which forge captures and
// streams while the run goes; they become data events as they come.
//
// What this cannot do, each refused with a Connect error that says so:
// a PTY, input to a running command (stdin is /dev/null), attaching to a
// running command from another call (Connect). Signals end a command with
// SIGKILL to its process group. A command holds its session for as long
// as it runs: run_code and other commands wait for it. The pid a command
// gets is forge's handle for it, not its pid inside the sandbox.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
)

// Limits of a command's request (on top of maxRPCMessage).
const (
	maxArgs    = 4096
	maxEnvs    = 1024
	minTimeout = time.Second
	// cmdGrace is the time between a command's own timeout, at which the
	// sandbox kills its process group, and the run's, at which forge
	// interrupts the run.
	cmdGrace = 5 * time.Second
	// defaultKeepalive is how often a quiet stream gets a keepalive event
	// when the client names no Keepalive-Ping-Interval.
	defaultKeepalive = 30 * time.Second
	// maxPendingOutput bounds the output waiting for a slow client; past
	// it the stream skips ahead and the rest comes from the run's result.
	maxPendingOutput = 4 << 20
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
	last uint32
	runs map[string]map[uint32]*command // by sandbox id, then pid
}

// command is one running command.
type command struct {
	pid    uint32
	tag    *string
	config processConfig
	kill   context.CancelFunc // ends the run: the sandbox kills the process group
	killed bool               // guarded by the table's mu
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
	t.last++
	if t.last < 1000 {
		t.last = 1000 // clear of the small pids of the sandbox's own processes
	}
	c.pid = t.last
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

// signal kills c (SendSignal).
func (t *commandTable) signal(c *command) {
	t.mu.Lock()
	c.killed = true
	t.mu.Unlock()
	c.kill()
}

func (t *commandTable) wasKilled(c *command) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return c.killed
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
	case "List":
		serveUnary(w, r, func(_ *http.Request, _ *struct{}) (*listResponse, error) {
			return &listResponse{Processes: h.cmds.list(sb.ID)}, nil
		})
	case "SendSignal":
		serveUnary(w, r, func(_ *http.Request, q *selectRequest) (*struct{}, error) {
			c, err := h.selectCommand(sb, q.Process)
			if err != nil {
				return nil, err
			}
			switch {
			case q.Signal.IsName && (q.Signal.Name == "SIGNAL_SIGKILL" || q.Signal.Name == "SIGNAL_SIGTERM"),
				!q.Signal.IsName && (q.Signal.Number == 9 || q.Signal.Number == 15):
			default:
				return nil, connectErrorf(codeInvalidArgument, "signal %v: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", signalName(q.Signal))
			}
			h.cmds.signal(c)
			return &struct{}{}, nil
		})
	case "Connect":
		var q selectRequest
		err := readStreamRequest(r, &q)
		s := newStreamWriter(w)
		if err != nil {
			s.End(err)
			return
		}
		if _, err := h.selectCommand(sb, q.Process); err != nil {
			s.End(err)
			return
		}
		s.End(connectErrorf(codeUnimplemented, "forge streams a command's output to the call that started it only; it cannot attach another stream to a running command"))
	case "SendInput", "StreamInput", "CloseStdin":
		writeConnectError(w, connectErrorf(codeUnimplemented, "process.Process/%s: forge runs commands with stdin at /dev/null and cannot send input to a running command; pass the input in the command itself (a pipe or a here-document)", method))
	case "Update":
		writeConnectError(w, errNoPTY)
	default:
		writeConnectError(w, connectErrorf(codeUnimplemented, "process.Process has no method %q here (forge serves Start, List, SendSignal)", truncate(method, 60)))
	}
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
	case q.Stdin != nil && *q.Stdin:
		return spec, connectErrorf(codeUnimplemented, "stdin=True: forge runs commands with stdin at /dev/null and cannot send input to them; pass the input in the command itself (a pipe or a here-document)")
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
	maxT := time.Duration(h.config().Execution.MaxTimeout) - cmdGrace
	if spec.timeout == 0 || spec.timeout > maxT {
		spec.timeout = maxT // the longest a run may take (execution.max_timeout)
	}
	spec.timeout = max(spec.timeout, minTimeout)
	return spec, nil
}

// processSnippet runs the command as a child of the agent in its own
// process group, waits for it with the command's timeout and kills the
// group on a timeout or an interrupt (a signal from SendSignal, or the
// client gone). It returns {"rc", "how"} or {"error": [code, message]}.
const processSnippet = `
import os, signal, subprocess, sys

def main(a):
    sys.stdout.flush()
    sys.stderr.flush()
    # /home/user is the workspace's E2B name; where the sandbox shows the
    # workspace there too, commands see that name.
    home, cwd = "/workspace", a["cwd"]
    try:
        if os.path.samefile("/home/user", "/workspace"):
            home, cwd = "/home/user", "/home/user" + cwd[len("/workspace"):]
    except OSError:
        pass
    if not os.path.isdir(cwd):
        return {"error": ["invalid_argument", "cwd %s is not a directory" % a["shown_cwd"]]}
    env = dict(os.environ)
    env.update({"HOME": home, "USER": "user", "LOGNAME": "user", "PWD": cwd})
    env.update(a["env"])
    p, how = None, "exit"
    try:
        p = subprocess.Popen(a["argv"], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             start_new_session=True, close_fds=True)
        p.wait(timeout=a["timeout"])
    except subprocess.TimeoutExpired:
        how = "timeout"
    except KeyboardInterrupt:
        how = "killed"
    except OSError as e:
        return {"error": ["invalid_argument", "starting %s: %s" % (a["argv"][0], e.strerror or e)]}
    if p is None:
        return {"rc": -signal.SIGKILL, "how": how}
    if p.returncode is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        while True:
            try:
                p.wait()
                break
            except KeyboardInterrupt:
                pass
    return {"rc": p.returncode, "how": how}
`

// startProcess is process.Process/Start: the command's events streamed.
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
	ctx, kill := context.WithCancel(r.Context())
	defer kill()
	cfg := processConfig{Cmd: q.Process.Cmd, Args: q.Process.Args, Envs: q.Process.Envs, Cwd: q.Process.Cwd}
	c := &command{tag: q.Tag, config: cfg, kill: kill}
	h.cmds.add(sb.ID, c)
	defer h.cmds.remove(sb.ID, c.pid)
	if s.Send(eventResponse{Event: processEvent{Start: &startEvent{Pid: c.pid}}}) != nil {
		return
	}
	pump := newOutputPump(s, keepaliveInterval(r))
	defer pump.close()
	cwdShown := HomeDir
	if q.Process.Cwd != nil && *q.Process.Cwd != "" {
		cwdShown = *q.Process.Cwd
	}
	args := map[string]any{"argv": spec.argv, "env": spec.env, "cwd": spec.cwd, "shown_cwd": cwdShown,
		"timeout": spec.timeout.Seconds()}
	res, err := h.runSnippet(ctx, sb, processSnippet, args, spec.timeout+cmdGrace, pump.add)
	pump.close()
	if err != nil {
		if h.cmds.wasKilled(c) {
			err = nil
			res = &kernel.Result{Result: map[string]any{"rc": json.Number("-9"), "how": "killed"}}
		} else if ctx.Err() != nil {
			return // the client is gone
		} else {
			s.End(err)
			return
		}
	}
	s.End(h.finishProcess(s, pump, res, spec, h.cmds.wasKilled(c)))
}

// finishProcess sends the output the stream skipped and the end event of
// res; its error, if any, ends the stream.
func (h *Handler) finishProcess(s *streamWriter, pump *outputPump, res *kernel.Result, spec commandSpec, killed bool) error {
	var rep struct {
		RC    *int     `json:"rc"`
		How   string   `json:"how"`
		Error []string `json:"error"`
	}
	b, _ := json.Marshal(res.Result)
	_ = json.Unmarshal(b, &rep)
	switch {
	case killed && rep.RC == nil:
		rep.How = "killed" // interrupted before the snippet could answer
	case len(rep.Error) == 2:
		return &ConnectError{Code: rep.Error[0], Message: rep.Error[1]}
	case res.OOMKilled:
		return connectErrorf(codeResourceExhausted, "the sandbox ran out of memory (its memory limit) while the command ran; the session is lost")
	case res.TimedOut || rep.How == "timeout":
		return connectErrorf(codeDeadlineExceeded, "the command did not finish within %s and was killed (the call's timeout, at most execution.max_timeout)", spec.timeout)
	case res.Error != nil:
		return connectErrorf(codeInternal, "forge's command runner failed in the sandbox: %s: %s", res.Error.Type, truncate(res.Error.Message, 300))
	case rep.RC == nil && !killed:
		return connectErrorf(codeInternal, "the command's run ended without an exit status")
	}
	pump.rest(res.Stdout, res.Stderr)
	end := &endEvent{}
	rc := -int(syscall.SIGKILL)
	if rep.RC != nil {
		rc = *rep.RC
	}
	if rc >= 0 {
		end.ExitCode, end.Exited, end.Status = int32(rc), true, fmt.Sprintf("exit status %d", rc)
	} else {
		end.ExitCode, end.Status = -1, "signal: "+syscall.Signal(-rc).String()
	}
	if res.Truncated {
		msg := fmt.Sprintf("the output over %d bytes per stream (execution.output_limit) was cut", h.config().Execution.OutputLimit)
		end.Error = &msg
	}
	if err := s.Send(eventResponse{Event: processEvent{End: end}}); err != nil {
		return err
	}
	return nil
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

// outputPump turns the run's progress reports into data events without
// blocking the engine: reports queue, one goroutine sends them, and a
// keepalive goes out when nothing else did for a while. The end of the
// output comes from the run's result (rest); when reports lost output (the
// run wrote faster than it streams, or the client read slower), the
// stream stops there and rest sends all the remainder, so the client gets
// every byte the result has, in order per stream.
type outputPump struct {
	s    *streamWriter
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once

	// mu guards the fields below.
	mu      sync.Mutex
	queue   []dataEvent
	pending int
	broken  bool         // output was lost: stream no more, rest fills in
	sent    [2]int       // bytes of stdout, stderr sent
	sums    [2]hash.Hash // sha256 of what was sent, to check rest's prefix
}

func newOutputPump(s *streamWriter, keepalive time.Duration) *outputPump {
	p := &outputPump{s: s, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		sums: [2]hash.Hash{sha256.New(), sha256.New()}}
	go p.loop(keepalive)
	return p
}

// add queues a report (the engine's Progress callback; never blocks).
func (p *outputPump) add(r engine.Progress) {
	if r.Stdout == "" && r.Stderr == "" && r.Skipped == 0 {
		return
	}
	p.mu.Lock()
	switch {
	case p.broken:
	case r.Skipped > 0 || p.pending+len(r.Stdout)+len(r.Stderr) > maxPendingOutput:
		p.broken = true
	default:
		for i, out := range []string{r.Stdout, r.Stderr} {
			if out == "" {
				continue
			}
			ev := dataEvent{Stdout: []byte(out)}
			if i == 1 {
				ev = dataEvent{Stderr: []byte(out)}
			}
			p.queue = append(p.queue, ev)
			p.pending += len(out)
			p.sent[i] += len(out)
			p.sums[i].Write([]byte(out))
		}
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *outputPump) loop(keepalive time.Duration) {
	defer close(p.done)
	t := time.NewTicker(keepalive)
	defer t.Stop()
	for {
		select {
		case <-p.kick:
			p.flush()
		case <-t.C:
			if p.s.Send(eventResponse{Event: processEvent{Keepalive: &struct{}{}}}) != nil {
				return
			}
		case <-p.stop:
			p.flush()
			return
		}
	}
}

// flush sends the queued data events.
func (p *outputPump) flush() {
	p.mu.Lock()
	q := p.queue
	p.queue, p.pending = nil, 0
	p.mu.Unlock()
	for _, ev := range q {
		if p.s.Send(eventResponse{Event: processEvent{Data: &ev}}) != nil {
			return
		}
	}
}

// close sends what is queued and stops the pump (idempotent).
func (p *outputPump) close() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

// rest sends, after close, the output that did not stream (the last
// moments of the run, or what the stream lost): the part of the result's
// stdout and stderr beyond what was sent, when what was sent is the
// result's beginning.
func (p *outputPump) rest(stdout, stderr string) {
	p.mu.Lock()
	sent, sums := p.sent, p.sums
	p.mu.Unlock()
	for i, out := range []string{stdout, stderr} {
		if len(out) <= sent[i] {
			continue
		}
		prefix := sha256.Sum256([]byte(out[:sent[i]]))
		if string(prefix[:]) != string(sums[i].Sum(nil)) {
			continue // the result's text differs from what streamed: leave it
		}
		for chunk := out[sent[i]:]; chunk != ""; {
			n := min(len(chunk), 64<<10)
			ev := dataEvent{Stdout: []byte(chunk[:n])}
			if i == 1 {
				ev = dataEvent{Stderr: []byte(chunk[:n])}
			}
			if p.s.Send(eventResponse{Event: processEvent{Data: &ev}}) != nil {
				return
			}
			chunk = chunk[n:]
		}
	}
}
