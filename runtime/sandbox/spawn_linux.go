package sandbox

import (
	"fmt"
	"io"
	"os"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
)

// Proc is a process started in a running sandbox beside its agent (a
// downstream MCP server run sandboxed, for instance): the same user, no
// capabilities, no new privileges, the sandbox's seccomp filter, cgroup
// and namespaces. Its stdio are pipes to the caller.
type Proc struct {
	p      *libcontainer.Process
	Stdin  io.WriteCloser
	Stdout io.ReadCloser
	Stderr io.ReadCloser
	done   chan struct{}
	err    error
}

// Spawn starts args in s with env (the sandbox's Env plus these). The
// process ends with the sandbox at the latest.
func (s *Sandbox) Spawn(args []string, env []string) (*Proc, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("spawn: no command: %w", ErrInvalidConfig)
	}
	if s.child != nil {
		// A zygote child has no libcontainer container to run a process in;
		// sandboxes that spawn (sandboxed mcp_tools servers) have a bridge
		// directory, which keeps them containers.
		return nil, fmt.Errorf("spawn: sandbox %s is a zygote child, which runs only its agent: %w", s.id, ErrInvalidConfig)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	nnp := true
	p := &libcontainer.Process{
		Args:            args,
		Env:             append(append([]string(nil), Env...), env...),
		UID:             int(s.uid),
		GID:             int(s.uid),
		Cwd:             WorkspacePath,
		Stdin:           inR,
		Stdout:          outW,
		Stderr:          errW,
		NoNewPrivileges: &nnp,
		Capabilities:    &configs.Capabilities{},
		Init:            false,
	}
	err = s.c.Run(p)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("spawning %q in sandbox %s: %w", args[0], s.id, err)
	}
	pr := &Proc{p: p, Stdin: inW, Stdout: outR, Stderr: errR, done: make(chan struct{})}
	go func() {
		_, pr.err = p.Wait()
		close(pr.done)
	}()
	return pr, nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill ends the process.
func (p *Proc) Kill() { _ = p.p.Signal(os.Kill) }
