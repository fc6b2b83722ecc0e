// Package early answers a stdio client's initialize request while forge is
// still starting.
//
// Go runs every package's initializers before main, and forge's take about
// 9 ms on a small machine (mcp-go's JSON Schema meta-schemas alone 4 ms,
// image reference regexps, Prometheus, protobuf descriptors). What an
// initialize result says depends only on the configuration. Go initializes
// packages in import-path order as their dependencies allow, so a package
// that depends on little runs among the first: this one imports only the
// standard library's basics and server/hello/wire. When the process is
// `forge serve` on stdio, its init starts a goroutine that reads the first
// line of stdin and, when it is a plain initialize request, writes the reply
// while the other initializers run on the other core:
//   - with the built-in configuration (no config file, no FORGE_* setting),
//     at once, with the instructions generated from it (default_gen.go);
//   - otherwise once package configured has initialized (it loads the
//     configuration as cmd/forge does, and needs the config parser).
//
// The server then takes over stdin through Stdin (a server.Prelude): it
// handles that request as any other, so that its session knows the client,
// does not write the reply again, and logs an error if its own would have
// differed. Anything else (another first request, a configuration that does
// not load, HTTP, a forge that re-executes itself rootless) is left to the
// server untouched.
package early

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"strings"

	"github.com/mcp-forge/forge/server/hello/wire"
)

// maxFirstLine bounds what is read looking for the first line; an
// initialize request is a few hundred bytes.
const maxFirstLine = 64 << 10

// Globals are the flags before the command, which every command shares.
type Globals struct {
	StateDir, Config, LogLevel string
}

// GlobalFlags defines the global flags on fs, with their environment
// defaults.
func GlobalFlags(fs *flag.FlagSet, getenv func(string) string) *Globals {
	g := &Globals{}
	fs.StringVar(&g.StateDir, "state-dir", getenv("FORGE_STATE_DIR"), "")
	fs.StringVar(&g.Config, "config", getenv("FORGE_CONFIG"), "")
	fs.StringVar(&g.LogLevel, "log-level", getenv("FORGE_LOG_LEVEL"), "")
	return g
}

// Serve are the flags of `forge serve`.
type Serve struct {
	Config, HTTP, Tools         string
	AllowRemote, InsecureNoAuth bool
}

// ServeFlags defines serve's flags on fs.
func ServeFlags(fs *flag.FlagSet) *Serve {
	s := &Serve{}
	fs.StringVar(&s.Config, "config", "", "")
	fs.StringVar(&s.HTTP, "http", "", "")
	fs.BoolVar(&s.AllowRemote, "allow-remote", false, "")
	fs.BoolVar(&s.InsecureNoAuth, "insecure-no-auth", false, "")
	fs.StringVar(&s.Tools, "tools", "", "")
	return s
}

// Version is forge's version (serverInfo.version), set at build time with
// -ldflags "-X github.com/mcp-forge/forge/cmd/forge/internal/early.Version=...".
var Version = "0.1.0-dev"

// usernsEnv marks a forge that rootless.Enter re-executed
// (unshare.UsernsEnvName, which early does not import; a test holds them
// equal), as rootless.Enter checks it.
const usernsEnv = "_CONTAINERS_USERNS_CONFIGURED"

// Serving is a command line that is `forge serve` on stdio as far as its
// flags say; the configuration may still say otherwise.
type Serving struct {
	Config   string // the configuration file, "" for none
	LogLevel string // --log-level or FORGE_LOG_LEVEL, "" for none
}

// StdioServe reads a command line (without the program name) as cmd/forge
// does: true when it is `forge serve` without --http and without a flag or
// argument that would stop it.
func StdioServe(args []string, getenv func(string) string) (Serving, bool) {
	fs := flag.NewFlagSet("forge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g := GlobalFlags(fs, getenv)
	if fs.Parse(args) != nil || fs.NArg() == 0 || fs.Arg(0) != "serve" {
		return Serving{}, false
	}
	sfs := flag.NewFlagSet("serve", flag.ContinueOnError)
	sfs.SetOutput(io.Discard)
	s := ServeFlags(sfs)
	if sfs.Parse(fs.Args()[1:]) != nil || sfs.NArg() > 0 || s.HTTP != "" {
		return Serving{}, false
	}
	if s.Config != "" {
		g.Config = s.Config
	}
	return Serving{Config: g.Config, LogLevel: g.LogLevel}, true
}

// builtIn reports whether a serving forge runs on the built-in
// configuration, loaded without error: no file, no FORGE_* variable that
// is a setting other than an absolute FORGE_STATE_DIR (which the initialize
// result does not show), a plain log level, and a state directory that is
// given or can be derived (see profiles.LoadFor).
func builtIn(s Serving, environ []string, euid int) bool {
	if s.Config != "" {
		return false
	}
	switch strings.ToLower(s.LogLevel) {
	case "", "debug", "info", "warn", "error":
	default:
		return false // slog takes more (info+2); configured checks
	}
	rooted, home, stateDir := euid == 0, false, false
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		switch {
		case name == usernsEnv:
			rooted = false // root of a user namespace: the state directory is the user's
		case name == "HOME" || name == "XDG_STATE_HOME":
			home = home || val != ""
		case name == "FORGE_STATE_DIR" && val != "":
			if !strings.HasPrefix(val, "/") {
				return false // not absolute: LoadFor refuses it
			}
			stateDir = true
		case name == "FORGE_LOG_LEVEL" || name == "FORGE_STATE_DIR" || name == "FORGE_CONFIG" && val == "":
		case strings.HasPrefix(name, "FORGE_") && isSetting(name):
			return false
		}
	}
	return stateDir || rooted || home
}

