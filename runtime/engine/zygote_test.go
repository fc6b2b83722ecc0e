package engine_test

import (
	"testing"

	"github.com/mcp-forge/forge/internal/testenv"
)

// TestZygoteMode runs the session, hibernation, execution and code-mode
// tests again with the engine's sandboxes forked from zygote templates: the
// pool, sessions, hibernation and the bridge see a child as they see a
// container. TestSecondPython makes children of the second Python's template
// (Debian 13: another glibc under the C helper).
func TestZygoteMode(t *testing.T) {
	testenv.RunInZygoteMode(t, "^(TestSession.*|TestDocumentStateAndFiles|TestHibernation.*|TestCodeMode.*|TestSecondPython)$", 13)
}
