package main

// The warm runner: what lets a shell loop of `forge run` run near bare
// python's speed. The first `forge run` starts it on demand (there is no
// daemon to start); it is one forge process of the invoking user holding an
// engine whose zygote template stays warm, and it exits after
// FORGE_RUN_WARM (30 s by default) without a run. Each run is still a fresh
// sandbox (pool off: a child forked from the template), with every
// invariant of any other sandbox: only where the Python process comes from
// changes, the template, which a one-shot run starts and destroys for its
// one child.
//
// Its socket is <state_dir>/run/warm-<uid>/run.sock, mode 0600 in a 0700
// directory owned by the user, and every connection's peer credentials
// (SO_PEERCRED) must carry the runner's own uid: another account can
// neither reach the socket nor, were the modes loosened, be served. A
// client whose configuration or forge binary differs from the runner's is
// told so; the runner then exits and the client starts a new one, so a
// changed config file, FORGE_* variable or upgrade takes effect at once.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/ownedsock"
	"github.com/mcp-forge/forge/internal/peercred"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/kernel"
)

// warmEnv sets how long the warm runner waits for a run before it exits
// (a Go duration or seconds); 0 turns it off: every forge run is one-shot.
const warmEnv = "FORGE_RUN_WARM"

const defaultWarmIdle = 30 * time.Second

// warmCommand is the runner's hidden subcommand.
const warmCommand = "__warm-runner"

// warmOnly is set by fastRun: a run may only use a runner that is there.
var warmOnly bool

// errNoRunner: no runner answered a warmOnly run, which did not start.
var errNoRunner = errors.New("no warm runner")

// fastRun is an ordinary user's `forge run` before the rootless re-exec:
// when a warm runner answers, the run needs no user namespace of its own
// (the runner has one), so the re-exec and its id mapping are saved. ok is
// false when the normal path must run instead (another command, code on
// stdin, no runner yet: that path starts one). Output is held until the
// run is known to have been served.
func fastRun(args []string) (code int, ok bool) {
	if os.Geteuid() == 0 || len(args) == 0 || slices.Contains(args, "-") || os.Getenv(warmEnv) == "0" {
		return 0, false
	}
	warmAllowed, warmOnly = true, true
	defer func() { warmOnly = false }()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	if fastFellBack {
		return 0, false
	}
	os.Stdout.Write(out.Bytes())
	os.Stderr.Write(errb.Bytes())
	return code, true
}

// fastFellBack is set when a warmOnly run could not be served.
var fastFellBack bool

// selfEnv carries forge's own path into the rootless namespace, where
// os.Executable does not find it.
const selfEnv = "_FORGE_EXECUTABLE"

// rememberExecutable records forge's path before a rootless re-exec.
func rememberExecutable() {
	if os.Getenv(selfEnv) != "" {
		return
	}
	if p, err := os.Executable(); err == nil && filepath.IsAbs(p) && p != "/" {
		os.Setenv(selfEnv, p)
	}
}

// executable is forge's own binary.
func executable() (string, error) {
	if p := os.Getenv(selfEnv); p != "" {
		return p, nil
	}
	return os.Executable()
}

// warmIdle reads FORGE_RUN_WARM.
func warmIdle() (time.Duration, error) {
	v := os.Getenv(warmEnv)
	if v == "" {
		return defaultWarmIdle, nil
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, usagef("%s=%q: want a duration (30s, 2m) or seconds; 0 turns the warm runner off", warmEnv, v)
	}
	return d, nil
}

// warmDir is the runner's directory under the state dir.
func warmDir(stateDir string) string {
	return filepath.Join(stateDir, "run", "warm-"+strconv.Itoa(rootless.UID()))
}

