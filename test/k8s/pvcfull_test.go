//go:build k8s

package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPVCFull is issue 29's "a PVC full" on the real cluster: two
// replicas of components/cluster whose shared session store is a real
// PersistentVolumeClaim, bound to a hostPath PV on a 16 MiB tmpfs of the
// node (this host). A call whose checkpoint does not fit is answered with
// a note naming the cause (no space left on device), never silently; a
// session is refused with that cause while the volume is full; once space
// is free the session checkpoints again. Then the holder is deleted
// (gracefully, as in a rollout) while the volume is nearly full, so that
// neither session can be hibernated: the session whose last answered call
// was checkpointed comes back on the other replica from that checkpoint,
// and the one whose checkpoint failed is reported lost.
func TestPVCFull(t *testing.T) {
	c := cluster(t)
	const ns = "forge-pvcfull"
	start := time.Now()

	// The volume: a small tmpfs on a directory of the node, a PV onto it
	// that only the overlay's claim binds. Cleanups run last-in first-out:
	// the namespace goes first (applyOverlay), then the PV, then the mount.
	vol := filepath.Join(c.Dir, "pvcfull")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", vol, "tmpfs", 0, "size=16m,mode=0755"); err != nil {
		t.Fatalf("mounting a 16 MiB tmpfs at %s: %v", vol, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(vol, 0); err != nil {
			t.Errorf("unmounting %s: %v", vol, err)
			_ = syscall.Unmount(vol, syscall.MNT_DETACH)
		}
		_ = os.Remove(vol)
	})
	// The state claims' PVs first: pvs.sh counts every Available PV, and
	// this one is Available until the overlay's claim binds it.
	c.Script(t, "pvs.sh", "2")
	c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: forge-pvcfull}
spec:
  storageClassName: forge-k8s-full
  capacity: {storage: 16Mi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: %s, name: forge-shared}
  hostPath: {path: %s, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [localhost]}]
