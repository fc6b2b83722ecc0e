package sandbox_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	occgroups "github.com/opencontainers/cgroups"

	"github.com/mcp-forge/forge/test/testutil"
)

// BenchmarkCgroupMove measures what zygote mode's host side pays per
// child for the move into its cgroup (a write of cgroup.procs), with moves
// spaced as sparse forks are (20 ms apart), on this host's cgroups (v1's
// pids hierarchy, or v2 in the guest): alone, and while another process
// is moved into the cgroup it is already in every 10 ms (zygote mode's
// no-op beat, moveBeat). move-ms and beat-move-ms are medians of the same
// run; ratio is move / beat-move, what the beat saves a fork. clone3 with
// CLONE_INTO_CGROUP would save the whole move (docs/bench-log.md).
func BenchmarkCgroupMove(b *testing.B) {
	testutil.RequiresRoot(b)
	base := "/sys/fs/cgroup/pids"
	if unified() {
		base = "/sys/fs/cgroup"
	}
	name := fmt.Sprintf("forge-bench-%d", os.Getpid())
	var dirs []string
	for _, s := range []string{"a", "b", "beat"} {
		d := filepath.Join(base, name+"-"+s)
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		for _, d := range dirs {
			for range 50 { // the killed sleeps leave their cgroups once reaped
				if err := os.Remove(d); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	for range 2 {
		p := exec.Command("sleep", "600")
		if err := p.Start(); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, p)
	}
	moved, beater := procs[0].Process.Pid, procs[1].Process.Pid
	if err := occgroups.WriteCgroupProc(dirs[2], beater); err != nil {
		b.Fatal(err)
	}
	sparse := func(n int) time.Duration {
		var d []time.Duration
		for i := range n {
			time.Sleep(20 * time.Millisecond)
			s := time.Now()
			if err := occgroups.WriteCgroupProc(dirs[i%2], moved); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(s))
		}
		return pct(d, 50)
	}
	const n = 25
	var idle, beat time.Duration
	b.ResetTimer()
	for range b.N {
		idle = sparse(n)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			pid := strconv.Itoa(beater)
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					_ = os.WriteFile(filepath.Join(dirs[2], "cgroup.procs"), []byte(pid), 0)
				}
			}
		}()
		beat = sparse(n)
		close(stop)
		<-done
	}
	b.StopTimer()
	b.ReportMetric(float64(idle.Microseconds())/1000, "move-ms")
	b.ReportMetric(float64(beat.Microseconds())/1000, "beat-move-ms")
	b.ReportMetric(float64(idle)/float64(max(beat, time.Microsecond)), "ratio")
}
