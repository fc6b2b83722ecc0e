package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mcp-forge/forge/internal/lazyre"
	"github.com/mcp-forge/forge/runtime/kernel"
)

// Compiling agent.py (about 900 lines) costs the image's Python 4–5 ms of CPU
// at every sandbox start, a tenth of a cold start and of the work behind each
// pooled sandbox. So the runtime compiles it once per image, in a sandbox of
// that image (its bytecode format is the image's Python's business), keeps the
// .pyc beside agent.py in the agent directory, and starts later sandboxes of
// the image with `python3 agent-<image>.pyc`.
//
// Trust: the bytecode is produced by the image's own Python in a sandbox that
// runs no user code, is stored by host root in the read-only agent directory,
// and is only ever executed inside sandboxes of the same image, which run
// untrusted code anyway. The host never executes it.

// bytecodeLimit bounds the .pyc read back from the compiling sandbox.
const bytecodeLimit = 1 << 20

var imageIDPattern = lazyre.New(`^[0-9a-f]{12,64}$`)

// compileAgentCode runs in the compiling sandbox; the agent's read_file then
// returns /workspace/agent.pyc. The file name recorded in the code objects is
// the source's, so agent frames in tracebacks keep their lines.
const compileAgentCode = `import py_compile
py_compile.compile(%q, cfile="/workspace/agent.pyc", dfile=%q, doraise=True)
`

func bytecodeName(imageID string) string { return "agent-" + imageID + ".pyc" }

// agentArgv is the agent's command line for a sandbox of cfg: from bytecode
// when the image has it (compiling it first if this is the image's first
// sandbox), else from source. It never fails: without bytecode the agent
// simply compiles itself, as it always could.
func (r *Runtime) agentArgv(ctx context.Context, cfg Config) (argv []string, compiled bool) {
	source := kernel.Argv(kernel.AgentPath)
	if cfg.ImageID == "" || !imageIDPattern.MatchString(cfg.ImageID) {
		return source, false
	}
	name := bytecodeName(cfg.ImageID)
	r.pycMu.Lock()
	defer r.pycMu.Unlock()
	if ok, known := r.pyc[cfg.ImageID]; known {
		if ok {
			return kernel.Argv(AgentMountPoint + "/" + name), true
		}
		return source, false
	}
	path := filepath.Join(r.agentDir, name)
	if _, err := os.Stat(path); err != nil {
		start := time.Now()
		if err := r.compileAgent(ctx, cfg, path); err != nil {
			if ctx.Err() == nil { // a cancelled request says nothing about the image
				r.log.Warn("compiling the agent for the image failed; its sandboxes compile agent.py at start",
					"image", cfg.ImageID, "err", err)
				r.pyc[cfg.ImageID] = false
			}
			return source, false
		}
		r.log.Debug("agent compiled for image", "image", cfg.ImageID, "took", time.Since(start))
	}
	r.pyc[cfg.ImageID] = true
	return kernel.Argv(AgentMountPoint + "/" + name), true
}

// dropBytecode forgets (and removes) an image's agent bytecode that failed to start.
func (r *Runtime) dropBytecode(imageID string) {
	r.pycMu.Lock()
	defer r.pycMu.Unlock()
	r.pyc[imageID] = false
	_ = os.Remove(filepath.Join(r.agentDir, bytecodeName(imageID)))
}

// compileAgent starts a sandbox of the image from the agent's source, has its
// Python compile agent.py, reads the bytecode back and installs it at path.
func (r *Runtime) compileAgent(ctx context.Context, cfg Config, path string) (retErr error) {
	cfg.OnDestroy, cfg.BridgeDir, cfg.ImageID = nil, "", ""
	s, err := r.start(ctx, cfg, kernel.Argv(kernel.AgentPath))
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Destroy(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	code := fmt.Sprintf(compileAgentCode, kernel.AgentPath, kernel.AgentPath)
	res, err := s.Exec(ctx, code, ExecOptions{Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	if res.Error != nil {
		return fmt.Errorf("py_compile: %s: %s", res.Error.Type, res.Error.Message)
	}
	if res.TimedOut || res.OOMKilled {
		return fmt.Errorf("py_compile did not finish (timed out %v, OOM %v)", res.TimedOut, res.OOMKilled)
	}
	data, err := s.Client().ReadFile(ctx, "agent.pyc", bytecodeLimit)
	if err != nil {
		return fmt.Errorf("reading the bytecode back: %w", err)
	}
	// A .pyc starts with a 2-byte version magic, "\r\n", 4 flag bytes and 8
	// bytes of source stamp or hash, then the marshalled code object.
	if len(data) < 17 || !bytes.Equal(data[2:4], []byte("\r\n")) {
		return errors.New("the bytecode read back is not a .pyc file")
	}
	return installFile(path, data, 0o444)
}
