package stress

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCapacityRefusedAtOnce fills forge's parent cgroup (its own,
// limits.cgroup_parent, limited to a little more than its first sessions
// use) with sessions that hold 4 MiB each: the first session that does not
// fit is refused in under a second with an error naming limits.memory,
// not left waiting on a full cgroup, and the live sessions keep answering.
func TestCapacityRefusedAtOnce(t *testing.T) {
	state := dedicatedStateDir(t)
	parent := fmt.Sprintf("forge-cap-%d", os.Getpid())
	t.Cleanup(func() { removeCgroup(parent) })
	config := filepath.Join(t.TempDir(), "forge.yaml")
	text := stopConfig(190) + fmt.Sprintf("limits:\n  cgroup_parent: %s\n", parent)
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			os.RemoveAll(filepath.Join(state, "sessions", id))
		}
	})
	id := func(i int) string {
		s := fmt.Sprintf("cap-%d-%d", os.Getpid(), i)
		if i >= len(ids) {
			ids = append(ids, s)
		}
		return s
	}
	p := startServe(t, state, config)
	p.execute(id(0), "x = 0")
	used, limitFile := cgroupMemory(t, parent)
	limit := used + 96<<20
	if err := os.WriteFile(limitFile, []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Fatalf("limiting %s: %v", limitFile, err)
	}
	t.Logf("parent cgroup %s: %d MiB used, limit set to %d MiB", parent, used>>20, limit>>20)

	refused := false
	for i := 1; i <= 60 && !refused; i++ {
		start := time.Now()
		r := p.tool("execute_python", map[string]any{"session_id": id(i),
			"code": fmt.Sprintf("import os\nx = %d\ndata = os.urandom(4 << 20)", i)})
		took := time.Since(start)
		if !r.IsError {
			continue
		}
		refused = true
		if !strings.Contains(r.text(), "limits.memory") {
			t.Errorf("session %d refused with %q, want an error naming limits.memory", i, r.text())
		}
		if took > time.Second {
			t.Errorf("session %d refused after %s, want under 1s", i, took)
		}
		t.Logf("session %d refused in %s: %s", i, took.Round(time.Microsecond), r.text())
	}
	if !refused {
		t.Errorf("60 sessions of 4 MiB were all accepted with %d MiB of room: none was refused (the kernel kills sessions to make room instead)", (limit-used)>>20)
	}
	for i := range len(ids) - 1 {
		start := time.Now()
		r, err := p.executeErr(ids[i], "x")
		if got := fmt.Sprint(r.Structured.Result); err != nil || got != strconv.Itoa(i) {
			t.Errorf("live session %d at capacity: x = %s, %v (notes %v)", i, got, err, r.Structured.Notes)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("live session %d at capacity answered after %s", i, took)
		}
	}
	p.terminate(5 * time.Minute)
}
