package profiles

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxErrors bounds the errors reported for one document.
const maxErrors = 50

// maxNodes bounds the work one document may cause; aliases can otherwise
// make a small file expand into a huge walk ("billion laughs").
const maxNodes = 100_000

// Load returns the configuration in effect: the embedded defaults, overlaid by
// the file at path (none when path is ""), overlaid by FORGE_* environment
// variables, with state_dir derived when unset, and validated. ${VAR}
// references in the file are resolved from the process environment. A key
// forge renamed still applies, without a warning (see LoadFor).
func Load(path string) (*Config, error) { return LoadFor(path, os.Geteuid(), nil) }

// LoadFor is Load for the user uid: its state_dir default is root's or that
// user's. Rootless forge passes the real user's uid (it runs as root of its
// own user namespace), which profiles, pure data, does not look up itself.
// warn, when not nil, gets one message for each key of the file that forge
// renamed (still honoured under its old name for now), naming the new key.
func LoadFor(path string, uid int, warn func(msg string)) (*Config, error) {
	c := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading config: %w", err)
		}
		var warnings []string
		if c, warnings, err = parse(data, os.LookupEnv); err != nil {
			return nil, fmt.Errorf("config %s:\n%w", path, err)
		}
		if warn != nil {
			for _, w := range warnings {
				warn(fmt.Sprintf("config %s: %s", path, w))
			}
		}
	}
	if err := ApplyEnv(c, os.Environ()); err != nil {
		return nil, fmt.Errorf("config from environment:\n%w", err)
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir(uid, os.Getenv)
		if c.StateDir == "" {
			return nil, &FieldError{Path: "state_dir", Err: errors.New("cannot be derived: neither XDG_STATE_HOME nor HOME is set; set state_dir or FORGE_STATE_DIR")}
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config:\n%w", err)
	}
	return c, nil
}

// DefaultStateDir is the state directory used when none is configured:
// /var/lib/forge for root, else $XDG_STATE_HOME/forge, else
// $HOME/.local/state/forge; "" when none of these can be determined.
func DefaultStateDir(euid int, getenv func(string) string) string {
	if euid == 0 {
		return "/var/lib/forge"
	}
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "forge")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "forge")
	}
	return ""
}

// Parse decodes a configuration file over the defaults. It does not apply
// FORGE_* variables and does not validate (see Load).
//
// Scalar values may reference variables as ${VAR} or ${VAR:-default} (the
// default applies when VAR is unset or empty); "$$" is a literal "$". A
// missing variable without a default is an error naming the variable, the
// field and the line. Substitution happens after YAML parsing, so a variable
// can only supply a value, never change the document's structure. env looks
// variables up; nil means no variables are set.
//
// Unknown keys and values of the wrong type are errors naming the field path.
// A null value (an empty "key:") leaves the default in place. All problems are
// reported at once, joined. A key forge renamed (see renamed) still applies
// under its old name; setting both names is an error.
func Parse(data []byte, env func(string) (string, bool)) (*Config, error) {
	c, _, err := parse(data, env)
	return c, err
}

// parse is Parse that also returns a warning for each renamed key it honoured.
func parse(data []byte, env func(string) (string, bool)) (*Config, []string, error) {
	c := Default()
	warnings, err := decodeYAML(c, data, env)
	if err != nil {
		return nil, nil, err
	}
	return c, warnings, nil
}

// decodeYAML decodes data over c and returns the warnings of renamed keys.
func decodeYAML(c *Config, data []byte, env func(string) (string, bool)) ([]string, error) {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: a config file holds exactly one YAML document", ErrInvalidValue)
	}
	w := walker{env: env, budget: maxNodes}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	w.decode(root, reflect.ValueOf(c).Elem(), "")
	if w.dropped > 0 {
		w.errs = append(w.errs, fmt.Errorf("%w: and %d more errors", ErrInvalidValue, w.dropped))
	}
	if len(w.errs) > 0 {
		return nil, errors.Join(w.errs...)
	}
	return w.warnings, nil
}

