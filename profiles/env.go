package profiles

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// envSetting is one configuration field settable from a FORGE_* variable.
type envSetting struct {
	path  string
	index []int
}

// envSettings maps variable names (FORGE_EXECUTION_DEFAULT_TIMEOUT) to the
// fields they set. Every scalar and list field outside the mcp_tools and
// profiles maps has one. It is built on the first FORGE_* variable, not in
// an initializer that every forge process would pay before main.
var envSettings = sync.OnceValue(func() map[string]envSetting {
	m := map[string]envSetting{}
	var walk func(t reflect.Type, path string, index []int)
	walk = func(t reflect.Type, path string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			p, idx := joinPath(path, yamlName(f)), append(cloneIndex(index), i)
			switch {
			case isLeaf(f.Type):
				m[EnvVar(p)] = envSetting{path: p, index: idx}
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, p, idx)
			}
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return m
})

func cloneIndex(s []int) []int { return append([]int(nil), s...) }

// EnvVar returns the variable that overrides the field at path:
// "execution.default_timeout" → "FORGE_EXECUTION_DEFAULT_TIMEOUT".
func EnvVar(path string) string {
	return "FORGE_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// isLeaf reports whether a field of type t holds a single value or a list of
// strings, rather than a section or a map.
func isLeaf(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return false
	case reflect.Slice:
		return t.Elem().Kind() == reflect.String
	}
	return true
}

// ApplyEnv overrides fields of c from FORGE_* entries of environ ("KEY=value",
// as os.Environ returns). The variable of a field is its YAML path in upper
// case with dots as underscores (see EnvVar); lists are comma-separated. A
// variable that starts like a section (FORGE_EXECUTION_…) but names no field
// is an error, so typos do not pass silently; other FORGE_* variables are
// ignored. Errors name the variable and the field; all are reported, joined.
func ApplyEnv(c *Config, environ []string) error {
	var errs []error
	v := reflect.ValueOf(c).Elem()
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "FORGE_") {
			continue
		}
		s, ok := envSettings()[name]
		if !ok {
			if err := unknownEnv(name); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := setFromString(v.FieldByIndex(s.index), val); err != nil {
			errs = append(errs, &FieldError{Path: s.path, Env: name, Err: err})
		}
	}
	return errors.Join(errs...)
}

// unknownEnv returns an error when name looks like a setting of a section.
func unknownEnv(name string) error {
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		if isLeaf(f.Type) {
			continue
		}
		sec := yamlName(f)
		prefix := EnvVar(sec) + "_"
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		key := strings.ToLower(strings.TrimPrefix(name, prefix))
		path := sec + "." + key
		if f.Type.Kind() == reflect.Map {
			return &FieldError{Path: sec, Env: name, Err: fmt.Errorf("%w: %s cannot be set from the environment; use the config file (with ${VAR} for secrets)", ErrUnknownField, sec)}
		}
		// A renamed field's old variable names the new one, as its old key
		// in the file does.
		to, renamedField := renamed[path]
		if renamedField {
			path, key = sec+"."+to, to
			if _, ok := envSettings()[EnvVar(path)]; ok {
				return &FieldError{Path: path, Env: name, Err: fmt.Errorf("%w: renamed %s: set %s", ErrUnknownField, path, EnvVar(path))}
			}
		}
		if i := fieldIndex(f.Type, key); i >= 0 && f.Type.Field(i).Type.Kind() == reflect.Map {
			msg := path + " cannot be set from the environment"
			if renamedField {
				msg = "renamed " + path + ", which cannot be set from the environment either"
			}
			return &FieldError{Path: path, Env: name, Err: fmt.Errorf("%w: %s; use the config file", ErrUnknownField, msg)}
		}
		return &FieldError{Path: path, Env: name, Err: ErrUnknownField}
	}
	return nil
}

func setFromString(v reflect.Value, s string) error {
	if tu, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return tu.UnmarshalText([]byte(s))
	}
	if v.Kind() == reflect.Slice {
		list := []string{}
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				list = append(list, e)
			}
		}
		v.Set(reflect.ValueOf(list))
		return nil
	}
	return setPrimitive(v, s)
}
