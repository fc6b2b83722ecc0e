package server

import (
	"fmt"
	"strings"

	"github.com/mcp-forge/forge/profiles"
)

// instructions is the server's initialize.instructions: how an agent gets
// the most out of forge, with the limits of this configuration.
func instructions(cfg *profiles.Config) string {
	x := cfg.Execution
	var b strings.Builder
	b.WriteString(`forge runs Python 3 in isolated sandboxes. Use execute_python whenever computing is more reliable than reasoning: arithmetic, data analysis, parsing, simulations, checking code.

How it behaves:
- Stateless: every call starts a fresh interpreter with nothing left over from earlier calls. Put all imports, data and helper definitions the code needs into the same call. (Sessions, which keep variables between calls, are not available in this build; calls with session_id fail.)
- No network: the sandbox cannot download packages or data and cannot reach any host. Put small data inline in the code. The filesystem is read-only except /tmp, which is emptied after the call.
- Output: stdout and stderr come back as text. The value of the last line, if it is an expression, comes back as "result" (its JSON value, or its repr), like in a notebook. Exceptions come back with the traceback (line numbers match your code) and the call is marked as an error: read the traceback, fix the code and call again.
- Plots: matplotlib figures are captured automatically and returned as images, no plt.show() or savefig needed; display(obj) returns rich output (images, HTML, SVG) explicitly. Use the data image for numpy, pandas and matplotlib.
- Data: print summaries (df.describe(), df.head(), len(...)) rather than whole data sets; output beyond the limit is cut and flagged as truncated. Return structured results as the last expression (a dict or list) so they arrive as JSON.
`)
	fmt.Fprintf(&b, "\nLimits in force (a call may ask for less, never more):\n")
	fmt.Fprintf(&b, "- timeout: %s by default, at most %s (argument timeout, in seconds)\n", x.DefaultTimeout, x.MaxTimeout)
	fmt.Fprintf(&b, "- memory: %s by default, at most %s (argument memory, e.g. \"1g\")\n", x.DefaultMemory, x.MaxMemory)
	fmt.Fprintf(&b, "- CPUs: %g by default, at most %g; processes/threads: at most %d\n", x.DefaultCPUs, x.MaxCPUs, x.MaxPids)
	fmt.Fprintf(&b, "- code size: at most %s; stdout and stderr: %s each\n", x.MaxCodeSize, x.OutputLimit)
	fmt.Fprintf(&b, "\nImages (argument custom_image): %q by default", cfg.Images.Default)
	if cfg.Images.Data != "" {
		fmt.Fprintf(&b, "; %q adds numpy, pandas and matplotlib", cfg.Images.Data)
	}
	fmt.Fprintf(&b, ". Allowed: %s. The resource forge://environments/list lists the images present with their Python version and packages; forge://environment/info shows the limits and host features.\n", strings.Join(cfg.Images.AllowedPatterns, ", "))
	return b.String()
}
