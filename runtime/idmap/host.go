package idmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CheckHost reports every subordinate range (etcDir/subuid, subgid) and
// every account (the uids of passwd, the gids of passwd and group) that
// lies inside reserved, as *OverlapError values joined. Missing files have
// nothing in them; a malformed subordinate line is an error, since forge
// cannot tell what newuidmap would make of it.
func CheckHost(reserved Range, etcDir string) error {
	var errs []error
	for _, name := range []string{"subuid", "subgid"} {
		errs = append(errs, checkFile(reserved, filepath.Join(etcDir, name), subordinate))
	}
	for _, name := range []string{"passwd", "group"} {
		errs = append(errs, checkFile(reserved, filepath.Join(etcDir, name), account))
	}
	return errors.Join(errs...)
}

// entry is what one line of a host file claims: a range, or an id as a
// range of one, and whose it is.
type entry struct {
	owner string
	r     []Range
}

// subordinate parses "name:start:count" (/etc/subuid, /etc/subgid).
func subordinate(line string) (entry, error) {
	f := strings.Split(line, ":")
	if len(f) != 3 {
		return entry{}, errors.New("want name:start:count")
	}
	start, err1 := strconv.ParseUint(f[1], 10, 32)
	count, err2 := strconv.ParseUint(f[2], 10, 32)
	if err1 != nil || err2 != nil {
		return entry{}, errors.New("start and count must be numbers")
	}
	r := Range{Start: uint32(start), Size: uint32(count)}
	if r.end() > 1<<32 { // a range past the end still claims up to it
		r.Size = uint32(1<<32 - uint64(r.Start))
	}
	return entry{owner: f[0], r: []Range{r}}, nil
}

// account parses /etc/passwd (uid and primary gid) and /etc/group (gid)
// lines; a line that is not an account (NIS "+" entries) claims nothing.
func account(line string) (entry, error) {
	f := strings.Split(line, ":")
	if len(f) < 3 {
		return entry{}, nil
	}
	e := entry{owner: f[0]}
	for _, s := range f[2:min(len(f), 4)] {
		if id, err := strconv.ParseUint(s, 10, 32); err == nil {
			e.r = append(e.r, Range{Start: uint32(id), Size: 1})
		}
	}
	return e, nil
}

func checkFile(reserved Range, path string, parse func(string) (entry, error)) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := parse(line)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", path, n, err))
			continue
		}
		for _, r := range e.r {
			if r.Overlaps(reserved) {
				errs = append(errs, &OverlapError{Reserved: reserved, Other: r, Source: fmt.Sprintf("%s:%d", path, n), Owner: e.owner})
			}
		}
	}
	return errors.Join(append(errs, sc.Err())...)
}

// scanProc collects the uids and gids (real, effective, saved, fs) inside
// reserved of every process under procDir, sorted. Threads share their
// process's ids in a sandbox: its user has no capability to differ.
func scanProc(procDir string, reserved Range) (*procIDs, error) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, fmt.Errorf("scanning processes: %w", err)
	}
	out := &procIDs{}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if k == "State" && strings.HasPrefix(strings.TrimSpace(v), "Z") {
				// A zombie runs nothing and cannot be signalled into
				// doing anything: the init of a killed forge's sandbox
				// stays one until the host's PID 1 reaps it.
				break
			}
			if !ok || (k != "Uid" && k != "Gid") {
				continue
			}
			for _, s := range strings.Fields(v) {
				if id, err := strconv.ParseUint(s, 10, 32); err == nil && reserved.Contains(uint32(id)) {
					out.ids = append(out.ids, uint32(id))
				}
			}
		}
	}
	slices.Sort(out.ids)
	return out, nil
}

// joinGeometry makes sure every allocator on this state dir cuts the same
// blocks from the same range: each holds a shared lock on geometry.lock
// while open, and the one that finds itself alone may set a new geometry
// in "geometry" (after checking that no lease of the old one is in use).
func (a *Allocator) joinGeometry() error {
	fd, err := unix.Open(filepath.Join(a.dir, "geometry.lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("opening %s: %w", a.dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	want := fmt.Sprintf("%d %d %d\n", a.reserved.Start, a.reserved.Size, a.block)
	path := filepath.Join(a.dir, "geometry")
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
		if have, _ := os.ReadFile(path); string(have) != want {
			if err := a.dropForeignLeases(); err != nil {
				return err
			}
			if err := writeFileAtomic(path, []byte(want)); err != nil {
				return err
			}
		}
	}
	// Not atomic with the exclusive lock above: read the geometry again
	// once shared, in case another process set its own in between.
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		return fmt.Errorf("locking %s: %w", a.dir, err)
	}
	have, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if string(have) != want {
		return fmt.Errorf("%w: another forge process on %s uses range/block %q, this one %s with blocks of %d (%s and security.uid_map_size must be the same for every forge process on one state dir)",
			ErrGeometry, a.dir, strings.TrimSpace(string(have)), a.reserved, a.block, Settings)
	}
	a.geo, ok = fd, true
	return nil
}

// dropForeignLeases removes the leases (of dead processes: the caller is
// alone) that are not blocks of a's geometry, once nothing runs in them.
func (a *Allocator) dropForeignLeases() error {
	infos, err := os.ReadDir(a.dir)
	if err != nil {
		return err
	}
	var scan *procIDs
	for _, e := range infos {
		start, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		path := filepath.Join(a.dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		info, ok := parseLease(b)
		if !ok || !info.Live {
			os.Remove(path) // free, or never written: nothing runs under it
			continue
		}
		mine := a.reserved.Contains(uint32(start)) && (uint32(start)-a.reserved.Start)%a.block == 0 && info.Range.Size == a.block
		if mine {
			continue
		}
		if ok, err := a.unused(info.Range, &scan); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: processes still run with host ids in %s, leased under an earlier range setting; stop them (forge gc) or keep the earlier %s", ErrGeometry, info.Range, Settings)
		}
		os.Remove(path)
	}
	return nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
