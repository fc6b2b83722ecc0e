package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// LocalAccount creates a local account with useradd (no home, no login
// shell; useradd also gives it the next free subordinate uid and gid
// ranges), named prefix and random hex, and removes it and its ranges when
// the test ends, also when it fails. Attack tests act as it, a real other
// user of the host.
func LocalAccount(t testing.TB, prefix string) (name string, uid, gid int) {
	t.Helper()
	RequiresRoot(t)
	for _, tool := range []string{"useradd", "userdel", "setpriv"} {
		_, err := exec.LookPath(tool)
		Require(t, err == nil, tool+" missing (Debian packages passwd, util-linux)")
	}
	var b [3]byte
	rand.Read(b[:])
	name = prefix + hex.EncodeToString(b[:])
	if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", "--force", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if err := dropLines(f, name+":"); err != nil {
				t.Errorf("removing %s from %s: %v", name, f, err)
			}
		}
	})
	for _, id := range []struct {
		flag string
		dst  *int
	}{{"-u", &uid}, {"-g", &gid}} {
		out, err := exec.Command("id", id.flag, name).Output()
		if err != nil {
			t.Fatal(err)
		}
		*id.dst, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	return name, uid, gid
}

// dropLines removes the lines starting with prefix (userdel normally has).
func dropLines(path, prefix string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var keep []string
	changed := false
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			changed = true
			continue
		}
		keep = append(keep, l)
	}
	if !changed {
		return nil
	}
	return os.WriteFile(path, []byte(strings.Join(keep, "")), 0o644)
}
