package kernel

// Limits on what one reply may carry, per operation. The agent clips its own replies to the
// constants in agent.py named beside each one, so an honest agent never reaches them: only a
// forged reply (user code writing to the reply pipe, or replacing a handler) does, and it breaks
// the client. They also bound what the host keeps and writes afterwards (a session's meta.json).
//
// Sizes of strings are in bytes as Go sees them. The agent counts characters: one character is
// at most 4 bytes of UTF-8, and JSON escaping makes at most 6 bytes of a character on the line
// (jsonExpansion).
const (
	// maxNameChars is agent.py's NAME_LIMIT: variable, type and exception names, clipped.
	maxNameChars = 256
	// maxNameBytes is a clipped name in bytes: maxNameChars characters and the "…".
	maxNameBytes = 4 * (maxNameChars + 1)
	// maxErrorTextBytes bounds an error's message and traceback (agent.py ERROR_TEXT_LIMIT,
	// 64 Ki characters, plus "…").
	maxErrorTextBytes = 4 * (64<<10 + 1)
	// maxErrorReply is the line of any ok:false reply: type, message and traceback escaped.
	maxErrorReply = jsonExpansion*(maxNameBytes+2*(64<<10+1)) + 4<<10

	// maxHelloLine bounds the agent's first line: a version, a pid and three module flags.
	maxHelloLine = 64 << 10
	// maxHelloModules bounds the hello's module map (agent.py OPTIONAL_MODULES has three).
	maxHelloModules = 16
	// maxModuleNameBytes bounds a module name in the hello and in warm's imported list.
	maxModuleNameBytes = 256
	// maxPythonVersion bounds hello's "3.11.2".
	maxPythonVersion = 32

	// maxInspectVariables is agent.py's INSPECT_MAX_VARIABLES.
	maxInspectVariables = 1000
	// maxReprBytes is agent.py's INSPECT_REPR_LIMIT (200 characters) plus "…".
	maxReprBytes = 4 * (200 + 1)
	// maxShapeDims is numpy's largest number of dimensions (NPY_MAXDIMS, 64 in numpy 2).
	maxShapeDims = 64
	// maxVariableLine is one inspect entry on the line: three strings escaped, numbers, a shape.
	maxVariableLine = jsonExpansion*(2*maxNameBytes+maxReprBytes) + 21*maxShapeDims + 256

	// maxStateNames is agent.py's STATE_NAMES_LIMIT, per list of pickle_state and restore_state.
	maxStateNames = 1000

	// maxDisplayItems is agent.py's DISPLAY_MAX_ITEMS.
	maxDisplayItems = 1000
	// maxResultBytes bounds an exec's result: agent.py's RESULT_LIMIT (64 KiB) of JSON, or a
	// repr string of as many characters plus "…", escaped.
	maxResultBytes = jsonExpansion*(64<<10+1) + 2

	// maxListFiles is the agent's cap of list_files entries.
	maxListFiles = 1000
	// maxPathBytes bounds a list_files path: a directory path within PATH_MAX plus a name of
	// NAME_MAX; undecodable bytes come back as U+FFFD, 3 bytes each.
	maxPathBytes = 3 * (4096 + 256)

	// defaultReadFileMax is agent.py's read_file limit when max_bytes is 0 (10 MiB).
	defaultReadFileMax = 10 << 20
)

// lineLimit is the longest line a legitimate reply to r can be. awaitLocked refuses longer
// lines before it decodes them, so a forged reply costs at most this much memory.
func lineLimit(r *request) int {
	switch r.Op {
	case "exec":
		return replyOverhead + 2*jsonExpansion*r.OutputLimit
	case "inspect":
		return maxErrorReply + maxInspectVariables*maxVariableLine
	case "warm":
		n := 0
		for _, m := range r.Modules {
			n += jsonExpansion*len(m) + 3
		}
		return maxErrorReply + n
	case "pickle_state", "restore_state":
		return maxErrorReply + 2*maxStateNames*(jsonExpansion*maxNameBytes+3)
	case "read_file":
		n := r.MaxBytes
		if n <= 0 {
			n = defaultReadFileMax
		}
		return maxErrorReply + (n+2)/3*4 + 4<<10
	case "list_files":
		return maxErrorReply + maxListFiles*(jsonExpansion*maxPathBytes+64)
	default: // ping, write_file
		return maxErrorReply
	}
}
