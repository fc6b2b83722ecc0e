package profiles

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Field describes one configuration key, for generated documentation and for
// tools such as `forge config`.
type Field struct {
	// Path is the YAML path, "execution.default_timeout"; entries of a map
	// appear as "mcp_tools.<name>.command".
	Path string
	// Type is "string", "bool", "int", "float", "size", "duration",
	// "list of strings", "map of strings", "section" or "map of sections".
	Type string
	// Default is the default in YAML notation; empty for sections and maps.
	Default string
	// Env is the FORGE_* variable that overrides the field, if any.
	Env string
	// Doc is the field's description (its `doc` tag).
	Doc string
}

// Schema lists every configuration key in file order, sections before their
// fields, with the built-in defaults.
func Schema() []Field {
	var out []Field
	walkSchema(reflect.ValueOf(Default()).Elem(), "", true, &out)
	return out
}

func walkSchema(v reflect.Value, path string, env bool, out *[]Field) {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		fld := Field{Path: joinPath(path, yamlName(f)), Doc: f.Tag.Get("doc")}
		switch {
		case isLeaf(f.Type):
			fld.Type, fld.Default = typeName(f.Type), render(fv, !env)
			if env {
				fld.Env = EnvVar(fld.Path)
			}
			*out = append(*out, fld)
		case f.Type.Kind() == reflect.Struct:
			fld.Type = "section"
			*out = append(*out, fld)
			walkSchema(fv, fld.Path, env, out)
		case f.Type.Elem().Kind() == reflect.Struct:
			fld.Type = "map of sections"
			*out = append(*out, fld)
			elem := reflect.New(f.Type.Elem())
			if d, ok := elem.Interface().(interface{ setDefaults() }); ok {
				d.setDefaults()
			}
			walkSchema(elem.Elem(), fld.Path+".<name>", false, out)
		default:
			fld.Type, fld.Default = "map of "+typeName(f.Type.Elem())+"s", "{}"
			*out = append(*out, fld)
		}
	}
}

func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Size]():
		return "size"
	case reflect.TypeFor[Duration]():
		return "duration"
	case reflect.TypeFor[Network]():
		return "bool"
	}
	switch t.Kind() {
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Float64:
		return "float"
	case reflect.Int, reflect.Int64, reflect.Uint32:
		return "int"
	}
	return t.Kind().String()
}

// render formats a default value; zero values of map entries (which mean
// "inherit" or "none") are left empty.
func render(v reflect.Value, omitZero bool) string {
	if omitZero && v.IsZero() {
		return ""
	}
	if m, ok := v.Interface().(interface{ MarshalYAML() (any, error) }); ok {
		out, _ := m.MarshalYAML()
		return fmt.Sprint(out)
	}
	switch v.Kind() {
	case reflect.String:
		return quote(v.String())
	case reflect.Float64:
		f := strconv.FormatFloat(v.Float(), 'f', -1, 64)
		if !strings.ContainsAny(f, ".e") {
			f += ".0"
		}
		return f
	case reflect.Slice:
		items := make([]string, v.Len())
		for i := range items {
			items[i] = quote(v.Index(i).String())
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"'#,") || strings.ContainsAny(s[:1], ":*&!|>%@{}[]") {
		return strconv.Quote(s)
	}
	return s
}

// Markdown renders docs/configuration.md from Schema.
func Markdown() []byte {
	var b bytes.Buffer
	b.WriteString(`# Configuration reference

<!-- Generated from the doc tags in profiles/config.go by TestConfigurationDocUpToDate.
     Do not edit; regenerate with: FORGE_UPDATE_DOCS=1 go test ./profiles -run TestConfigurationDocUpToDate -->

forge reads one YAML file (` + "`forge serve --config FILE`" + `; see forge.example.yaml).
Values are taken, highest precedence first, from:

1. ` + "`FORGE_*`" + ` environment variables: the key's path in upper case with dots as underscores
   (` + "`FORGE_EXECUTION_DEFAULT_TIMEOUT=60`" + `, ` + "`FORGE_POOL_SIZE=4`" + `); lists are comma-separated.
   The ` + "`mcp_tools`" + ` and ` + "`profiles`" + ` maps can only be set in the file.
2. The configuration file. Any value may reference environment variables as ` + "`${VAR}`" + ` or
   ` + "`${VAR:-default}`" + ` (` + "`$$`" + ` is a literal ` + "`$`" + `); an unset variable without a default is an error.
   Variables are substituted into values after parsing, so they cannot change the file's structure;
   inside a flow mapping (` + "`{...}`" + `) quote the value: ` + "`{name: \"${NAME}\"}`" + `. Unknown keys are errors.
3. The built-in defaults below (profiles/defaults.yaml).

Sizes are bytes, or a number with a binary unit: ` + "`1024k`, `512m`, `2g`" + `. Durations are written
` + "`30s`, `10m`, `24h`" + `, or as an integer number of seconds.
`)
	fields := Schema()
	writeTable(&b, "Top level", "", fields, func(f Field) bool {
		return !strings.Contains(f.Path, ".") && !isSection(f)
	})
	for _, sec := range fields {
		if strings.Contains(sec.Path, ".") || !isSection(sec) {
			continue
		}
		writeTable(&b, "`"+sec.Path+"`", sec.Doc, fields, func(f Field) bool {
			return strings.HasPrefix(f.Path, sec.Path+".") && !isSection(f)
		})
	}
	return b.Bytes()
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func isSection(f Field) bool { return f.Type == "section" || f.Type == "map of sections" }

func writeTable(b *bytes.Buffer, title, doc string, fields []Field, include func(Field) bool) {
	fmt.Fprintf(b, "\n## %s\n\n", title)
	if doc != "" {
		fmt.Fprintf(b, "%s\n\n", doc)
	}
	b.WriteString("| Key | Type | Default | Environment | Description |\n|---|---|---|---|---|\n")
	for _, f := range fields {
		if include(f) {
			fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", f.Path, f.Type, code(f.Default), code(f.Env), escape(f.Doc))
		}
	}
}
