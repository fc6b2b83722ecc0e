package audit

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

const (
	// MaxStringLen is the longest string written. Longer strings in Fields
	// are omitted (they are likely code or output); longer top-level
	// strings are cut.
	MaxStringLen = 256
	maxDepth     = 4  // nesting kept inside Fields
	maxItems     = 64 // elements kept per list or map inside Fields
)

// deniedKeys are Fields keys dropped outright (compared case-insensitively).
var deniedKeys = map[string]bool{
	"code": true, "env": true, "environ": true, "arguments": true, "args": true,
	"content": true, "contents": true, "source": true, "stdin": true, "stdout": true, "stderr": true,
	"password": true, "token": true, "secret": true, "key": true,
}

// secretWords drop a key when they appear as any word of it, so that
// "api_key", "GITHUB_TOKEN" and "clientSecret" go too.
var secretWords = map[string]bool{
	"password": true, "passwd": true, "token": true, "secret": true, "key": true,
	"apikey": true, "credential": true, "credentials": true, "authorization": true, "cookie": true,
}

func deniedKey(k string) bool {
	if deniedKeys[strings.ToLower(k)] {
		return true
	}
	for _, w := range words(k) {
		if secretWords[w] {
			return true
		}
	}
	return false
}

// words splits a key on punctuation and camelCase humps, lower-cased.
func words(k string) []string {
	var out []string
	var cur strings.Builder
	prevLower := false
	for _, r := range k {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			prevLower = false
			if cur.Len() > 0 {
				out, cur = append(out, cur.String()), strings.Builder{}
			}
			continue
		case unicode.IsUpper(r) && prevLower:
			out, cur = append(out, cur.String()), strings.Builder{}
		}
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
		cur.WriteRune(unicode.ToLower(r))
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// truncate cuts s to MaxStringLen bytes on a rune boundary.
func truncate(s string) string {
	if len(s) <= MaxStringLen {
		return s
	}
	cut := MaxStringLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func scrubFields(m map[string]any, depth int) map[string]any {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if deniedKey(k) {
			continue
		}
		out[truncate(k)] = scrub(reflect.ValueOf(v), depth)
		if len(out) == maxItems {
			break
		}
	}
	return out
}

// scrub turns v into a JSON-safe value: scalars as they are, long strings
// omitted, lists and string-keyed maps recursively, anything else replaced
// by its type name, so an unexpected struct cannot smuggle code out.
func scrub(v reflect.Value, depth int) any {
	if !v.IsValid() {
		return nil
	}
	switch x := v.Interface().(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case time.Duration:
		return x.String()
	case error:
		return scrubString(x.Error())
	}
	switch v.Kind() {
	case reflect.String:
		return scrubString(v.String())
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint()
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f
		}
		return fmt.Sprint(v.Float())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return scrub(v.Elem(), depth)
	case reflect.Slice, reflect.Array:
		if depth >= maxDepth {
			return omitted(v)
		}
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return omitted(v) // raw bytes: likely content
		}
		n := min(v.Len(), maxItems)
		list := make([]any, n)
		for i := range n {
			list[i] = scrub(v.Index(i), depth+1)
		}
		return list
	case reflect.Map:
		if depth >= maxDepth || v.Type().Key().Kind() != reflect.String {
			return omitted(v)
		}
		m := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			m[it.Key().String()] = it.Value().Interface()
		}
		return scrubFields(m, depth+1)
	}
	return omitted(v)
}

func scrubString(s string) any {
	if len(s) > MaxStringLen {
		return fmt.Sprintf("[omitted: %d-byte string]", len(s))
	}
	return s
}

func omitted(v reflect.Value) string { return fmt.Sprintf("[omitted: %s]", v.Type()) }
