package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcp-forge/forge/internal/lazyre"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// Limits of Request.Env: the variables come from a client.
const (
	maxEnvVars       = 64
	maxEnvValueBytes = 4096
)

var envNameRE = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// checkEnv validates the variables a request sets for its code.
func checkEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return fmt.Errorf("%w: env has %d variables, at most %d", ErrInvalidRequest, len(env), maxEnvVars)
	}
	for k, v := range env {
		if !envNameRE.MatchString(k) {
			return fmt.Errorf("%w: env: %.40q is not a variable name (letters, digits and _, not starting with a digit, at most 128)", ErrInvalidRequest, k)
		}
		if len(v) > maxEnvValueBytes || strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: env: %s: the value must be at most %d bytes without NUL", ErrInvalidRequest, k, maxEnvValueBytes)
		}
	}
	return nil
}

// setEnv sets the variables in the sandbox's agent (os.environ: the code
// and its child processes see them) before the code runs; in a session
// they stay set.
func setEnv(ctx context.Context, sb *sandbox.Sandbox, env map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	b, err := json.Marshal(env)
	if err != nil {
		return err
	}
	code := fmt.Sprintf("import os as _forge_os, json as _forge_json\n_forge_os.environ.update(_forge_json.loads(%q))\ndel _forge_os, _forge_json", string(b))
	res, err := sb.Exec(ctx, code, sandbox.ExecOptions{Timeout: preludeTimeout, KeepAlive: true})
	if err == nil && !res.Success {
		err = fmt.Errorf("%s: %s", res.Error.Type, res.Error.Message)
	}
	if err != nil {
		return fmt.Errorf("setting env in the sandbox: %w", err)
	}
	return nil
}
