package hello

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcp-forge/forge/profiles"
)

// Instructions is the server's initialize.instructions: how an agent gets
// the most out of forge, with the limits of this configuration.
func Instructions(cfg *profiles.Config) string {
	x := cfg.Execution
	var b strings.Builder
	b.WriteString(`forge runs Python 3 in isolated sandboxes. Use execute_python whenever computing is more reliable than reasoning: arithmetic, data analysis, parsing, simulations, checking code.

How it behaves:
- Stateless by default: a call without session_id starts a fresh interpreter with nothing left over from earlier calls; put all imports, data and helpers it needs into the same call. Best for one-off computations.
- Sessions for step-by-step work: pass the same session_id (any name you choose, e.g. "analysis") on every call and variables, imports, functions and files in /workspace persist, like notebook cells. Load data once, then inspect, transform and plot it in later calls. Use write_file/read_file to put files into /workspace and get results (CSV, PNG) back, document_state to write down what the variables hold (read back from forge://sessions/{id}/state), list_sessions to see them, destroy_session when done. A timeout interrupts the code but keeps the session's variables; running out of memory loses the session (the reply says so). Idle sessions are saved to disk and come back on their next call.
- No network: the sandbox cannot download packages or data and cannot reach any host. Put small data inline in the code or write it with write_file. The filesystem is read-only except /tmp and /workspace.
- Code mode: forge://tools/available lists tools of other MCP servers that code can call as Python functions when you name them in mcp_tools; loop and filter in Python and return only what matters.
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
	eb := cfg.EnvironmentBuilder
	if eb.Enabled {
		b.WriteString("\nCustom environments: when you need a package the images lack, call build_custom_environment once with a name and PEP 508 requirements (checked against forge's package policy; a refusal says which setting decides). Then pass that name as execute_python's custom_image, in stateless calls and in sessions. The same packages again are a cache hit. ")
	}
	if len(eb.Presets) > 0 {
		names := slices.Sorted(maps.Keys(eb.Presets))
		fmt.Fprintf(&b, "\nPresets, named package lists (argument environment): %s; forge://environments/list shows their packages.", strings.Join(names, ", "))
		if eb.Enabled {
			b.WriteString(" The first call with a preset builds it, which takes a while.")
		}
		b.WriteString("\n")
	}
	return b.String()
}
