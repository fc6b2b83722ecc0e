package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/internal/proc"
	"github.com/mcp-forge/forge/runtime/idmap"
)

// CleanupReport says what Cleanup removed.
type CleanupReport struct {
	Sandboxes []string `json:"sandboxes"`
	Cgroups   []string `json:"cgroups"`
	// Leases are host id blocks of dead forge processes given back; Busy
	// ones still have processes and stay reserved.
	Leases     []idmap.Range `json:"leases"`
	LeasesBusy []idmap.Range `json:"leases_busy"`
}

// orphanExitWait bounds how long Cleanup waits for the processes of a
// crashed forge's sandboxes to leave their host id blocks.
const orphanExitWait = 2 * time.Second

// Cleanup removes sandboxes and cgroups whose owning forge process is gone.
// Sandboxes of live forge processes sharing the state dir are left alone.
func (r *Runtime) Cleanup(ctx context.Context) (CleanupReport, error) {
	var rep CleanupReport
	entries, err := os.ReadDir(r.root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return rep, err
	}
	var errs []error
	// First the processes left in the cgroups of dead owners: a zygote
	// child of a paused session is frozen in its own cgroup, outside its
	// template's, and its template's container cannot stop before it has.
	for _, p := range r.orphanCgroups() {
		releaseCgroup(p)
	}
	for _, e := range entries {
		if !e.IsDir() || !proc.DeadOwner(e.Name()) {
			continue
		}
		if err := r.destroyOrphan(ctx, e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Sandboxes = append(rep.Sandboxes, e.Name())
	}
	cgs, err := removeCgroups(r.orphanCgroups()) // what the sandboxes' destroys left
	rep.Cgroups = cgs
	errs = append(errs, err)
	// After the orphans are gone, so that their blocks are free. Right
	// after a crash their last processes may still be exiting: wait for
	// them, briefly.
	wait := time.Duration(0)
	if len(rep.Sandboxes) > 0 || len(cgs) > 0 {
		wait = orphanExitWait
	}
	lrep, err := r.ids.AwaitReclaim(ctx, wait)
	rep.Leases, rep.LeasesBusy = lrep.Reclaimed, lrep.Busy
	errs = append(errs, err)
	return rep, errors.Join(errs...)
}

func (r *Runtime) destroyOrphan(ctx context.Context, id string) error {
	c, err := libcontainer.Load(r.root, id)
	if err != nil {
		// Unreadable state: nothing can be running from it that we could
		// address through libcontainer; drop the directory.
		r.log.Warn("removing unreadable sandbox state", "sandbox", id, "err", err)
		return os.RemoveAll(filepath.Join(r.root, id))
	}
	_ = c.Signal(unix.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := c.Status()
		if err != nil || st == libcontainer.Stopped {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("orphaned sandbox %s still running after SIGKILL", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Destroy(); err != nil {
		return fmt.Errorf("destroying orphaned sandbox %s: %w", id, err)
	}
	r.log.Info("removed orphaned sandbox", "sandbox", id)
	return nil
}

// orphanCgroups lists the cgroups of dead owners under every mounted
// hierarchy (v1 controllers, or the v2 unified tree).
func (r *Runtime) orphanCgroups() []string {
	if r.noCgroups {
		return nil // the "forge" cgroups there are root's forge's
	}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + r.cgroupBase)
	if st, err := os.Stat("/sys/fs/cgroup" + r.cgroupBase); err == nil && st.IsDir() {
		roots = append(roots, "/sys/fs/cgroup"+r.cgroupBase)
	}
	var out []string
	for _, root := range roots {
		entries, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() && proc.DeadOwner(e.Name()) {
				out = append(out, filepath.Join(root, e.Name()))
			}
		}
	}
	return out
}

// releaseCgroup kills what is left in the cgroup p of a dead owner, and
// thaws it so that a frozen process can die: cgroup.kill on v2, else a
// SIGKILL to every process it lists. Best effort: removeCgroups reports a
// cgroup that stays busy.
func releaseCgroup(p string) {
	if err := os.WriteFile(filepath.Join(p, "cgroup.kill"), []byte("1"), 0); err != nil {
		if b, err := os.ReadFile(filepath.Join(p, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
	}
	_ = os.WriteFile(filepath.Join(p, "freezer.state"), []byte("THAWED"), 0) // v1
	_ = os.WriteFile(filepath.Join(p, "cgroup.freeze"), []byte("0"), 0)      // v2
}

// removeCgroups removes the (now empty) cgroups of dead owners.
func removeCgroups(paths []string) ([]string, error) {
	var removed []string
	var errs []error
	for _, p := range paths {
		if err := rmCgroup(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}

// rmCgroup removes a cgroup directory tree, children first.
func rmCgroup(p string) error {
	entries, _ := os.ReadDir(p)
	for _, e := range entries {
		if e.IsDir() {
			if err := rmCgroup(filepath.Join(p, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing cgroup %q: %w", p, err)
	}
	return nil
}
