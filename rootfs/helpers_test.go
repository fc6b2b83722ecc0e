package rootfs

import (
	"os"
	"strconv"
	"testing"
)

func itoa(i int) string { return strconv.Itoa(i) }

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
