package sandbox

import (
	"log/slog"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FilesPerSandbox is how many descriptors forge keeps open for one live
// sandbox, with room: the agent's two sockets, its stderr, the cgroup
// files it reads, the lease of its host ids (measured: 20,000 descriptors
// ran out at 3,958 live sessions, 5 each).
const FilesPerSandbox = 8

// filesBase is what forge keeps open besides its sandboxes (listeners,
// the image store, logs, templates), with room.
const filesBase = 1024

// nrOpenFile is the kernel's bound on any process's RLIMIT_NOFILE.
var nrOpenFile = "/proc/sys/fs/nr_open"

// OpenFilesFor is the RLIMIT_NOFILE that sandboxes live sandboxes need.
func OpenFilesFor(sandboxes int) uint64 {
	return uint64(max(sandboxes, 0))*FilesPerSandbox + filesBase
}

// OpenFilesReach is the RLIMIT_NOFILE forge can give itself here for
// need: the hard limit, or up to the kernel's fs.nr_open when it may
// raise that (root: CAP_SYS_RESOURCE).
func OpenFilesReach(need uint64) uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Max >= need || os.Geteuid() != 0 {
		return min(lim.Max, max(need, lim.Cur))
	}
	if b, err := os.ReadFile(nrOpenFile); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return max(lim.Max, min(need, n))
		}
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
