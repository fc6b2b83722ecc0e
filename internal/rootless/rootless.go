// Package rootless runs forge as an ordinary user. Such a forge re-executes
// itself once, at start, in a user and mount namespace of its own (the way
// podman does, with go.podman.io/storage/pkg/unshare): there it is root over
// the user's own uid and the user's subordinate range (/etc/subuid and
// /etc/subgid, mapped with newuidmap/newgidmap), which is what
// containers/storage's native overlay and libcontainer need. Sandboxes then
// get blocks of that range, and cgroup limits give way to rlimits where the
// user owns no cgroup.
package rootless

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	"go.podman.io/storage/pkg/unshare"
	"golang.org/x/sys/unix"
)

// envDone marks the re-executed forge (unshare sets it; it also carries
// the user's uid as _CONTAINERS_ROOTLESS_UID, read through unshare).
const envDone = unshare.UsernsEnvName

// Active reports whether this process is a rootless forge inside its own
// user namespace (after Enter re-executed it).
func Active() bool {
	activeOnce.Do(func() {
		active = os.Getenv(envDone) != "" && unshare.GetRootlessUID() != 0 && os.Geteuid() == 0 && !initUserNS()
	})
	return active
}

var (
	activeOnce sync.Once
	active     bool
)

// initUserNS reports whether this process is in the host's user namespace,
// where the variables Active reads mean nothing: a root forge started with
// them set must not take host ids for the user's own.
func initUserNS() bool {
	const initIno = 0xEFFFFFFD // PROC_USER_INIT_INO
	var st unix.Stat_t
	return unix.Stat("/proc/self/ns/user", &st) != nil || st.Ino == initIno
}

// UID is the uid of the user forge runs for: the real uid outside the
// namespace when Active, else the effective uid.
func UID() int {
	if Active() {
		return unshare.GetRootlessUID()
	}
	return os.Geteuid()
}

// Enter re-executes forge as root of a new user namespace when it runs as an
// ordinary user, and never returns then (the process exits with the child's
// status). It returns at once for root and for a process that already is
// the re-executed one. A host on which the namespace cannot be made gets a
// clear error instead of a half-started forge.
func Enter() error {
	if os.Geteuid() == 0 || os.Getenv(envDone) != "" {
		return nil
	}
	if err := CheckUserNamespaces("/proc"); err != nil {
		return err
	}
	sub, err := Subordinate("/etc", UID())
	if err != nil {
		return err
	}
	// unshare writes every mapping through them, also the user's own uid
	// alone (a direct write could not allow setgroups).
	for _, tool := range []string{"newuidmap", "newgidmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s not found; rootless forge maps your uid and subordinate range (%s) with it: install Debian's uidmap package", ErrNoUserNamespace, tool, sub)
		}
	}
	if sub.Size == 0 {
		// unshare warns three times that there is none; forge doctor and
		// the runtime's log say it once, with what it weakens.
		logrus.SetLevel(logrus.ErrorLevel)
	}
	unshare.MaybeReexecUsingUserNamespace(false)
	return nil
}

// ErrNoUserNamespace is returned when an ordinary user's forge cannot make
// the user namespace it needs.
var ErrNoUserNamespace = errors.New("rootless forge needs user namespaces")

// CheckUserNamespaces reports, with what to change, why an ordinary user
// cannot create user namespaces on this host (read under procRoot).
func CheckUserNamespaces(procRoot string) error {
	b, err := os.ReadFile(procRoot + "/sys/user/max_user_namespaces")
	if err == nil {
		if n, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && n == 0 {
			return fmt.Errorf("%w: user namespaces are disabled (sysctl user.max_user_namespaces is 0); set it above 0 (e.g. sysctl -w user.max_user_namespaces=15000) or run forge as root", ErrNoUserNamespace)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: this kernel has no user namespaces (%s/sys/user/max_user_namespaces is missing); run forge as root", ErrNoUserNamespace, procRoot)
	}
	for _, knob := range []string{"kernel/unprivileged_userns_clone", "kernel/apparmor_restrict_unprivileged_userns"} {
		b, err := os.ReadFile(procRoot + "/sys/" + knob)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if (knob == "kernel/unprivileged_userns_clone" && v == "0") || (knob != "kernel/unprivileged_userns_clone" && v == "1") {
			return fmt.Errorf("%w: sysctl %s is %s, which stops ordinary users from creating them; change it or run forge as root",
				ErrNoUserNamespace, strings.ReplaceAll(knob, "/", "."), v)
		}
	}
	return nil
}

// Range is Size ids from Start.
type Range struct{ Start, Size uint32 }

func (r Range) String() string {
	if r.Size == 0 {
		return "none"
	}
	return fmt.Sprintf("%d-%d", r.Start, uint64(r.Start)+uint64(r.Size)-1)
}

// Subordinate is the first subordinate uid range of the user with uid in
// etcDir/subuid (by name or by number), zero when there is none.
func Subordinate(etcDir string, uid int) (Range, error) {
	names := []string{strconv.Itoa(uid)}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		names = append(names, u.Username)
	}
	b, err := os.ReadFile(etcDir + "/subuid")
	if errors.Is(err, os.ErrNotExist) {
		return Range{}, nil
	}
	if err != nil {
		return Range{}, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) != 3 || !contains(names, f[0]) {
			continue
		}
		start, err1 := strconv.ParseUint(f[1], 10, 32)
		size, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 == nil && err2 == nil && size > 0 {
			return Range{Start: uint32(start), Size: uint32(size)}, nil
		}
	}
	return Range{}, sc.Err()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Mapped is what this process's user namespace maps besides its root
// (inside ids 1..Size, read from procRoot/self/uid_map): the user's
// subordinate ids as forge sees them once Active. Zero when only the user's
// own uid is mapped.
func Mapped(procRoot string) (Range, error) {
	b, err := os.ReadFile(procRoot + "/self/uid_map")
	if err != nil {
		return Range{}, err
	}
	var total uint64
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		inside, err1 := strconv.ParseUint(f[0], 10, 32)
		size, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		if inside == total { // contiguous from 0, as Enter maps them
			total += size
		}
	}
	if total <= 1 {
		return Range{}, nil
	}
	return Range{Start: 1, Size: uint32(total - 1)}, nil
}