`, ns, vol))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := c.Run(ctx, "", "delete", "pv", "forge-pvcfull", "--ignore-not-found", "--wait=true"); err != nil {
			t.Errorf("deleting the PV: %v", err)
		}
	})
	c.applyOverlay(t, "test/k8s/overlays/pvcfull", ns, 2)
	p0 := c.waitReady(t, ns, "forge-0", "", 4*time.Minute)
	p1 := c.waitReady(t, ns, "forge-1", "", 4*time.Minute)
	t.Logf("2 replicas Ready %v after apply", time.Since(start).Round(time.Millisecond))
	direct := func(p pod) Forge {
		return Forge{Base: "http://" + net.JoinHostPort(p.IP, "8080"), Host: "forge", Token: devToken}
	}
	f0, f1 := direct(p0), direct(p1)
	call := func(f Forge, sid, code, want string) ExecResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := f.Execute(ctx, code, sid)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Success || r.Stdout != want {
			t.Fatalf("%s: got %+v, want success with stdout %q", code, r, want)
		}
		return r
	}
	checkpointed := func(r ExecResult) bool {
		return !strings.Contains(strings.Join(r.Notes, "\n"), "could not be checkpointed")
	}
	wantNoSpace := func(what string, r ExecResult) {
		t.Helper()
		n := strings.Join(r.Notes, "\n")
		if !strings.Contains(n, "could not be checkpointed") || !strings.Contains(n, "no space left on device") {
			t.Fatalf("%s: got notes %q, want the failed checkpoint and its cause (no space left on device) said", what, r.Notes)
		}
		t.Logf("%s: %q", what, r.Notes)
	}

	// lost: its checkpoint fails; kept: checkpointed, with 2 MB in /workspace.
	lost, kept := f0.NewSession(t), f0.NewSession(t)
	for _, sid := range []string{lost, kept} {
		if r := call(f0, sid, "x = 1\nopen('/workspace/small.txt', 'w').write('small')\nprint(x)", "1\n"); !checkpointed(r) {
			t.Fatalf("a small call on an empty volume: got notes %q, want it checkpointed", r.Notes)
		}
	}

	t.Run("a checkpoint larger than the volume", func(t *testing.T) {
		// Through forge-1, which forwards it to the holder.
		r := call(f1, lost, "x = 2\nopen('/workspace/big', 'wb').write(b'y' * (24 << 20))\nprint(x)", "2\n")
		wantNoSpace("a call whose /workspace (24 MB) does not fit the 16 MiB volume", r)
		if m := sessionMeta(t, vol, lost); m.Checkpointed || m.Member != "forge-0" {
			t.Fatalf("the session's record after the failed checkpoint: %+v, want held by forge-0, not checkpointed", m)
		}
		// The half-written copy gave its space back.
		if free := freeBytes(t, vol); free < 12<<20 {
			t.Fatalf("free on the volume after the failed checkpoint: %d bytes, want the copy's space back (>= 12 MiB)", free)
		}
	})

	t.Run("a volume filled from outside", func(t *testing.T) {
		filler := fill(t, vol, 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b, code, err := f1.do(ctx, "POST", "/api/v1/sandboxes", map[string]any{})
		if err == nil || code < 500 || !strings.Contains(string(b), "no space left on device") {
			t.Fatalf("a new session on the full volume: got %d %s (%v), want an error naming no space left on device", code, b, err)
		}
		t.Logf("a new session on the full volume: %d %s", code, b)
		wantNoSpace("a call on the full volume", call(f0, kept, "x = 2\nprint(x)", "2\n"))
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		r := call(f0, kept, "x = 3\nopen('/workspace/two.bin', 'wb').write(b'z' * (2 << 20))\nprint(x)", "3\n")
		if !checkpointed(r) || !sessionMeta(t, vol, kept).Checkpointed {
			t.Fatalf("the next call once space was free: got notes %q, want it checkpointed", r.Notes)
		}
	})

	t.Run("holder stopped on a nearly full volume", func(t *testing.T) {
		// 1 MiB left: room for records, not for either session's
		// hibernation (2 MB and 24 MB of /workspace).
		filler := fill(t, vol, 1<<20)
		stopped := time.Now()
		c.K(t, "-n", ns, "delete", "pod", "forge-0", "--wait=true")
		t.Logf("forge-0 stopped (drain and hibernation) in %v", time.Since(stopped).Round(time.Millisecond))
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		// The checkpointed session: its last answered call is what comes
		// back, whether or not the hibernation at stop fitted.
		r := call(f1, kept, "print(x, open('/workspace/small.txt').read(), len(open('/workspace/two.bin', 'rb').read()))", fmt.Sprintf("3 small %d\n", 2<<20))
		t.Logf("the checkpointed session on forge-1: %q", r.Notes)
		if n := strings.Join(r.Notes, "\n"); strings.Contains(n, "was lost") {
			t.Fatalf("the checkpointed session after its holder stopped: got notes %q, want it restored", r.Notes)
		}
		// The session whose checkpoint failed: lost, and said so.
		r = call(f1, lost, "print(globals().get('x'))", "None\n")
		if n := strings.Join(r.Notes, "\n"); !strings.Contains(n, "session "+lost+" was lost") {
			t.Fatalf("the session whose checkpoint failed, after its holder stopped: got notes %q, want it reported lost", r.Notes)
		}
		t.Logf("the unsaved session on forge-1: %q", r.Notes)
		if h := sessionMeta(t, vol, kept).Member; h != "forge-1" {
			t.Fatalf("holder after the takeover: got %q, want forge-1", h)
		}
	})
	t.Logf("TestPVCFull body took %v", time.Since(start).Round(time.Millisecond))
}

// sessionMeta reads the record of session sid in the shared volume.
func sessionMeta(t testing.TB, vol, sid string) (m struct {
	Member       string
	Checkpointed bool
	Status       string
}) {
	t.Helper()
	found, _ := filepath.Glob(filepath.Join(vol, "sessions", "*", sid, "meta.json"))
	more, _ := filepath.Glob(filepath.Join(vol, "sessions", ".principals", "*", sid, "meta.json"))
	found = append(found, more...)
	if len(found) != 1 {
		t.Fatalf("session %s: %d records in %s", sid, len(found), vol)
	}
	b, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decoding %s: %v", found[0], err)
	}
	return m
}

func freeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fill takes all but leave bytes of the volume at dir with one file (the
// host's side of the node's volume, as another writer would), and returns
// its path.
func fill(t testing.TB, dir string, leave int64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := freeBytes(t, dir) - leave
	if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil && !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("filling %s with %d bytes: %v", dir, n, err)
	}
	if free := freeBytes(t, dir); free > leave {
		t.Fatalf("%s: %d bytes free after filling, want at most %d", dir, free, leave)
	}
	return path
}
