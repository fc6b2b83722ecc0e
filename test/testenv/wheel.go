package testenv

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// MakeWheel writes a pure-Python wheel of dist (module = dist) whose
// module has VALUE = value, as a build backend would.
func MakeWheel(t testing.TB, dir, dist, version, value string) {
	t.Helper()
	MakeWheelWith(t, dir, dist, version, value, nil)
}

// MakeWheelWith is MakeWheel with more files in the module's directory
// (name → content).
func MakeWheelWith(t testing.TB, dir, dist, version, value string, extra map[string][]byte) {
	t.Helper()
	mod := strings.ReplaceAll(dist, "-", "_")
	info := mod + "-" + version + ".dist-info"
	files := []struct{ name, body string }{
		{mod + "/__init__.py", fmt.Sprintf("VALUE = %q\n", value)},
		{info + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", dist, version)},
		{info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: forge-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		files = append(files, struct{ name, body string }{mod + "/" + name, string(extra[name])})
	}
	f, err := os.Create(filepath.Join(dir, mod+"-"+version+"-py3-none-any.whl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := zip.NewWriter(f)
	var record strings.Builder
	for _, file := range files {
		w, err := z.Create(file.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(file.body))
		sum := sha256.Sum256([]byte(file.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", file.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(file.body))
	}
	record.WriteString(info + "/RECORD,,\n")
	w, _ := z.Create(info + "/RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
}
