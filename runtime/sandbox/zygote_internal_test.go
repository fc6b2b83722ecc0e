package sandbox

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mcp-forge/forge/runtime/idmap"

	"golang.org/x/sys/unix"
)

// TestZygoteSeccompSentOnce: a template is sent a seccomp program's BPF
// with the first fork request that uses it and only its id after that;
// once it holds maxSentPrograms, the next new one resets its table.
func TestZygoteSeccompSentOnce(t *testing.T) {
	p, err := defaultSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := bpfOf(p)
	if err != nil {
		t.Fatal(err)
	}
	if prog.id == "" || len(prog.hex) < 100 {
		t.Fatalf("program %q of %d hex digits", prog.id, len(prog.hex))
	}
	tpl := &template{}
	send := func(b bpf) forkRequest {
		t.Helper()
		msg, _, fast, err := tpl.message(&forkRequest{ID: "x", SeccompID: b.id}, b)
		if err != nil || fast {
			t.Fatal(err, fast)
		}
		var got forkRequest
		if err := json.Unmarshal(msg, &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if r := send(prog); r.Seccomp != prog.hex || r.SeccompID != prog.id || r.SeccompReset {
		t.Fatalf("first request: seccomp %d digits, id %q, reset %t; want the program, its id, no reset", len(r.Seccomp), r.SeccompID, r.SeccompReset)
	}
	for i := 0; i < 3; i++ {
		if r := send(prog); r.Seccomp != "" || r.SeccompID != prog.id {
			t.Fatalf("request %d: %d hex digits sent again (id %q)", i+2, len(r.Seccomp), r.SeccompID)
		}
	}
	for i := 1; i < maxSentPrograms; i++ {
		other := bpf{id: fmt.Sprintf("other-%d", i), hex: "00"}
		if r := send(other); r.Seccomp != "00" || r.SeccompReset {
			t.Fatalf("program %d: %+v, want it sent without a reset", i, r)
		}
	}
	if r := send(bpf{id: "one-too-many", hex: "11"}); r.Seccomp != "11" || !r.SeccompReset {
		t.Fatalf("past %d programs: %+v, want the program with a reset", maxSentPrograms, r)
	}
	if r := send(prog); r.Seccomp != prog.hex || r.SeccompReset {
		t.Fatalf("after the reset: the first program must be sent again (got %d digits, reset %t)", len(r.Seccomp), r.SeccompReset)
	}
}

// TestZygoteFastRequest: to a template (whose request loop is C), a
// request of the shape it registered (its last successful whole request)
// goes as a fast request, with only what each fork has of its own; any
// other shape, or a program it has not been sent, goes whole and clears
// the shape until its fork succeeds.
func TestZygoteFastRequest(t *testing.T) {
	prog := bpf{id: "p1", hex: "00"}
	tpl := &template{}
	req := func(id string, start uint32, uid uint32, bridge bool) *forkRequest {
		return &forkRequest{ID: id, UID: uid, IDsStart: start, IDsSize: 65536, Hostname: "sandbox-" + id[len(id)-3:],
			SeccompID: prog.id, Env: []string{"A=b"}, Bridge: bridge}
	}
	msg, shape, fast, err := tpl.message(req("1-abc", 65536, 1000, false), prog)
	if err != nil || fast || shape == nil || msg[0] != '{' {
		t.Fatalf("first request: %q fast %t shape %q %v; want it whole, with its shape", msg, fast, shape, err)
	}
	if _, _, fast, _ = tpl.message(req("2-abd", 131072, 1000, false), prog); fast {
		t.Fatal("a request before the template registered the shape went fast")
	}
	tpl.shape = shape // as request does on the first one's reply
	msg, _, fast, err = tpl.message(req("3-abe", 131072, 1000, true), prog)
	want := append([]byte{'F', 1, 5, 11, 0, 0, 2, 0}, "3-abesandbox-abe"...)
	if err != nil || !fast || string(msg) != string(want) {
		t.Fatalf("a request of the registered shape: %q fast %t %v; want %q", msg, fast, err, want)
	}
	if msg, _, fast, _ = tpl.message(req("4-abf", 0, 1001, false), prog); fast || msg[0] != '{' || tpl.shape != nil {
		t.Fatalf("another uid: %q fast %t (shape kept %t); want it whole, the shape cleared", msg, fast, tpl.shape != nil)
	}
	tpl.shape = shape
	other := bpf{id: "p2", hex: "11"}
	r := req("5-ab0", 0, 1000, false)
	r.SeccompID = other.id
	if _, _, fast, _ = tpl.message(r, other); fast {
		t.Fatal("a request with a program the template has not been sent went fast")
	}
	if _, err := (&forkRequest{Hostname: "sandbox-x"}).fast(); err == nil {
		t.Error("a fast request without an id")
	}
}

// TestZygoteCredPid: the host learns a child's pid 1 from the credentials
// the kernel sends with its first byte (SO_PASSCRED), here a process's own
// pid; a peer that closes first, or sends something else, is an error.
func TestZygoteCredPid(t *testing.T) {
	// The peer end is an *os.File, the only owner of its descriptor: a raw
	// close of it besides would close twice, the second time (the File's
	// finalizer, at some later GC) whatever reused the number.
	pair := func() (int, *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		peer := os.NewFile(uintptr(fds[1]), "peer")
		t.Cleanup(func() { unix.Close(fds[0]); peer.Close() })
		if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
			t.Fatal(err)
		}
		return fds[0], peer
	}
	cmd := exec.Command("/bin/sh", "-c", "printf p >&3; sleep 5")
	fd, peer := pair()
	cmd.ExtraFiles = []*os.File{peer}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if pid, err := credPid(fd); err != nil || pid != cmd.Process.Pid {
		t.Errorf("credPid: %d, %v; want the writer's pid %d", pid, err, cmd.Process.Pid)
	}
	fd, peer = pair()
	peer.Close()
	if pid, err := credPid(fd); err == nil {
		t.Errorf("credPid of a closed peer: %d, want an error", pid)
	}
	fd, peer = pair()
	if _, err := peer.Write([]byte{'x'}); err != nil {
		t.Fatal(err)
	}
	if pid, err := credPid(fd); err == nil {
		t.Errorf("credPid of another byte: %d, want an error", pid)
	}
}

// TestTemplateLimitsFit: a template's per-user limits are a sandbox's
// share times its slots, but never more than the kernel takes. In a rootless
// forge's user namespace every limit reads INT_MAX, so a sandbox's share
// times 27 slots overflowed it and the template failed to start (EINVAL).
func TestTemplateLimitsFit(t *testing.T) {
	r := &Runtime{nested: 2,
		budgets: UserLimits{"max_fanotify_marks": 80530636, "max_inotify_watches": 1000, "max_user_namespaces": 0}}
	got := r.templateLimits(27)
	want := UserLimits{"max_fanotify_marks": math.MaxInt32, "max_inotify_watches": 27000, "max_user_namespaces": 58}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("templateLimits = %v, want %v", got, want)
	}
}