// walker decodes a yaml.Node tree into a value, following the Go type so
// that every error can name its field path.
type walker struct {
	env    func(string) (string, bool)
	errs   []error
	budget int
	// dropped counts errors beyond maxErrors.
	dropped int
	// warnings name the renamed keys the document still uses.
	warnings []string
}

func (w *walker) fail(path string, n *yaml.Node, err error) {
	if path == "" {
		path = "(top level)"
	}
	if len(w.errs) >= maxErrors {
		w.dropped++
		return
	}
	w.errs = append(w.errs, &FieldError{Path: path, Line: n.Line, Err: err})
}

func (w *walker) decode(n *yaml.Node, v reflect.Value, path string) {
	if w.budget--; w.budget < 0 {
		if w.budget == -1 {
			w.fail(path, n, fmt.Errorf("%w: document too large (more than %d values, counting aliases)", ErrInvalidValue, maxNodes))
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n = n.Alias; n == nil {
			return
		}
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // null keeps the default
	}
	if tu, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		w.scalar(n, path, func(s string) error { return tu.UnmarshalText([]byte(s)) })
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		w.object(n, v, path)
	case reflect.Map:
		w.mapping(n, v, path)
	case reflect.Slice:
		w.sequence(n, v, path)
	default:
		w.scalar(n, path, func(s string) error { return setPrimitive(v, s) })
	}
}

func (w *walker) scalar(n *yaml.Node, path string, set func(string) error) {
	if n.Kind != yaml.ScalarNode {
		w.fail(path, n, fmt.Errorf("%w: want a single value, got a %s", ErrInvalidValue, kindName(n.Kind)))
		return
	}
	s, err := substitute(n.Value, w.env)
	if err == nil {
		err = set(s)
	}
	if err != nil {
		w.fail(path, n, err)
	}
}

// pairs calls f for each key/value of a mapping node, reporting non-scalar and
// duplicate keys.
func (w *walker) pairs(n *yaml.Node, path string, f func(key string, k, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		w.fail(path, n, fmt.Errorf("%w: want a mapping, got a %s", ErrInvalidValue, kindName(n.Kind)))
		return
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			w.fail(path, k, fmt.Errorf("%w: keys must be plain strings", ErrInvalidValue))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			w.fail(joinPath(path, k.Value), k, fmt.Errorf("%w: set twice (first on line %d)", ErrInvalidValue, first))
			continue
		}
		seen[k.Value] = k.Line
		f(k.Value, k, v)
	}
}

// retired are fields older versions had, with what replaced them: a config
// that still sets one is refused with the way out, not only "unknown".
var retired = map[string]string{
	"security.uid_map_base": "every sandbox now maps onto its own block of host ids, drawn from security.uid_range_start/uid_range_size (see forge doctor); remove the field",
}

// renamed are fields older versions had under another name, with their new
// name in the same section: a config that still uses the old one keeps
// working, with a warning at load naming the new one; setting both is an
// error naming both.
var renamed = map[string]string{
	// "template" means a zygote template only (docs/zygote.md).
	"environment_builder.templates": "presets",
}

func (w *walker) object(n *yaml.Node, v reflect.Value, path string) {
	w.pairs(n, path, func(key string, k, val *yaml.Node) {
		p := joinPath(path, key)
		i := fieldIndex(v.Type(), key)
		if i < 0 {
			if hint, ok := retired[p]; ok {
				w.fail(p, k, fmt.Errorf("%w: %s", ErrUnknownField, hint))
				return
			}
			if to, ok := renamed[p]; ok {
				w.renamedField(n, v, path, key, to, k, val)
				return
			}
			w.fail(p, k, ErrUnknownField)
			return
		}
		w.decode(val, v.Field(i), p)
	})
}

