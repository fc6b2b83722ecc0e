package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSyscallNumbers checks the raw system call numbers that zfork.c
// spells out, for x86_64 and for aarch64 (which no machine here
// runs), against golang.org/x/sys/unix's tables, generated from each
// architecture's kernel headers.
func TestSyscallNumbers(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	if err != nil {
		t.Fatalf("go list golang.org/x/sys: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "unix")
	table := func(goarch string) map[string]int {
		b, err := os.ReadFile(filepath.Join(dir, "zsysnum_linux_"+goarch+".go"))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, g := range regexp.MustCompile(`(?m)^\s*SYS_(\w+)\s*=\s*(\d+)`).FindAllStringSubmatch(string(b), -1) {
			m[g[1]], _ = strconv.Atoi(g[2])
		}
		return m
	}
	src, err := os.ReadFile("reaperbin/zfork.c")
	if err != nil {
		t.Fatal(err)
	}
	c := string(src)
	block := func(from, to string) string {
		i, j := strings.Index(c, from), strings.Index(c, to)
		if i < 0 || j < i {
			t.Fatalf("zfork.c: no %q ... %q block", from, to)
		}
		return c[i:j]
	}
	x86 := block("#if defined(__x86_64__)\n#define NR_", "#elif defined(__aarch64__)\n#define NR_")
	arm := block("#elif defined(__aarch64__)\n#define NR_", "#error \"zfork: unsupported architecture\"")
	common := block("#endif\n#define NR_", "#define EINTR")
	define := regexp.MustCompile(`#define NR_(\w+) (\d+)`)
	for _, arch := range []struct{ name, goarch, defs string }{{"x86_64", "amd64", x86}, {"aarch64", "arm64", arm}} {
		want := table(arch.goarch)
		n := 0
		for _, g := range define.FindAllStringSubmatch(arch.defs+common, -1) {
			got, _ := strconv.Atoi(g[2])
			if w, ok := want[g[1]]; !ok || w != got {
				t.Errorf("zfork.c, %s: NR_%s is %d; the kernel's is %d (known: %t)", arch.name, g[1], got, w, ok)
			}
			n++
		}
		if n < 20 {
			t.Errorf("zfork.c, %s: only %d numbers found", arch.name, n)
		}
	}
}
