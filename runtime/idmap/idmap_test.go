package idmap_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/test/testutil"
)

// The helper process of TestCrashedOwner: lease one block, report it and
// die without releasing it.
func TestMain(m *testing.M) {
	if dir := os.Getenv("IDMAP_TEST_CRASH"); dir != "" {
		a, err := idmap.New(idmap.Options{StateDir: dir, Reserved: oneBlock, EtcDir: emptyEtc(dir)})
		if err == nil {
			var l *idmap.Lease
			if l, err = a.Allocate(); err == nil {
				fmt.Println(l.Range().Start)
				os.Exit(0)
			}
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// oneBlock is a reserved range of one block, outside the default range:
// TestCrashedOwner scans the real /proc, where sandboxes of other test
// packages running at the same time have ids in the default range.
var oneBlock = idmap.Range{Start: 0x60000000, Size: 65536}

// emptyEtc is an /etc with no subordinate ranges and no accounts.
func emptyEtc(dir string) string {
	etc := filepath.Join(dir, "etc")
	os.MkdirAll(etc, 0o755)
	return etc
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckHost(t *testing.T) {
	reserved := idmap.Range{Start: 0x70000000, Size: 0x10000000}
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the error; none means clear
	}{
		{"no files", nil, nil},
		{"useradd's ranges are clear", map[string]string{
			"subuid": "alice:100000:65536\nbob:165536:65536\n",
			"subgid": "alice:100000:65536\n",
			"passwd": "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\nnobody:x:65534:65534::/:/usr/sbin/nologin\n",
			"group":  "root:x:0:\nalice:x:1000:\n",
		}, nil},
		{"subuid inside", map[string]string{"subuid": "alice:100000:65536\nmallory:1879048192:65536\n"},
			[]string{"overlaps range 1879048192-1879113727", `"mallory"`, "subuid:2", "security.uid_range_start"}},
		{"subgid straddles the start", map[string]string{"subgid": "eve:1879000000:100000\n"},
			[]string{"overlaps range 1879000000-1879099999", "subgid:1", "2147483647"}},
		{"subuid past the end", map[string]string{"subuid": "x:2147483647:10\n"}, []string{"overlaps range 2147483647-2147483656"}},
		{"subuid just before", map[string]string{"subuid": "x:1879048191:1\n"}, nil},
		{"subuid just after", map[string]string{"subuid": "x:2147483648:65536\n"}, nil},
		{"uid in passwd", map[string]string{"passwd": "svc:x:1879048200:100::/:/bin/false\n"}, []string{"overlaps id 1879048200", `"svc"`, "passwd:1"}},
		{"primary gid in passwd", map[string]string{"passwd": "svc:x:100:1879048200::/:/bin/false\n"}, []string{"overlaps id 1879048200"}},
		{"gid in group", map[string]string{"group": "# comment\n\ngrp:x:2000000000:\n"}, []string{"overlaps id 2000000000", "group:3"}},
		{"malformed subuid", map[string]string{"subuid": "alice:lots:65536\n"}, []string{"subuid:1", "numbers"}},
		{"NIS line in passwd", map[string]string{"passwd": "+::::::\n"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			err := idmap.CheckHost(reserved, dir)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want clear", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got clear, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			var oe *idmap.OverlapError
			if errors.As(err, &oe) != errors.Is(err, idmap.ErrOverlap) {
				t.Errorf("OverlapError and ErrOverlap disagree for %v", err)
			}
		})
	}
}

func TestNewRefusesOverlap(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"etc/subuid": "alice:100000:65536\n"})
	_, err := idmap.New(idmap.Options{StateDir: dir, Reserved: idmap.Range{Start: 100000, Size: 1 << 20}, EtcDir: filepath.Join(dir, "etc")})
	if !errors.Is(err, idmap.ErrOverlap) || !strings.Contains(err.Error(), "100000-1148575") || !strings.Contains(err.Error(), "100000-165535") {
		t.Fatalf("got %v, want ErrOverlap naming both ranges", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts idmap.Options
		want string
	}{
		{"no state dir", idmap.Options{}, "state dir"},
		{"starts at 0", idmap.Options{StateDir: dir, Reserved: idmap.Range{Start: 0, Size: 1 << 20}}, "host root"},
		{"past the last id", idmap.Options{StateDir: dir, Reserved: idmap.Range{Start: 1<<32 - 65536, Size: 65536}}, "last valid id"},
		{"smaller than a block", idmap.Options{StateDir: dir, Reserved: idmap.Range{Start: 1 << 30, Size: 1000}}, "no block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.EtcDir = emptyEtc(dir)
			_, err := idmap.New(tc.opts)
			if !errors.Is(err, idmap.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
}

// newAlloc opens an allocator of blocks blocks (of 65536 ids) on dir with
// an empty /etc and the given /proc.
func newAlloc(t *testing.T, dir string, blocks uint32, proc string) *idmap.Allocator {
	t.Helper()
	a, err := idmap.New(idmap.Options{StateDir: dir, Reserved: idmap.Range{Start: 0x70000000, Size: blocks * 65536},
		EtcDir: emptyEtc(dir), ProcDir: proc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestTwoAllocatorsShareADir(t *testing.T) {
	dir := t.TempDir()
	a, b := newAlloc(t, dir, 4, ""), newAlloc(t, dir, 4, "")
	seen := map[uint32]bool{}
	var leases []*idmap.Lease
	for i := range 4 {
		al := a
		if i%2 == 1 {
			al = b
		}
		l, err := al.Allocate()
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if seen[l.Range().Start] {
			t.Fatalf("block %s handed out twice", l.Range())
		}
		seen[l.Range().Start] = true
		leases = append(leases, l)
	}
	if _, err := a.Allocate(); !errors.Is(err, idmap.ErrExhausted) {
		t.Fatalf("fifth allocation: got %v, want ErrExhausted", err)
	}
	// A block b released stays b's for its next sandbox; once b is
	// closed, a may take it.
	if err := leases[1].Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(); !errors.Is(err, idmap.ErrExhausted) {
		t.Fatalf("block kept by b: got %v, want ErrExhausted", err)
	}
	again, err := b.Allocate()
	if err != nil || again.Range() != leases[1].Range() {
		t.Fatalf("b again: got %v, %v; want %s", again, err, leases[1].Range())
	}
	again.Release()
	// Closing b drops its lock on the block it still held too; a takes
	// that one back after finding no process in it.
	b.Close()
	got := map[idmap.Range]bool{}
	mine := []*idmap.Lease{leases[0], leases[2]}
	for range 2 {
		l, err := a.Allocate()
		if err != nil {
			t.Fatalf("after b closed: %v", err)
		}
		got[l.Range()] = true
		mine = append(mine, l)
	}
	if !got[leases[1].Range()] || !got[leases[3].Range()] {
		t.Fatalf("after b closed, a got %v; want b's blocks %s and %s", got, leases[1].Range(), leases[3].Range())
	}
	infos, err := idmap.Leases(dir)
	if err != nil || len(infos) != 4 {
		t.Fatalf("Leases: %v, %v; want 4 live", infos, err)
	}
	for _, l := range mine {
		l.Release()
	}
	if infos, _ := idmap.Leases(dir); len(infos) != 0 {
		t.Fatalf("after releasing all: %v left", infos)
	}
}

func TestGeometryMustAgree(t *testing.T) {
	dir := t.TempDir()
	newAlloc(t, dir, 4, "")
	_, err := idmap.New(idmap.Options{StateDir: dir, Reserved: idmap.Range{Start: 0x70000000, Size: 8 * 65536}, EtcDir: emptyEtc(dir)})
	if !errors.Is(err, idmap.ErrGeometry) {
		t.Fatalf("second allocator with another range: got %v, want ErrGeometry", err)
	}
}

// writeStatus makes a fake /proc/<pid>/status with the given ids.
func writeStatus(t *testing.T, proc string, pid int, state string, uid, gid uint32) {
	t.Helper()
	writeFiles(t, proc, map[string]string{
		fmt.Sprintf("%d/status", pid): fmt.Sprintf("Name:\tpython3\nState:\t%s\nUid:\t%d\t%d\t%d\t%d\nGid:\t%d\t%d\t%d\t%d\n", state, uid, uid, uid, uid, gid, gid, gid, gid),
	})
}

// TestDeadOwnersLease: a lease file whose lock nobody holds is what a
// crashed forge process leaves; its block is taken again only when no
// process (here: a fake /proc) has an id in it.
func TestDeadOwnersLease(t *testing.T) {
	const start = 0x70000000
	tests := []struct {
		name      string
		state     string // of the one process in /proc
		uid, gid  uint32
		reclaimed bool
	}{
		{"no process in the block", "S (sleeping)", 0, 0, true},
		{"sandbox user left", "S (sleeping)", start + 1000, start + 1000, false},
		{"container root left", "R (running)", start, start, false},
		{"only its gid", "S (sleeping)", 0, start + 65535, false},
		{"a process of the next block", "S (sleeping)", start + 65536, start + 65536, true},
		{"only a zombie left (a killed forge's sandbox init)", "Z (zombie)", start + 1000, start + 1000, true},
		{"a stopped process left", "T (stopped)", start + 1000, start + 1000, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, proc := t.TempDir(), t.TempDir()
			writeStatus(t, proc, 4242, tc.state, tc.uid, tc.gid)
			writeFiles(t, dir, map[string]string{fmt.Sprintf("idmap/%d", start): fmt.Sprintf("999999 %d 65536 live\n", start)})
			a := newAlloc(t, dir, 1, proc)
			l, err := a.Allocate()
			if tc.reclaimed != (err == nil) {
				t.Fatalf("Allocate: got %v, %v; want reclaimed %v", l, err, tc.reclaimed)
			}
			if !tc.reclaimed && !errors.Is(err, idmap.ErrExhausted) {
				t.Fatalf("got %v, want ErrExhausted", err)
			}
			if l != nil {
				l.Release()
			}
			a.Close()
			// forge gc agrees.
			writeFiles(t, dir, map[string]string{fmt.Sprintf("idmap/%d", start): fmt.Sprintf("999999 %d 65536 live\n", start)})
			rep, err := newAlloc(t, dir, 1, proc).Reclaim()
			if err != nil || len(rep.Reclaimed) == 1 != tc.reclaimed || len(rep.Busy) == 1 == tc.reclaimed {
				t.Fatalf("Reclaim: %+v, %v; want reclaimed %v", rep, err, tc.reclaimed)
			}
		})
	}
}

// TestCrashedOwner is the same with real processes: a forge-like process
// leases the only block and dies; a process running with the block's
// sandbox uid keeps the block taken until it is gone.
func TestCrashedOwner(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "IDMAP_TEST_CRASH="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != fmt.Sprint(oneBlock.Start) {
		t.Fatalf("helper leased %q, want %d", got, oneBlock.Start)
	}
	sleeper := exec.Command("sleep", "600")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: oneBlock.Start + 1000, Gid: oneBlock.Start + 1000}}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	a, err := idmap.New(idmap.Options{StateDir: dir, Reserved: oneBlock, EtcDir: emptyEtc(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if l, err := a.Allocate(); !errors.Is(err, idmap.ErrExhausted) {
		t.Fatalf("with a process of the dead owner's sandbox alive: got %v, %v; want ErrExhausted", l, err)
	}
	sleeper.Process.Kill()
	sleeper.Wait()
	// Allocate looks at a busy block again after a while; forge gc at once.
	if _, err := a.Allocate(); !errors.Is(err, idmap.ErrExhausted) {
		t.Fatalf("right after: got %v, want the busy block skipped", err)
	}
	if rep, err := a.Reclaim(); err != nil || len(rep.Reclaimed) != 1 {
		t.Fatalf("Reclaim: %+v, %v; want the block back", rep, err)
	}
	l, err := a.Allocate()
	if err != nil || l.Range() != oneBlock {
		t.Fatalf("after it is gone: got %v, %v; want %s", l, err, oneBlock)
	}
	l.Release()
}

// BenchmarkAllocate is one sandbox's share: lease a block and give it back
// (the pool's and sessions' steady state).
//
// BenchmarkAllocateFirst is the first sandboxes of a process: blocks whose
// lease files exist but which no allocator holds yet.
func BenchmarkAllocateFirst(b *testing.B) {
	dir := b.TempDir()
	opts := idmap.Options{StateDir: dir, EtcDir: emptyEtc(dir)}
	a, err := idmap.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	var held []*idmap.Lease
	for b.Loop() {
		if len(held) == 64 { // a new process after a clean exit: the same files, nothing held
			b.StopTimer()
			for _, l := range held {
				l.Release()
			}
			held = held[:0]
			a.Close()
			if a, err = idmap.New(opts); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		l, err := a.Allocate()
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, l)
	}
	a.Close()
}

func BenchmarkAllocate(b *testing.B) {
	dir := b.TempDir()
	a, err := idmap.New(idmap.Options{StateDir: dir, EtcDir: emptyEtc(dir)})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	// Some blocks held, as by a warm pool and a few sessions.
	for range 16 {
		if _, err := a.Allocate(); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		l, err := a.Allocate()
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocateNewBlock is the first use of a block past the 64 whose
// lease files New prepares: it creates the file (later uses reuse it).
func BenchmarkAllocateNewBlock(b *testing.B) {
	dir := b.TempDir()
	a, err := idmap.New(idmap.Options{StateDir: dir, EtcDir: emptyEtc(dir)})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	for range 64 {
		if _, err := a.Allocate(); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := a.Allocate(); errors.Is(err, idmap.ErrExhausted) {
			b.Skip("every block has its file")
		} else if err != nil {
			b.Fatal(err)
		}
	}
}

// A shared allocator hands every sandbox the same range and keeps no files.
func TestShared(t *testing.T) {
	a := idmap.NewShared(idmap.Range{Start: 0, Size: 1})
	l1, err1 := a.Allocate()
	l2, err2 := a.Allocate()
	if err1 != nil || err2 != nil || l1.Range() != l2.Range() || l1.Range() != (idmap.Range{Start: 0, Size: 1}) || !a.Shared() {
		t.Fatalf("shared leases %v %v: %v %v", l1, l2, err1, err2)
	}
	if err := l1.Release(); err != nil {
		t.Error(err)
	}
	if ok, err := l2.ReleaseIfUnused(); !ok || err != nil {
		t.Errorf("ReleaseIfUnused: %v %v", ok, err)
	}
	if rep, err := a.Reclaim(); err != nil || len(rep.Reclaimed)+len(rep.Busy) != 0 {
		t.Errorf("Reclaim: %+v %v", rep, err)
	}
	if err := a.Close(); err != nil {
		t.Error(err)
	}
}

// TestAwaitReclaim: right after a crash, a dead owner's block may still
// have a process that is leaving (a sandbox's last process in exit, a runc
// init the crashed forge was making). Reclaim alone keeps it reserved;
// AwaitReclaim gets it back once the process is gone, within its bound,
// and gives up at the bound when the process stays.
func TestAwaitReclaim(t *testing.T) {
	const start = 0x70000000
	for _, leaves := range []bool{true, false} {
		t.Run(fmt.Sprintf("process leaves %v", leaves), func(t *testing.T) {
			dir, proc := t.TempDir(), t.TempDir()
			writeStatus(t, proc, 4242, "S (sleeping)", start+1000, start+1000)
			writeFiles(t, dir, map[string]string{fmt.Sprintf("idmap/%d", start): fmt.Sprintf("999999 %d 65536 live\n", start)})
			a := newAlloc(t, dir, 1, proc)
			if rep, err := a.Reclaim(); err != nil || len(rep.Busy) != 1 {
				t.Fatalf("Reclaim with the process there: %+v, %v; want the block busy", rep, err)
			}
			if leaves {
				go func() {
					time.Sleep(150 * time.Millisecond)
					os.RemoveAll(filepath.Join(proc, "4242"))
				}()
			}
			rep, err := a.AwaitReclaim(context.Background(), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if leaves && (len(rep.Reclaimed) != 1 || len(rep.Busy) != 0) {
				t.Fatalf("AwaitReclaim: %+v; want the block back once its process left", rep)
			}
			if !leaves && (len(rep.Reclaimed) != 0 || len(rep.Busy) != 1) {
				t.Fatalf("AwaitReclaim: %+v; want the block still busy", rep)
			}
		})
	}
}

// TestMoreThan4096Blocks: the default range cut into blocks of 16384 ids
// (security.uid_map_size) leases 16,384 disjoint blocks, enough for 5,000
// live sessions and their zygote templates; with 65536 ids it stops at
// 4,096, naming the settings.
func TestMoreThan4096Blocks(t *testing.T) {
	for _, tc := range []struct {
		block uint32
		want  int
	}{{65536, 4096}, {16384, 16384}} {
		t.Run(fmt.Sprint(tc.block), func(t *testing.T) {
			dir := t.TempDir()
			a, err := idmap.New(idmap.Options{StateDir: dir, BlockSize: tc.block, EtcDir: emptyEtc(dir), ProcDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			var prev idmap.Range
			for i := range tc.want {
				l, err := a.Allocate()
				if err != nil {
					t.Fatalf("lease %d of %d: %v", i+1, tc.want, err)
				}
				r := l.Range()
				if r.Size != tc.block || (i > 0 && r.Start != prev.Start+tc.block) || !a.Reserved().Contains(r.Start) {
					t.Fatalf("lease %d: %s after %s, want the next block of %d ids in %s", i+1, r, prev, tc.block, a.Reserved())
				}
				prev = r
			}
			if _, err := a.Allocate(); !errors.Is(err, idmap.ErrExhausted) || !strings.Contains(err.Error(), "security.uid") {
				t.Errorf("lease %d: got %v, want ErrExhausted naming the settings", tc.want+1, err)
			}
		})
	}
}