// renamedField decodes the value of the old key from, of the mapping n at
// path, into the field now named to.
func (w *walker) renamedField(n *yaml.Node, v reflect.Value, path, from, to string, k, val *yaml.Node) {
	old, now := joinPath(path, from), joinPath(path, to)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Kind == yaml.ScalarNode && n.Content[i].Value == to {
			w.fail(old, k, fmt.Errorf("%w: set together with %s (line %d), its new name: keep only %s",
				ErrInvalidValue, now, n.Content[i].Line, now))
			return
		}
	}
	w.warnings = append(w.warnings, fmt.Sprintf("line %d: %s was renamed %s; the old name still works for now: rename the key", k.Line, old, now))
	w.decode(val, v.Field(fieldIndex(v.Type(), to)), old)
}

func (w *walker) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.MappingNode && v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	w.pairs(n, path, func(key string, _, val *yaml.Node) {
		elem := reflect.New(v.Type().Elem()).Elem()
		if d, ok := elem.Addr().Interface().(interface{ setDefaults() }); ok {
			d.setDefaults()
		}
		w.decode(val, elem, joinPath(path, key))
		v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
	})
}

func (w *walker) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		w.fail(path, n, fmt.Errorf("%w: want a list, got a %s", ErrInvalidValue, kindName(n.Kind)))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		w.decode(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(s)
}

// fieldIndex returns the index of the field of struct type t whose yaml name
// is key, or -1.
func fieldIndex(t reflect.Type, key string) int {
	for i := range t.NumField() {
		if yamlName(t.Field(i)) == key {
			return i
		}
	}
	return -1
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "single value"
	case yaml.AliasNode:
		return "alias"
	default:
		return "document"
	}
}

// setPrimitive parses s into a bool, integer, float or string. Quoted and
// unquoted values are treated alike, so `"${PIDS}"` works for an integer.
func setPrimitive(v reflect.Value, s string) error {
	t := strings.TrimSpace(s)
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, ok := parseBool(t)
		if !ok {
			return fmt.Errorf("%w: %q is not true or false", ErrInvalidValue, s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(t, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%w: %q is not an integer", ErrInvalidValue, s)
		}
		v.SetInt(n)
	case reflect.Uint32, reflect.Uint64, reflect.Uint:
		n, err := strconv.ParseUint(t, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%w: %q is not an integer in [0, %d]", ErrInvalidValue, s, uint64(math.MaxUint64)>>(64-v.Type().Bits()))
		}
		v.SetUint(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%w: %q is not a number", ErrInvalidValue, s)
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("%w: unsupported field type %s", ErrInvalidValue, v.Type())
	}
	return nil
}

func parseBool(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "true", "yes", "on", "1":
		return true, true
	case "false", "no", "off", "0":
		return false, true
	}
	return false, false
}

// substitute expands ${VAR} and ${VAR:-default} in s; "$$" is a literal "$".
func substitute(s string, env func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' || i+1 == len(s) || (s[i+1] != '$' && s[i+1] != '{') {
			b.WriteByte(s[i])
			i++
			continue
		}
		if s[i+1] == '$' {
			b.WriteByte('$')
			i += 2
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return "", fmt.Errorf("%w: unterminated \"${\" in %q", ErrInvalidValue, s)
		}
		expr := s[i+2 : i+2+end]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !isVarName(name) {
			return "", fmt.Errorf("%w: \"${%s}\" is not a variable reference (want ${NAME} or ${NAME:-default})", ErrInvalidValue, expr)
		}
		val, ok := env(name)
		if !ok || (hasDef && val == "") {
			if !hasDef {
				return "", fmt.Errorf("%w: %s (write ${%s:-default} to give a default)", ErrMissingVariable, name, name)
			}
			val = def
		}
		b.WriteString(val)
		i += 2 + end + 1
	}
	return b.String(), nil
}

func isVarName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}
