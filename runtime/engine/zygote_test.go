package engine_test

import (
	"testing"

	"github.com/mcp-forge/forge/internal/testenv"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// TestContainerMode runs the session, hibernation, execution, code-mode and
// outside-attack tests again with the engine's sandboxes made as containers
// (sandbox.mode: container), as the rest of the suite runs in zygote mode,
// the default: the pool, sessions, hibernation and the bridge see a child as
// they see a container. TestSecondPython runs both of its images (Debian 13:
// another glibc under zygote mode's C helper).
func TestContainerMode(t *testing.T) {
	testenv.RunInMode(t, sandbox.ModeContainer, "^(TestSession.*|TestDocumentStateAndFiles|TestHibernation.*|TestCodeMode.*|TestSecondPython|TestOtherLocalUser)$", 14)
}
