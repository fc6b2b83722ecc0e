package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/test/testenv"
)

// hostUID is the host uid that uid 0 of the session's user namespace maps
// to, read inside the sandbox from its own uid_map.
const hostUID = "open('/proc/self/uid_map').read().split()[1]"

// TestForkSession: a fork has the source's variables and files, in a
// sandbox of its own (another host uid block); the two then diverge; what
// cannot be pickled (a socket, a generator) is listed; an unknown id, an id
// of another principal and a taken new id are refused.
func TestForkSession(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	ctx := context.Background()
	src := uniqueID(t, eng, "fork-src")
	dst := uniqueID(t, eng, "fork-dst")
	call(t, eng, src, "import socket, json\nx = 41\nrows = [1, 2, 3]\n"+
		"sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ngen = (i for i in range(3))\n"+
		"open('/workspace/data.txt', 'w').write('from the source')")
	f, err := eng.ForkSession(ctx, engine.LocalPrincipal, src, dst)
	if err != nil {
		t.Fatalf("ForkSession: %v", err)
	}
	if f.SessionID != dst || f.Source != src || f.WorkspaceBytes != int64(len("from the source")) {
		t.Errorf("fork reply %+v, want %s from %s", f, dst, src)
	}
	slices.Sort(f.Uncopied)
	if !slices.Equal(f.Uncopied, []string{"gen", "sock"}) {
		t.Errorf("uncopied %v, want [gen sock]", f.Uncopied)
	}
	for _, v := range []string{"x", "rows"} {
		if !slices.Contains(f.Copied, v) {
			t.Errorf("copied %v lacks %s", f.Copied, v)
		}
	}
	if r := call(t, eng, dst, "[x, rows, open('/workspace/data.txt').read(), json.dumps(1)]"); fmt.Sprint(r.Result) != "[41 [1 2 3] from the source 1]" {
		t.Errorf("in the fork: %v (error %+v)", r.Result, r.Error)
	}
	// Diverge: each side changes its own copy only.
	call(t, eng, dst, "x = 'fork'\nopen('/workspace/data.txt', 'w').write('changed in the fork')")
	call(t, eng, src, "rows.append(4)")
	if r := call(t, eng, src, "[x, rows, open('/workspace/data.txt').read(), sock.family.name]"); fmt.Sprint(r.Result) != "[41 [1 2 3 4] from the source AF_INET]" {
		t.Errorf("source after the fork diverged: %v (error %+v)", r.Result, r.Error)
	}
	if r := call(t, eng, dst, "[x, rows, open('/workspace/data.txt').read()]"); fmt.Sprint(r.Result) != "[fork [1 2 3] changed in the fork]" {
		t.Errorf("fork after the source diverged: %v (error %+v)", r.Result, r.Error)
	}
	if list, err := eng.ListSessions(ctx, engine.LocalPrincipal); err != nil || !slices.ContainsFunc(list, func(i session.Info) bool { return i.ID == dst }) {
		t.Errorf("the caller's sessions %+v (%v) lack the fork %s", list, err, dst)
	}
	a, b := call(t, eng, src, hostUID).Result, call(t, eng, dst, hostUID).Result
	if a == nil || a == b {
		t.Errorf("host uid of source %v and fork %v: want two blocks", a, b)
	}
	// A generated id when none is given.
	g, err := eng.ForkSession(ctx, engine.LocalPrincipal, src, "")
	if err != nil || !strings.HasPrefix(g.SessionID, "s-") {
		t.Fatalf("fork without a new id: %+v %v", g, err)
	}
	eng.DestroySession(ctx, engine.LocalPrincipal, g.SessionID)

	refused := func(what string, err error, kind engine.RefusalKind) string {
		t.Helper()
		var r *engine.RefusedError
		if !errors.As(err, &r) || r.Kind != kind {
			t.Errorf("%s: got %v, want a %s refusal", what, err, kind)
			return ""
		}
		return err.Error()
	}
	refused("new id taken", func() error { _, err := eng.ForkSession(ctx, engine.LocalPrincipal, src, dst); return err }(), engine.RefusedInvalid)
	unknown := refused("unknown source", func() error {
		_, err := eng.ForkSession(ctx, engine.LocalPrincipal, "never-made", "fork-x")
		return err
	}(), engine.RefusedNotFound)
	bob := engine.Principal{Tenant: "bob"}
	theirs := refused("another principal's source", func() error {
		_, err := eng.ForkSession(ctx, bob, src, "fork-x")
		return err
	}(), engine.RefusedNotFound)
	if strings.ReplaceAll(theirs, src, "ID") != strings.ReplaceAll(unknown, "never-made", "ID") {
		t.Errorf("another principal's session answers %q, an unknown one %q: want the same", theirs, unknown)
	}
	if list, _ := eng.ListSessions(ctx, bob); len(list) != 0 {
		t.Errorf("bob's refused fork left sessions: %+v", list)
	}
}

// A hibernated source is brought back to be forked; both then have its
// variables and files.
func TestForkHibernatedSession(t *testing.T) {
	eng, _ := hibernatingEngine(t)
	ctx := context.Background()
	src := uniqueID(t, eng, "fork-hib")
	dst := uniqueID(t, eng, "fork-hib-dst")
	call(t, eng, src, "x = 41\nopen('/workspace/f.txt', 'w').write('kept')")
	waitStatus(t, eng, src, session.Hibernated, 30*time.Second)
	if _, err := eng.ForkSession(ctx, engine.LocalPrincipal, src, dst); err != nil {
		t.Fatalf("ForkSession of a hibernated session: %v", err)
	}
	for _, id := range []string{src, dst} {
		if r := call(t, eng, id, "[x, open('/workspace/f.txt').read()]"); fmt.Sprint(r.Result) != "[41 kept]" {
			t.Errorf("%s: %v (error %+v)", id, r.Result, r.Error)
		}
	}
}
