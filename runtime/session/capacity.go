package session

import "fmt"

// NewSessionRoom is the room forge's parent cgroup must have left for a
// session to get a sandbox: about five sessions' worth (one costs a few
// MiB once it holds data), plus what its first call may allocate before
// anything could refuse it. Below it a new session is refused at once,
// naming the limit, instead of a sandbox start that waits on a full
// cgroup (template starts timing out in a loop) while live sessions
// starve.
const NewSessionRoom = 48 << 20

// room refuses a sandbox when the parent cgroup is nearly full.
func (m *Manager) room() error {
	if m.opts.Headroom == nil {
		return nil
	}
	free, ok := m.opts.Headroom()
	if !ok || free >= NewSessionRoom {
		return nil
	}
	return fmt.Errorf("%w: forge's parent cgroup has %d MiB of memory left, a new session needs %d MiB (limits.memory; limits.cgroup_parent names the cgroup); live sessions keep running: destroy one with destroy_session or raise limits.memory",
		ErrLimit, max(free, 0)>>20, NewSessionRoom>>20)
}
