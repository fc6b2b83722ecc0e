package sandbox

import (
	"log/slog"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FilesPerSandbox is how many descriptors forge keeps open for one live
// session: its agent's socket (a zygote child's requests and replies),
// its stderr pipe, the session's lock and the lease of its host id block
// (its template's, one per slot). Measured at 500 sessions: 4.45 each,
// templates not yet full; with two pipes for the agent, 20,000
// descriptors ran out at the 3,958th.
const FilesPerSandbox = 4

// filesBase is what forge keeps open besides its sandboxes (listeners,
// the image store, logs), with room.
const filesBase = 512

// nrOpenFile is the kernel's bound on any process's RLIMIT_NOFILE.
var nrOpenFile = "/proc/sys/fs/nr_open"

// OpenFilesFor is the RLIMIT_NOFILE that sandboxes live sandboxes need.
func OpenFilesFor(sandboxes int) uint64 {
	return uint64(max(sandboxes, 0))*FilesPerSandbox + filesBase
}

// OpenFilesReach is the RLIMIT_NOFILE forge can give itself here for
// need: the hard limit, or up to the kernel's fs.nr_open when it may
// raise that (CAP_SYS_RESOURCE, which root does not always have: a
// container's, or this VM's, lacks it).
func OpenFilesReach(need uint64) uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Max >= need || !mayRaiseHardLimits() {
		return min(lim.Max, max(need, lim.Cur))
	}
	if n, err := readInt(nrOpenFile); err == nil && n > 0 {
		return max(lim.Max, min(need, uint64(n)))
	}
	return lim.Max
}

// raiseOpenFiles raises forge's RLIMIT_NOFILE so that sandboxes live
// sandboxes do not run out of descriptors (too many open files, at the
// 3,958th session of 20,000), as far as it may, and says so when that is
// not far enough. Children forge starts get their own limits (1024 in a
// sandbox: the spec's and the fork request's).
func raiseOpenFiles(sandboxes int, log *slog.Logger) {
	need := OpenFilesFor(sandboxes)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur >= need {
		return
	}
	reach := OpenFilesReach(need)
	if reach > lim.Cur {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: reach, Max: max(reach, lim.Max)}); err != nil {
			log.Warn("raising the open files limit", "from", lim.Cur, "to", reach, "err", err)
			reach = lim.Cur
		}
	}
	if reach < need {
		log.Warn("the open files limit holds fewer live sandboxes than configured: raise it (ulimit -n, LimitNOFILE=)",
			"limit", reach, "sandboxes", sandboxes, "holds", (reach-min(reach, filesBase))/FilesPerSandbox, "need", need)
	} else {
		log.Debug("open files limit raised", "from", lim.Cur, "to", reach, "sandboxes", sandboxes)
	}
}

// capSysResource is CAP_SYS_RESOURCE's bit in a capability set.
const capSysResource = 24

// mayRaiseHardLimits reports whether forge's effective capabilities hold
// CAP_SYS_RESOURCE (read from /proc/self/status), which raising a hard
// rlimit takes.
func mayRaiseHardLimits() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<capSysResource) != 0
		}
	}
	return false
}
