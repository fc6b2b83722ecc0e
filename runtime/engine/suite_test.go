package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/test/testenv"
	"github.com/mcp-forge/forge/test/testutil"
)

// The second Python (Debian 13's, `forge image bootstrap --suite trixie`)
// runs stateless code and sessions like the default one: the agent is
// stdlib only and is compiled per image.
func TestSecondPython(t *testing.T) {
	eng := testenv.Engine(t, false, nil)
	layout := testutil.BaseImageLayout(t, testenv.TrixieImage)
	if _, err := eng.Store().Pull(context.Background(), "oci:"+layout); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Image: testenv.TrixieImage,
		Code: "import sys\nprint(sys.version_info[:2])\n'%d.%d' % sys.version_info[:2]"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || strings.TrimSpace(res.Stdout) != "(3, 13)" || fmt.Sprint(res.Result) != "3.13" {
		t.Fatalf("stateless run on %s: %+v", testenv.TrixieImage, res)
	}
	first, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, Image: testenv.TrixieImage, NewSession: true, Code: "x = 41"})
	if err != nil || !first.Success || first.SessionID == nil {
		t.Fatalf("session start: %+v %v", first, err)
	}
	defer eng.DestroySession(ctx, engine.LocalPrincipal, *first.SessionID)
	next, err := eng.Execute(ctx, engine.Request{Principal: engine.LocalPrincipal, SessionID: *first.SessionID, Code: "import sys\n[x + 1, sys.version_info[1]]"})
	if err != nil || !next.Success || fmt.Sprint(next.Result) != "[42 13]" {
		t.Fatalf("session call: %+v %v", next, err)
	}
}
