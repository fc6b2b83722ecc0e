package kernel

// Limits on what one reply may carry, per operation. The agent clips its own replies to the
// constants of agent.py named beside each one, so an honest agent never reaches them: only a
// forged reply (user code writing to the reply pipe, or replacing a handler) does, and it breaks
// the client. They also bound what the host keeps and writes afterwards (a session's meta.json).
//
// The agent counts characters, the host bytes. On the line a character takes at most 6 bytes
// (jsonExpansion: a control character escaped as \u00XX). Decoded, it takes at most
// maxBytesPerChar: a Python str may hold a lone surrogate, which the agent sends as 3 bytes
// (surrogatepass) that Go decodes as three U+FFFD of 3 bytes each.
const (
	maxBytesPerChar = 9

	// maxNameChars is agent.py's NAME_LIMIT: variable, type and exception names, clipped.
	maxNameChars = 256
	// maxNameBytes is a clipped name decoded: maxNameChars characters and the "…".
	maxNameBytes = maxBytesPerChar * (maxNameChars + 1)
	// maxErrorTextChars is agent.py's ERROR_TEXT_LIMIT (64 Ki characters) plus "…": an
	// error's message and traceback each.
	maxErrorTextChars = 64<<10 + 1
	maxErrorTextBytes = maxBytesPerChar * maxErrorTextChars
	// maxErrorReply is the line of any ok:false reply: type, message and traceback escaped.
	maxErrorReply = jsonExpansion*(maxNameChars+1+2*maxErrorTextChars) + 4<<10

	// maxHelloLine bounds the agent's first line: a version, a pid and three module flags.
	maxHelloLine = 64 << 10
	// maxHelloModules bounds the hello's module map (agent.py OPTIONAL_MODULES has three).
	maxHelloModules = 16
	// maxModuleNameBytes bounds a module name in the hello's map.
	maxModuleNameBytes = 256
	// maxPythonVersion bounds hello's "3.11.2".
	maxPythonVersion = 32

	// maxInspectVariables is agent.py's INSPECT_MAX_VARIABLES.
	maxInspectVariables = 1000
	// maxReprChars is agent.py's INSPECT_REPR_LIMIT (200 characters) plus "…".
	maxReprChars = 200 + 1
	maxReprBytes = maxBytesPerChar * maxReprChars
	// maxShapeDims is numpy's largest number of dimensions (NPY_MAXDIMS, 64 in numpy 2).
	maxShapeDims = 64
	// maxVariableLine is one inspect entry on the line: three strings escaped, numbers, a shape.
	maxVariableLine = jsonExpansion*(2*(maxNameChars+1)+maxReprChars) + 21*maxShapeDims + 256

	// maxStateNames is agent.py's STATE_NAMES_LIMIT, per list of pickle_state and restore_state.
	maxStateNames = 1000

	// maxDisplayItems is agent.py's DISPLAY_MAX_ITEMS.
	maxDisplayItems = 1000
	// maxResultBytes bounds an exec's result: agent.py's RESULT_LIMIT (64 KiB) of JSON, or a
	// repr string of as many characters plus "…", escaped.
	maxResultBytes = jsonExpansion*(64<<10+1) + 2

	// maxListFiles is the agent's cap of list_files entries.
	maxListFiles = 1000
	// maxPathChars bounds a list_files path: os.walk lists no directory whose path passes
	// PATH_MAX, and a name in it is at most NAME_MAX.
	maxPathChars = 4096 + 256
	maxPathBytes = maxBytesPerChar * maxPathChars

	// maxStreamChunk is agent.py's STREAM_CHUNK_LIMIT: bytes of each stream per "output" line
	// (decoded, each byte takes at most 3: U+FFFD).
	maxStreamChunk = 16 << 10
	// maxStreamLine is an "output" line: both chunks escaped, an id and a count.
	maxStreamLine = 2*jsonExpansion*maxStreamChunk + 256

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
		return maxErrorReply + 2*maxStateNames*(jsonExpansion*(maxNameChars+1)+3)
	case "read_file":
		n := r.MaxBytes
		if n <= 0 {
			n = defaultReadFileMax
		}
		return maxErrorReply + (n+2)/3*4 + 4<<10
	case "list_files":
		return maxErrorReply + maxListFiles*(jsonExpansion*maxPathChars+64)
	default: // ping, write_file
		return maxErrorReply
	}
}