// isSetting reports whether ApplyEnv takes a FORGE_* variable as a setting
// (or refuses it as an unknown one of a section); every other FORGE_*
// variable (FORGE_BIN, FORGE_TEST_*) it ignores.
func isSetting(name string) bool {
	for _, p := range sectionPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	for _, n := range settingNames {
		if name == n {
			return true
		}
	}
	return false
}

// Configure is how package configured, once initialized, gives this one
// the configuration's reply: load returns the server's name and
// instructions for a serving forge, or false when its configuration does
// not load or is not stdio (cmd/forge then says why, and answers nothing
// early). Called once, from configured's init.
func Configure(load func(Serving) (name, instructions string, ok bool)) {
	configLoad = load
	close(configured)
}

var (
	configured = make(chan struct{})
	configLoad func(Serving) (string, string, bool)
)

// current is the responder of this process, nil when none runs.
var current *responder

func init() {
	if os.Geteuid() != 0 && os.Getenv(usernsEnv) == "" {
		return // rootless.Enter re-executes this forge: the new one answers
	}
	s, ok := StdioServe(os.Args[1:], os.Getenv)
	if !ok {
		return
	}
	reply := func(req wire.Request) ([]byte, error) {
		if builtIn(s, os.Environ(), os.Geteuid()) {
			return wire.Reply(req, "forge", Version, defaultInstructions)
		}
		<-configured
		name, instructions, ok := configLoad(s)
		if !ok {
			return nil, errNoConfig
		}
		return wire.Reply(req, name, Version, instructions)
	}
	current = start(os.Stdin, os.Stdout, reply)
}

var errNoConfig = errors.New("the configuration does not load")

// Stdin is stdin for the server, and true, when a responder ran: a
// server.Prelude that yields what the responder read past the request it
// answered, then the rest of stdin; nil, false when none ran.
func Stdin() (io.Reader, bool) {
	if current == nil {
		return nil, false
	}
	return current, true
}

// responder reads the first line of in and answers it when it is a plain
// initialize request. Its fields are final once done is closed.
type responder struct {
	in      io.Reader
	done    chan struct{}
	request []byte // the line answered, nil if none
	reply   []byte
	rest    []byte // read past that line (all that was read if none was answered)
	err     error  // what ended in while looking for the first line
}

func start(in io.Reader, out io.Writer, reply func(wire.Request) ([]byte, error)) *responder {
	r := &responder{in: in, done: make(chan struct{})}
	go r.respond(out, reply)
	return r
}

func (r *responder) respond(out io.Writer, reply func(wire.Request) ([]byte, error)) {
	defer close(r.done)
	buf := make([]byte, 0, 4096)
	for {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			r.rest = buf
			line := bytes.TrimRight(buf[:i], "\r")
			req, err := wire.Parse(line)
			if err != nil {
				return
			}
			b, err := reply(req)
			if err != nil {
				return
			}
			r.request, r.reply, r.rest = line, b, buf[i+1:]
			_, _ = out.Write(b) // an error is the client gone, as the server's own writes would find
			return
		}
		if r.err != nil || len(buf) >= maxFirstLine {
			r.rest = buf
			return
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var n int
		n, r.err = r.in.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
	}
}

// Answered implements server.Prelude.
func (r *responder) Answered() (request, reply []byte) {
	<-r.done
	return r.request, r.reply
}

// Read yields what the responder read past the request it answered, then
// the rest of its input.
func (r *responder) Read(b []byte) (int, error) {
	<-r.done
	if len(r.rest) > 0 {
		n := copy(b, r.rest)
		r.rest = r.rest[n:]
		return n, nil
	}
	if r.err != nil {
		return 0, r.err
	}
	return r.in.Read(b)
}