// TestTemplateIDMapMerges: a template's blocks, in host order, map as few
// lines as they are runs of adjacent blocks. Line by line, 257 blocks (256
// slots) made a map of 7 KiB, which the kernel refuses (EINVAL), so a
// template of more than about 150 slots never started.
func TestTemplateIDMapMerges(t *testing.T) {
	const block = 65536
	base := uint32(0x70000000)
	var run []idmap.Range
	for i := range 257 {
		run = append(run, idmap.Range{Start: base + uint32(i)*block, Size: block})
	}
	m, err := templateIDMap(run, block)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || m[0].ContainerID != 0 || m[0].HostID != base || m[0].Size != 257*block {
		t.Errorf("257 adjacent blocks: %+v, want one line of all of them", m)
	}

	// Two runs with a gap: two lines, container ids still consecutive.
	gap := []idmap.Range{{Start: base, Size: block}, {Start: base + block, Size: block}, {Start: base + 5*block, Size: block}}
	m, err = templateIDMap(gap, block)
	if err != nil {
		t.Fatal(err)
	}
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: base, Size: 2 * block}, {ContainerID: 2 * block, HostID: base + 5*block, Size: block}}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("two runs: %+v, want %+v", m, want)
	}

	// Scattered blocks that cannot fit: a clear error naming the setting.
	var scattered []idmap.Range
	for i := range 257 {
		scattered = append(scattered, idmap.Range{Start: base + uint32(2*i)*block, Size: block})
	}
	if _, err := templateIDMap(scattered, block); err == nil || !strings.Contains(err.Error(), "sandbox.zygote_slots") {
		t.Errorf("257 scattered blocks: %v, want an error naming sandbox.zygote_slots", err)
	}
}

// TestSlotsFor: a binds template (a hosted tools module's) has at most
// BindsZygoteSlots slots; an image's has the configured ones.
func TestSlotsFor(t *testing.T) {
	r := &Runtime{zopts: ZygoteOptions{Slots: 128}}
	if n := r.slotsFor(templateKey{}); n != 128 {
		t.Errorf("image template: %d slots, want 128", n)
	}
	if n := r.slotsFor(templateKey{binds: "tools=/x\x00"}); n != BindsZygoteSlots {
		t.Errorf("binds template: %d slots, want %d", n, BindsZygoteSlots)
	}
	r.zopts.Slots = 8
	if n := r.slotsFor(templateKey{binds: "tools=/x\x00"}); n != 8 {
		t.Errorf("binds template with 8 configured: %d slots, want 8", n)
	}
}
