package policy

import "strings"

// markerVars are PEP 508's environment marker variables.
var markerVars = map[string]bool{
	"python_version": true, "python_full_version": true, "os_name": true, "sys_platform": true,
	"platform_release": true, "platform_system": true, "platform_version": true,
	"platform_machine": true, "platform_python_implementation": true,
	"implementation_name": true, "implementation_version": true, "extra": true,
}

// marker parses the marker after ';' and returns it in canonical spelling:
// single spaces between tokens, strings in double quotes where possible.
func (p *parser) marker() (string, error) {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return "", p.fail(p.pos, "missing marker after ';'")
	}
	out, err := p.markerOr(0)
	if err != nil {
		return "", err
	}
	return out, nil
}

// maxMarkerDepth bounds nesting of parentheses (the parser recurses).
const maxMarkerDepth = 16

func (p *parser) markerOr(depth int) (string, error) {
	left, err := p.markerAnd(depth)
	if err != nil {
		return "", err
	}
	for p.keyword("or") {
		right, err := p.markerAnd(depth)
		if err != nil {
			return "", err
		}
		left += " or " + right
	}
	return left, nil
}

func (p *parser) markerAnd(depth int) (string, error) {
	left, err := p.markerExpr(depth)
	if err != nil {
		return "", err
	}
	for p.keyword("and") {
		right, err := p.markerExpr(depth)
		if err != nil {
			return "", err
		}
		left += " and " + right
	}
	return left, nil
}

// keyword consumes word (followed by a non-identifier byte) after spaces.
func (p *parser) keyword(word string) bool {
	save := p.pos
	p.skipSpace()
	if strings.HasPrefix(p.src[p.pos:], word) {
		end := p.pos + len(word)
		if end == len(p.src) || !(isAlnum(p.src[end]) || p.src[end] == '_') {
			p.pos = end
			return true
		}
	}
	p.pos = save
	return false
}

func (p *parser) markerExpr(depth int) (string, error) {
	p.skipSpace()
	if p.peek() == '(' {
		if depth >= maxMarkerDepth {
			return "", p.fail(p.pos, "marker nested too deeply")
		}
		p.pos++
		inner, err := p.markerOr(depth + 1)
		if err != nil {
			return "", err
		}
		p.skipSpace()
		if p.peek() != ')' {
			return "", p.fail(p.pos, "missing ')' in marker")
		}
		p.pos++
		return "(" + inner + ")", nil
	}
	left, err := p.markerVar()
	if err != nil {
		return "", err
	}
	op, err := p.markerOp()
	if err != nil {
		return "", err
	}
	right, err := p.markerVar()
	if err != nil {
		return "", err
	}
	return left + " " + op + " " + right, nil
}

func (p *parser) markerVar() (string, error) {
	p.skipSpace()
	switch c := p.peek(); c {
	case '"', '\'':
		end := strings.IndexByte(p.src[p.pos+1:], c)
		if end < 0 {
			return "", p.fail(p.pos, "unterminated string in marker")
		}
		s := p.src[p.pos+1 : p.pos+1+end]
		p.pos += end + 2
		if strings.ContainsRune(s, '"') {
			return "'" + s + "'", nil
		}
		return `"` + s + `"`, nil
	}
	start := p.pos
	for p.pos < len(p.src) && (isAlnum(p.src[p.pos]) || p.src[p.pos] == '_' || p.src[p.pos] == '.') {
		p.pos++
	}
	name := p.src[start:p.pos]
	if !markerVars[name] {
		if name == "" {
			return "", p.fail(start, "expected a marker variable (python_version, sys_platform, ...) or a quoted string")
		}
		return "", p.fail(start, `unknown marker variable "`+name+`"; PEP 508 knows python_version, python_full_version, os_name, sys_platform, platform_release, platform_system, platform_version, platform_machine, platform_python_implementation, implementation_name, implementation_version and extra`)
	}
	return name, nil
}

func (p *parser) markerOp() (string, error) {
	p.skipSpace()
	for _, o := range cmpOps {
		if strings.HasPrefix(p.src[p.pos:], o) {
			p.pos += len(o)
			return o, nil
		}
	}
	if p.keyword("in") {
		return "in", nil
	}
	if p.keyword("not") {
		if p.keyword("in") {
			return "not in", nil
		}
		return "", p.fail(p.pos, "expected 'in' after 'not' in marker")
	}
	return "", p.fail(p.pos, "expected a marker operator (==, !=, <, <=, >, >=, ~=, ===, in, not in)")
}
