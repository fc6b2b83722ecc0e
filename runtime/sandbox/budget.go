package sandbox

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The kernel counts some objects per user (ucounts, /proc/sys/user): inotify
// instances and watches, fanotify groups and marks, namespaces of each kind.
// One made inside a sandbox is charged to its user in the sandbox's user
// namespace and, up the chain, to the owner of that namespace: host root,
// which forge runs as. Without a limit of its own, one sandbox can spend
// all of root's budget (128 inotify instances by default) and leave the host
// unable to make more. So every sandbox gets a share of each host limit,
// written as a user.* sysctl into its own user namespace.
//
// The limits are per user inside the namespace; code in a sandbox runs as
// one uid without capabilities, so the share is the sandbox's.

// UserLimits are ucount limits by sysctl name below /proc/sys/user
// ("max_inotify_instances": 128).
type UserLimits map[string]int64

// String lists the limits sorted by name: "max_inotify_instances=4 ...".
func (l UserLimits) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, l[k])
	}
	return b.String()
}

// isNamespaceLimit reports whether a ucount counts namespaces.
func isNamespaceLimit(name string) bool { return strings.HasSuffix(name, "_namespaces") }

// ReadUserLimits reads the host's per-user limits below procRoot (/proc):
// every max_* of sys/user. sys/fs/inotify's max_user_instances and
// max_user_watches are the same counters under older names; where they
// differ the smaller wins.
func ReadUserLimits(procRoot string) (UserLimits, error) {
	dir := filepath.Join(procRoot, "sys", "user")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the host's per-user kernel limits: %w", err)
	}
	l := UserLimits{}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "max_") {
			continue
		}
		v, err := readInt(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		l[e.Name()] = v
	}
	for name, alias := range map[string]string{"max_inotify_instances": "max_user_instances", "max_inotify_watches": "max_user_watches"} {
		v, err := readInt(filepath.Join(procRoot, "sys", "fs", "inotify", alias))
		if have, ok := l[name]; ok && err == nil && v < have {
			l[name] = v
		}
	}
	return l, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return v, nil
}

// DefaultBudgetSandboxes sizes the budgets of a runtime whose Options name
// no number of sandboxes (the engine always names one).
const DefaultBudgetSandboxes = 32

// DefaultBudget is the budget of a runtime whose Options leave it zero
// (forge gc, tests): a quarter of each limit kept for the host.
var DefaultBudget = Budget{Sandboxes: DefaultBudgetSandboxes, Reserve: 0.25}

// Budget says how a sandbox's share of the host's per-user kernel limits is sized.
type Budget struct {
	// Sandboxes is the most sandboxes alive at once (sessions, warm pools
	// and executions in flight); each gets 1/Sandboxes of what the reserve
	// leaves. 0 means DefaultBudgetSandboxes.
	Sandboxes int
	// Reserve is the share of each host limit kept for the host's own use,
	// in [0, 1).
	Reserve float64
	// NestedNamespaces is how many namespaces of each kind code in one
	// sandbox may create. Sandboxes need none (seccomp denies unshare
	// anyway), but templates that keep a zygote will need user namespaces.
	NestedNamespaces int64
}

// Validate checks the fields' ranges.
func (b Budget) Validate() error {
	switch {
	case b.Sandboxes < 0:
		return fmt.Errorf("kernel budget for %d sandboxes: must be >= 0: %w", b.Sandboxes, ErrInvalidConfig)
	case math.IsNaN(b.Reserve) || b.Reserve < 0 || b.Reserve >= 1:
		return fmt.Errorf("kernel budget reserve %v: must be in [0, 1): %w", b.Reserve, ErrInvalidConfig)
	case b.NestedNamespaces < 0:
		return fmt.Errorf("kernel budget of %d nested namespaces: must be >= 0: %w", b.NestedNamespaces, ErrInvalidConfig)
	}
	return nil
}

// Among is the number of sandboxes the host's limits are divided among.
func (b Budget) Among() int {
	if b.Sandboxes <= 0 {
		return DefaultBudgetSandboxes
	}
	return b.Sandboxes
}

// Divide returns one sandbox's limits: each host limit less the reserve,
// divided among the sandboxes, at least 1; namespace counts at most
// NestedNamespaces.
func (b Budget) Divide(host UserLimits) UserLimits {
	n := b.Among()
	out := make(UserLimits, len(host))
	for name, v := range host {
		share := max(int64(float64(v)*(1-b.Reserve))/int64(n), 1)
		if isNamespaceLimit(name) {
			share = min(share, b.NestedNamespaces)
		}
		out[name] = share
	}
	return out
}
