package bridge

import (
	"os/exec"

	"golang.org/x/sys/unix"
)

// processAlive reports whether cmd's process has not exited, without
// reaping it (the transport's Close does that).
func processAlive(cmd *exec.Cmd) bool {
	if cmd == nil || cmd.Process == nil {
		return false
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo == 0
}