// warmRequest is one run sent to the runner.
type warmRequest struct {
	Op          string        `json:"op"` // run | stop
	Fingerprint string        `json:"fingerprint,omitempty"`
	Code        string        `json:"code,omitempty"`
	Image       string        `json:"image,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	Memory      int64         `json:"memory,omitempty"`
	CPUs        float64       `json:"cpus,omitempty"`
}

// warmReply is the runner's answer: a result, or an error with the exit
// code the one-shot path would have given it.
type warmReply struct {
	Result *kernel.Result `json:"result,omitempty"`
	Exit   int            `json:"exit,omitempty"`
	Error  string         `json:"error,omitempty"`
	Stale  bool           `json:"stale,omitempty"`
}

// fingerprint names a configuration and the forge binary that reads it.
func fingerprint(cfg *profiles.Config) (string, error) {
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(cfg); err != nil {
		return "", fmt.Errorf("fingerprinting the configuration: %w", err)
	}
	if self, err := executable(); err == nil {
		if fi, err := os.Stat(self); err == nil {
			fmt.Fprintf(h, "%s %d %d %s", self, fi.Size(), fi.ModTime().UnixNano(), version)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// runWarm runs req through the warm runner, starting it when none answers.
// ok is false when the runner could not be used (the caller then runs
// one-shot); the reason is logged.
func runWarm(ctx context.Context, g *globals, cfg *profiles.Config, req engine.Request) (res *kernel.Result, ok bool, err error) {
	fp, err := fingerprint(cfg)
	if err != nil {
		return nil, false, err
	}
	dir := warmDir(cfg.StateDir)
	wr := warmRequest{Op: "run", Fingerprint: fp, Code: req.Code, Image: req.Image, Timeout: req.Timeout, Memory: req.Memory, CPUs: req.CPUs}
	for attempt := 0; attempt < 2; attempt++ {
		conn, err := dialWarm(dir)
		if err != nil && warmOnly {
			return nil, false, errNoRunner
		}
		if err != nil {
			if conn, err = startWarm(ctx, g, dir); err != nil {
				g.log.Warn("forge run: the warm runner is unavailable; running one-shot", "dir", dir, "err", err)
				return nil, false, nil
			}
		}
		rep, err := exchange(ctx, conn, wr)
		conn.Close()
		if ctx.Err() != nil {
			return nil, true, ctx.Err() // interrupted: the runner cancels the run
		}
		if err != nil {
			g.log.Warn("forge run: the warm runner failed; running one-shot", "err", err)
			return nil, false, nil
		}
		if rep.Stale && warmOnly {
			return nil, false, errNoRunner
		}
		if rep.Stale {
			waitGone(dir, 5*time.Second) // it exits; the next attempt starts a new one
			continue
		}
		if rep.Error != "" {
			return nil, true, exitError{code: rep.Exit, err: errors.New(rep.Error)}
		}
		return rep.Result, true, nil
	}
	return nil, false, nil
}

func dialWarm(dir string) (*net.UnixConn, error) {
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(dir, "run.sock"), Net: "unix"})
}

// exchange sends one request and reads the reply; ctx's end (Ctrl-C)
// closes the connection, which cancels the run in the runner.
func exchange(ctx context.Context, conn *net.UnixConn, wr warmRequest) (warmReply, error) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var rep warmReply
	if err := json.NewEncoder(conn).Encode(wr); err != nil {
		return rep, fmt.Errorf("sending to the warm runner: %w", err)
	}
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&rep); err != nil {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		return rep, fmt.Errorf("reading the warm runner's reply: %w", err)
	}
	return rep, nil
}

// startWarm starts a runner in a session of its own and waits until its
// socket answers.
func startWarm(ctx context.Context, g *globals, dir string) (*net.UnixConn, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if err := checkWarmDir(dir); err != nil {
		return nil, err
	}
	self, err := executable()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "runner.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{"--state-dir", filepath.Dir(filepath.Dir(dir))}
	if g.config != "" {
		args = append(args, "--config", g.config)
	}
	if g.logExplicit {
		args = append(args, "--log-level", g.logLevel)
	}
	cmd := exec.Command(self, append(args, warmCommand)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the warm runner: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if conn, err := dialWarm(dir); err == nil {
			return conn, nil
		}
		select {
		case err := <-exited:
			// Another client's runner may have won the lock: use it.
			if conn, derr := dialWarm(dir); derr == nil {
				return conn, nil
			}
			return nil, fmt.Errorf("the warm runner exited (%v); see %s", err, filepath.Join(dir, "runner.log"))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("the warm runner did not answer within 20 s; see %s", filepath.Join(dir, "runner.log"))
}

// checkWarmDir refuses a directory that is not the user's own and private.
func checkWarmDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		return fmt.Errorf("%s must be a directory owned by uid %d with mode 0700 (it has uid %d, mode %o)", dir, os.Geteuid(), st.Uid, st.Mode&0o7777)
	}
	return nil
}

// waitGone polls until no runner answers in dir.
func waitGone(dir string, within time.Duration) {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		conn, err := dialWarm(dir)
		if err != nil {
			return
		}
		conn.Close()
	}
}

// stopWarm asks the runner in dir to exit and waits until it has.
func stopWarm(dir string) {
	conn, err := dialWarm(dir)
	if err != nil {
		return
	}
	json.NewEncoder(conn).Encode(warmRequest{Op: "stop"})
	io.Copy(io.Discard, conn) // the runner closes it when it goes
	conn.Close()
	waitGone(dir, 10*time.Second)
}

// cmdWarmRunner is the runner itself (started by runWarm, not by people).
func cmdWarmRunner(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet(warmCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return usagef("%s takes no arguments", warmCommand)
	}
	idle, err := warmIdle()
	if err != nil {
		return err
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	fp, err := fingerprint(cfg)
	if err != nil {
		return err
	}
	dir := warmDir(cfg.StateDir)
	if err := checkWarmDir(dir); err != nil {
		return err
	}
	// One runner per directory: the lock is held for the runner's life; a
	// second one (two first calls at once) waits for it or leaves.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if conn, derr := dialWarm(dir); derr == nil {
			conn.Close()
			return nil // another runner serves
		}
		// A stale runner is going: wait for its lock.
		if err := flockWithin(lock, 10*time.Second); err != nil {
			return fmt.Errorf("locking %s: %w", dir, err)
		}
	}
	// The lock file names the runner (forge gc, people, tests).
	if err := lock.Truncate(0); err == nil {
		lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	cfg.Pool.Enabled = false
	eng, err := engine.New(ctx, engine.Options{Config: cfg, Logger: g.log})
	if err != nil {
		return err
	}
	sock := filepath.Join(dir, "run.sock")
	ln, err := ownedsock.Listen(dir, sock, os.Geteuid(), os.Getegid())
	if err != nil {
		eng.Close(0)
		return fmt.Errorf("listening at %s: %w", sock, err)
	}
	w := &warmRunner{eng: eng, fp: fp, uid: os.Geteuid(), log: g.log, idle: idle, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.serve(ln)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	timer := time.NewTimer(idle)
loop:
	for {
		select {
		case <-w.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(idle)
		case <-timer.C:
			if w.busy() {
				timer.Reset(idle)
				continue
			}
			break loop
		case <-w.done:
			break loop
		case <-sig:
			break loop
		}
	}
	// The socket goes first, under the lock, so a new runner never finds
	// this one's name.
	ownedsock.Remove(sock)
	ln.Close()
	w.wg.Wait()
	return eng.Close(5 * time.Second)
}

func flockWithin(f *os.File, within time.Duration) error {
	var err error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return nil
		}
	}
	return err
}

// warmRunner serves runs on its socket.
type warmRunner struct {
	eng  *engine.Engine
	fp   string
	uid  int
	log  interface{ Warn(string, ...any) }
	idle time.Duration
	wake chan struct{}
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	mu     sync.Mutex
	active int
}

func (w *warmRunner) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active > 0
}

func (w *warmRunner) stop() { w.once.Do(func() { close(w.done) }) }

func (w *warmRunner) serve(ln *net.UnixListener) {
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			w.stop()
			return
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
		w.mu.Lock()
		w.active++
		w.mu.Unlock()
		w.wg.Add(1)
		go func() {
			defer func() {
				conn.Close()
				w.mu.Lock()
				w.active--
				w.mu.Unlock()
				w.wg.Done()
			}()
			w.handle(conn)
		}()
	}
}

// handle serves one connection: the peer's uid first, then one request.
func (w *warmRunner) handle(conn *net.UnixConn) {
	enc := json.NewEncoder(conn)
	peer, err := peercred.Of(conn)
	if err != nil {
		return
	}
	peer.Close()
	if peer.UID != w.uid {
		w.log.Warn("warm runner: refused a connection of another user", "peer_uid", peer.UID, "peer_pid", peer.PID, "owner_uid", w.uid)
		enc.Encode(warmReply{Exit: exitInfra, Error: fmt.Sprintf("the warm runner serves uid %d only, not uid %d", w.uid, peer.UID)})
		// Unread bytes at close would reset the connection before the
		// refusal is read: end the reply, then drain a little, briefly.
		conn.CloseWrite()
		conn.SetReadDeadline(time.Now().Add(time.Second))
		io.Copy(io.Discard, io.LimitReader(conn, 1<<20))
		return
	}
	limit := int64(w.eng.Config().Execution.MaxCodeSize) + 64<<10
	var wr warmRequest
	if err := json.NewDecoder(io.LimitReader(conn, limit)).Decode(&wr); err != nil {
		enc.Encode(warmReply{Exit: exitUsage, Error: fmt.Sprintf("reading the request: %v", err)})
		return
	}
	switch {
	case wr.Op == "stop":
		w.stop()
		return
	case wr.Op != "run":
		enc.Encode(warmReply{Exit: exitUsage, Error: fmt.Sprintf("unknown operation %q", wr.Op)})
		return
	case wr.Fingerprint != w.fp:
		enc.Encode(warmReply{Stale: true})
		w.stop()
		return
	}
	// The client's end (Ctrl-C) cancels the run.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		var b [1]byte
		conn.Read(b[:])
		cancel()
	}()
	req := engine.Request{Principal: engine.LocalPrincipal, Client: "cli", Code: wr.Code, Image: wr.Image, Timeout: wr.Timeout, Memory: wr.Memory, CPUs: wr.CPUs}
	if _, err := w.eng.Validate(req); err != nil {
		enc.Encode(warmReply{Exit: exitUsage, Error: err.Error()})
		return
	}
	res, err := w.eng.Execute(ctx, req)
	if err != nil {
		code := exitInfra
		if isUsage(err) {
			code = exitUsage
		}
		enc.Encode(warmReply{Exit: code, Error: err.Error()})
		return
	}
	enc.Encode(warmReply{Result: res})
}
