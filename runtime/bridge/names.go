package bridge

import (
	"fmt"
	"strings"
)

// pyKeywords are Python 3 keywords (keyword.kwlist), which cannot be
// identifiers.
var pyKeywords = set("False", "None", "True", "and", "as", "assert", "async", "await", "break",
	"class", "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
	"if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try",
	"while", "with", "yield")

// reservedGlobals are names a tool function must not take in the user's
// namespace: Python's builtins (a tool called "print" or "open" would break
// ordinary code) and the names the prelude itself defines.
var reservedGlobals = set(
	// dir(builtins) of CPython 3.11-3.13, minus dunders and exception classes
	// (those are matched by suffix below).
	"abs", "aiter", "all", "anext", "any", "ascii", "bin", "bool", "breakpoint", "bytearray",
	"bytes", "callable", "chr", "classmethod", "compile", "complex", "copyright", "credits",
	"delattr", "dict", "dir", "divmod", "enumerate", "eval", "exec", "exit", "filter", "float",
	"format", "frozenset", "getattr", "globals", "hasattr", "hash", "help", "hex", "id", "input",
	"int", "isinstance", "issubclass", "iter", "len", "license", "list", "locals", "map", "max",
	"memoryview", "min", "next", "object", "oct", "open", "ord", "pow", "print", "property", "quit",
	"range", "repr", "reversed", "round", "set", "setattr", "slice", "sorted", "staticmethod", "str",
	"sum", "super", "tuple", "type", "vars", "zip", "Ellipsis", "NotImplemented",
	// The prelude's own names (module mcp_tools and its attributes).
	"mcp_tools", "search", "tools", "ToolError", "ToolNotGranted", "ToolLimitError", "ToolTimeout")

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// pyIdent turns an MCP name into a Python identifier: characters outside
// [A-Za-z0-9_] become '_', a leading digit gets a '_' before it, a keyword
// gets one after it. Only ASCII is kept, so the result needs no
// normalization (Python applies NFKC to identifiers).
func pyIdent(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	id := b.String()
	switch {
	case id == "":
		id = "_"
	case id[0] >= '0' && id[0] <= '9':
		id = "_" + id
	}
	if pyKeywords[id] {
		id += "_"
	}
	return id
}

// globalName is pyIdent plus a '_' after a name the user's namespace must
// keep (builtins, exception classes, the prelude's names), or a dunder.
func globalName(s string) string {
	id := pyIdent(s)
	if reservedGlobals[id] || strings.HasSuffix(id, "Error") || strings.HasSuffix(id, "Exception") ||
		strings.HasSuffix(id, "Warning") || (strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__")) {
		id += "_"
	}
	return id
}

// uniqueNames is a name allocator: the first taker of a name keeps it, later
// ones get _2, _3, ….
type uniqueNames map[string]bool

func (u uniqueNames) take(id string) string {
	name := id
	for i := 2; u[name]; i++ {
		name = fmt.Sprintf("%s_%d", id, i)
	}
	u[name] = true
	return name
}

// attrName is the name of a tool inside its server's submodule: pyIdent,
// but never a dunder (which would clobber module machinery).
func attrName(s string) string {
	id := pyIdent(s)
	if strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__") {
		id += "_"
	}
	return id
}
