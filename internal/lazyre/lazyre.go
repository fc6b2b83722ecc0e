// Package lazyre is a regular expression compiled on first use, like the
// standard library's internal/lazyregexp. forge's packages validate names
// with patterns such as `^[A-Za-z0-9_.-]{1,128}$`, whose counted repetition
// compiles to a program of hundreds of instructions: compiled in package
// init, they cost every process, `forge serve` before it answers
// `initialize` among them, although most processes never match them.
package lazyre

import (
	"os"
	"regexp"
	"strings"
	"sync"
)

// Regexp is a *regexp.Regexp compiled when one of its methods first runs.
type Regexp struct {
	expr string
	once sync.Once
	rx   *regexp.Regexp
}

// inTest: test binaries compile at New, so a bad pattern fails its
// package's tests at once rather than on the first match.
var inTest = strings.HasSuffix(os.Args[0], ".test")

// New returns a lazily compiled expr; it panics on first use if expr does
// not compile (as regexp.MustCompile would).
func New(expr string) *Regexp {
	r := &Regexp{expr: expr}
	if inTest {
		r.re()
	}
	return r
}

func (r *Regexp) re() *regexp.Regexp {
	r.once.Do(func() { r.rx = regexp.MustCompile(r.expr) })
	return r.rx
}

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.re().MatchString(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.re().FindStringSubmatch(s) }

// ReplaceAllString is regexp.Regexp.ReplaceAllString.
func (r *Regexp) ReplaceAllString(src, repl string) string { return r.re().ReplaceAllString(src, repl) }

// String returns the source text.
func (r *Regexp) String() string { return r.expr }
