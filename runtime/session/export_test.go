package session

import "time"

// SetSettleDelay makes m pause a session's sandbox d after each call
// instead of settleDelay.
func SetSettleDelay(m *Manager, d time.Duration) { m.settleDelay = d }

// MetaOnDisk reads what meta.json of owner's session id holds now.
func MetaOnDisk(m *Manager, owner, id string) (*Meta, error) { return readMeta(m.dir(key{owner, id})) }
