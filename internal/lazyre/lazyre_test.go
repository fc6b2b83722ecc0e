package lazyre

import (
	"regexp"
	"testing"
)

// A lazy Regexp answers like the compiled one, compiling once.
func TestLikeRegexp(t *testing.T) {
	const expr = `^([a-z]+)-([0-9]{1,3})$`
	lazy := &Regexp{expr: expr} // not compiled, as outside a test binary
	if lazy.rx != nil {
		t.Fatal("compiled before use")
	}
	want := regexp.MustCompile(expr)
	for _, s := range []string{"abc-12", "abc-1234", "", "x-0"} {
		if got, w := lazy.MatchString(s), want.MatchString(s); got != w {
			t.Errorf("MatchString(%q): got %v, want %v", s, got, w)
		}
		if got, w := lazy.FindStringSubmatch(s), want.FindStringSubmatch(s); len(got) != len(w) {
			t.Errorf("FindStringSubmatch(%q): got %q, want %q", s, got, w)
		}
	}
	if got := New(`[-_.]+`).ReplaceAllString("a_.b", "-"); got != "a-b" {
		t.Errorf("ReplaceAllString: got %q, want %q", got, "a-b")
	}
	rx := lazy.rx
	lazy.MatchString("abc-1")
	if lazy.rx != rx {
		t.Error("compiled twice")
	}
}

// In a test binary New compiles at once, so a bad pattern fails its
// package's tests at init.
func TestCompilesInTests(t *testing.T) {
	if !inTest {
		t.Fatal("inTest is false in a test binary")
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted a pattern that does not compile")
		}
	}()
	New(`(`)
}
