package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/runtime/egress"
)

// Backends of execute_python.
const (
	BackendSimple  = "simple"
	BackendJupyter = "jupyter"
)

// ExecuteArgs are the decoded arguments of execute_python. Decoding checks
// form only (types, required fields, enums, parseable sizes); whether a value
// is within the configured limits is the engine's call and a tool error.
type ExecuteArgs struct {
	Code        string
	SessionID   string
	Backend     string        // "" or one of the Backend constants
	Timeout     time.Duration // 0 = the configured default
	Memory      int64         // bytes; 0 = the configured default
	CustomImage string        // an image or an environment name
	Environment string        // a preset name (environment_builder.presets)
	Env         map[string]string
	MCPTools    []string
	// Egress narrows the profile's egress allowlist; nil when absent
	// ([] asks for none).
	Egress *egress.Policy
}

// wireExecuteArgs is the JSON form; pointers tell "absent or null" apart.
type wireExecuteArgs struct {
	Code        *string           `json:"code"`
	SessionID   *string           `json:"session_id"`
	Backend     *string           `json:"backend"`
	Timeout     *float64          `json:"timeout"`
	Memory      *string           `json:"memory"`
	CustomImage *string           `json:"custom_image"`
	Environment json.RawMessage   `json:"environment"`
	Env         map[string]string `json:"env"`
	MCPTools    []string          `json:"mcp_tools"`
	Egress      []string          `json:"egress"`
}

// maxTimeoutSeconds caps what a float of seconds may turn into before the
// conversion to time.Duration would overflow; anything above is clamped so
// the engine reports it as over the maximum.
const maxTimeoutSeconds = float64(math.MaxInt64 / int64(time.Second))

// DecodeExecuteArgs decodes and checks the arguments of execute_python.
// raw is the JSON of the tool call's "arguments" (null or absent means {}).
// Every error wraps ErrInvalidArguments and names the field.
func DecodeExecuteArgs(raw []byte) (ExecuteArgs, error) {
	var w wireExecuteArgs
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return ExecuteArgs{}, argError("", describeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return ExecuteArgs{}, argError("", "trailing data after the arguments object")
	}
	return w.check()
}

func (w *wireExecuteArgs) check() (ExecuteArgs, error) {
	var a ExecuteArgs
	if w.Code == nil {
		return a, argError("code", "is required (the Python source to run)")
	}
	if strings.TrimSpace(*w.Code) == "" {
		return a, argError("code", "must not be empty")
	}
	a.Code = *w.Code
	a.SessionID = deref(w.SessionID)
	a.CustomImage = strings.TrimSpace(deref(w.CustomImage))
	a.Backend = deref(w.Backend)
	if a.Backend != "" && a.Backend != BackendSimple && a.Backend != BackendJupyter {
		return a, argError("backend", fmt.Sprintf("is %q; want %q or %q", a.Backend, BackendSimple, BackendJupyter))
	}
	if w.Timeout != nil {
		t := *w.Timeout
		if !(t > 0) || math.IsInf(t, 0) {
			return a, argError("timeout", fmt.Sprintf("is %v; want a positive number of seconds", t))
		}
		a.Timeout = time.Duration(math.Min(t, maxTimeoutSeconds) * float64(time.Second))
		if a.Timeout <= 0 { // below a nanosecond
			a.Timeout = time.Nanosecond
		}
	}
	if w.Memory != nil && strings.TrimSpace(*w.Memory) != "" {
		m, err := cgroups.ParseMemory(strings.TrimSpace(*w.Memory))
		if err != nil {
			return a, argError("memory", err.Error())
		}
		a.Memory = m
	}
	if env := bytes.TrimSpace(w.Environment); len(env) > 0 && string(env) != "null" {
		if err := json.Unmarshal(env, &a.Environment); err != nil {
			return a, argError("environment", "want a string: the name of a preset (see forge://environments/list); environment variables for the code go in env")
		}
		a.Environment = strings.TrimSpace(a.Environment)
	}
	a.Env = w.Env
	a.MCPTools = w.MCPTools
	if w.Egress != nil {
		pol, err := egress.ParsePolicy(w.Egress)
		if err != nil {
			return a, argError("egress", strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		a.Egress = &pol
	}
	return a, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ArgumentError is a malformed tool argument: a protocol error (JSON-RPC
// invalid params), never a tool result.
type ArgumentError struct {
	Field  string // "" when the arguments as a whole are malformed
	Reason string
}

func (e *ArgumentError) Error() string {
	if e.Field == "" {
		return "invalid arguments: " + e.Reason
	}
	return "invalid arguments: " + e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalidArguments) true.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArguments }

func argError(field, reason string) error { return &ArgumentError{Field: field, Reason: reason} }

// describeJSONError turns encoding/json's errors into a sentence that names
// the field and the expected type.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return fmt.Sprintf("want a JSON object, got %s", te.Value)
		}
		return fmt.Sprintf("%s: want %s, got %s", field, jsonTypeName(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return "not valid JSON: " + se.Error()
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "not valid JSON: unexpected end"
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + f + "; known fields: code, session_id, backend, timeout, memory, custom_image, environment, env, mcp_tools, egress"
	}
	return strings.TrimPrefix(msg, "json: ")
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "float64", "int", "int64":
		return "a number"
	case "map":
		return "an object of strings"
	case "slice":
		return "an array of strings"
	}
	return kind
}
