package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// A rootless forge whose own cgroup is not delegated asks the user's
// systemd manager for one over D-Bus, the way runc's systemd cgroup driver
// does for a rootless container: a transient scope, forge-<pid>.scope in
// app.slice, with Delegate=yes, holding forge's own process. systemd moves
// the process there and chowns the scope's cgroup to the user, which is
// then the delegated subtree.

// Source says where a rootless forge's limits come from.
type Source string

const (
	// SourceScopeCreated: a transient systemd scope forge asked the user's
	// manager for.
	SourceScopeCreated Source = "systemd scope created"
	// SourceScopeFound: forge already runs in a systemd unit with
	// Delegate=yes (the user unit, systemd-run --user --scope -p Delegate=yes).
	SourceScopeFound Source = "systemd unit found"
	// SourceInherited: forge runs in a delegated cgroup no systemd unit of
	// the user's manages (chowned by an admin or another manager).
	SourceInherited Source = "inherited cgroup"
	// SourceRlimits: no delegated cgroup; the limits are rlimits.
	SourceRlimits Source = "rlimits"
)

// ScopeSlice is the slice of the user's manager forge's scopes go in, as
// for every application a desktop session starts.
const ScopeSlice = "app.slice"

// BusAddress is one place the user's systemd manager may answer.
type BusAddress struct {
	// Address is a D-Bus address ("unix:path=/run/user/1000/bus").
	Address string
	// Direct: systemd's own private socket, a peer-to-peer connection
	// with no bus daemon (no Hello, no destination needed).
	Direct bool
}

// UserBusAddresses are the addresses the user's systemd manager may answer
// at, in the order tried: $DBUS_SESSION_BUS_ADDRESS (the user's choice),
// systemd's private socket $XDG_RUNTIME_DIR/systemd/private (what
// systemctl --user uses; needs no bus daemon), then the user bus
// $XDG_RUNTIME_DIR/bus (dbus-user-session). Sockets that do not exist are
// left out.
func UserBusAddresses(getenv func(string) string) []BusAddress {
	var out []BusAddress
	if a := getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" {
		out = append(out, BusAddress{Address: a})
	}
	if xdg := getenv("XDG_RUNTIME_DIR"); xdg != "" {
		for _, s := range []struct {
			path   string
			direct bool
		}{{filepath.Join(xdg, "systemd", "private"), true}, {filepath.Join(xdg, "bus"), false}} {
			a := "unix:path=" + dbus.EscapeBusAddressValue(s.path)
			if st, err := os.Stat(s.path); err == nil && st.Mode().Type() == os.ModeSocket && (len(out) == 0 || out[0].Address != a) {
				out = append(out, BusAddress{Address: a, Direct: s.direct})
			}
		}
	}
	return out
}

// ErrNoUserManager says that no systemd user manager answered.
var ErrNoUserManager = errors.New("no systemd user manager reachable")

// UserManager is a connection to the user's systemd manager.
type UserManager struct {
	conn *sddbus.Conn
	// Address is where it answered.
	Address string
}

// DialUserManager connects to the manager of the user uid at the first of
// addrs that answers. forge runs as root of a user namespace of its own, so
// it authenticates with the user's real uid, which is what the manager
// sees of it (SO_PEERCRED), not with its own uid 0.
func DialUserManager(ctx context.Context, uid int, addrs []BusAddress) (*UserManager, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: neither $DBUS_SESSION_BUS_ADDRESS nor $XDG_RUNTIME_DIR (with systemd/private or bus in it) is set", ErrNoUserManager)
	}
	var errs []error
	for _, a := range addrs {
		conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return dialBus(ctx, a, uid) })
		if err == nil {
			// A session bus without systemd on it answers Hello but not this.
			if _, err = conn.GetManagerProperty("Version"); err == nil {
				return &UserManager{conn: conn, Address: a.Address}, nil
			}
			conn.Close()
		}
		errs = append(errs, fmt.Errorf("%s: %w", a.Address, err))
	}
	return nil, fmt.Errorf("%w: %w", ErrNoUserManager, errors.Join(errs...))
}

func dialBus(ctx context.Context, a BusAddress, uid int) (*dbus.Conn, error) {
	conn, err := dbus.Dial(a.Address, dbus.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(uid))}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("authenticating as uid %d: %w", uid, err)
	}
	if !a.Direct {
		if err := conn.Hello(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("hello: %w", err)
		}
	}
	return conn, nil
}

// Close closes the connection.
func (m *UserManager) Close() { m.conn.Close() }

// UnitOf is the unit of the manager's that process pid runs in, and
// whether the unit has Delegate=yes. An error: pid is in none of its units.
func (m *UserManager) UnitOf(ctx context.Context, pid int) (string, bool, error) {
	name, err := m.conn.GetUnitNameByPID(ctx, uint32(pid))
	if err != nil {
		return "", false, err
	}
	typ := strings.TrimPrefix(filepath.Ext(name), ".")
	switch typ {
	case "scope", "service", "socket", "mount", "swap":
	default:
		return name, false, nil // a slice delegates nothing
	}
	p, err := m.conn.GetUnitTypePropertyContext(ctx, name, strings.ToUpper(typ[:1])+typ[1:], "Delegate")
	if err != nil {
		return name, false, err
	}
	d, _ := p.Value.Value().(bool)
	return name, d, nil
}

// StartScope makes the transient scope name in slice with Delegate=yes,
// moving process pid into it, and waits for systemd's job to finish.
func (m *UserManager) StartScope(ctx context.Context, name, slice string, pid int) error {
	props := []sddbus.Property{
		sddbus.PropDescription("forge sandboxes (forge pid " + strconv.Itoa(pid) + ")"),
		sddbus.PropSlice(slice),
		sddbus.PropPids(uint32(pid)),
		{Name: "Delegate", Value: dbus.MakeVariant(true)},
	}
	done := make(chan string, 1)
	if _, err := m.conn.StartTransientUnitContext(ctx, name, "fail", props, done); err != nil {
		return fmt.Errorf("creating systemd scope %s: %w", name, err)
	}
	select {
	case s := <-done:
		if s != "done" {
			_ = m.conn.ResetFailedUnitContext(ctx, name)
			return fmt.Errorf("creating systemd scope %s: the job ended %q", name, s)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("creating systemd scope %s: %w", name, ctx.Err())
	}
}
