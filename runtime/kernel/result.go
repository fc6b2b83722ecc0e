package kernel

import "time"

// Result is the ExecutionResult of DESIGN.md. Exec fills the fields the agent knows; the host
// fills ExitCode, TimedOut, OOMKilled, ExecutionTimeMS, MemoryPeakBytes and SessionID.
type Result struct {
	Success bool   `json:"success"`
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	// Result is the value of the cell's last expression: a JSON value (numbers as
	// json.Number, so big integers stay exact) when it was made only of JSON types, else its
	// repr as a string; nil when there was no expression or it was None.
	Result          any        `json:"result"`
	Display         []Display  `json:"display"`
	Error           *ExecError `json:"error"`
	ExitCode        int        `json:"exit_code"`
	TimedOut        bool       `json:"timed_out"`
	OOMKilled       bool       `json:"oom_killed"`
	Truncated       bool       `json:"truncated"`
	ExecutionTimeMS float64    `json:"execution_time_ms"`
	MemoryPeakBytes uint64     `json:"memory_peak_bytes"`
	SessionID       *string    `json:"session_id"`
	// Notes are what the host has to say about the run beyond the code's
	// own output: a session restored or lost, for instance.
	Notes []string `json:"notes,omitempty"`
	// Variables is how many user variables the namespace holds afterwards
	// (for a session's listing; not part of the ExecutionResult).
	Variables int `json:"-"`
	// Groups tell which Display items each shown object made (display()
	// arguments, figures, the cell's value); not part of the
	// ExecutionResult (the E2B face reads them).
	Groups []DisplayGroup `json:"-"`
}

// DisplayGroup is the Display items of one shown object: from First to
// the next group's First. Main: the cell's last expression.
type DisplayGroup struct {
	First int
	Main  bool
}

// Display is one rich output item; images are base64.
type Display struct {
	MimeType string `json:"mime_type"`
	Data     string `json:"data"`
}

// ExecError is an exception raised by the user's code. Traceback line numbers refer to the
// submitted code (File "<cell>"); Line and Column are set for syntax errors.
type ExecError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
	Line      int    `json:"line,omitempty"`
	Column    int    `json:"column,omitempty"`
}

// Hello is the agent's first line.
type Hello struct {
	Python  string          `json:"python"`
	PID     int             `json:"pid"`
	Modules map[string]bool `json:"modules"`
	// StrayFDs counts the descriptors beyond stdio and the protocol pipes that the agent
	// found open at start (and closed before any user code ran). The launcher passes none
	// through to the agent, so anything here is a leak worth a warning.
	StrayFDs int `json:"stray_fds"`
}

// Variable describes one user variable of a session's namespace.
type Variable struct {
	Name string `json:"name"`
	// Type is the qualified type name ("int", "numpy.ndarray", "function").
	Type string `json:"type"`
	// Kind is "value", "function" or "class".
	Kind      string `json:"kind"`
	SizeBytes int64  `json:"size_bytes"`
	Shape     []int  `json:"shape,omitempty"`
	Length    *int   `json:"length,omitempty"`
	Repr      string `json:"repr"`
}

// ExecRequest is one cell to run.
type ExecRequest struct {
	Code string
	// OutputLimit caps stdout and stderr each, in bytes; 0 means DefaultOutputLimit.
	OutputLimit int
	// WarmImports are modules to import before the code runs (not bound to names).
	WarmImports []string
	// Interrupt, if set, is called when ctx expires (it should send SIGINT to the agent
	// process); Exec then waits up to InterruptGrace for the interrupted cell's reply, so a
	// session keeps its namespace and the caller gets the partial output.
	Interrupt      func() error
	InterruptGrace time.Duration
	// OnOutput, if set, receives the output of the running code about every StreamInterval
	// (default DefaultStreamInterval, at least 50 ms), from the client's goroutine: it must
	// not block.
	OnOutput       func(Output)
	StreamInterval time.Duration
}

// Output is what a running exec wrote since its last Output (ExecRequest.OnOutput): at most
// 16 KiB of each stream; when more came, the newest, with Skipped counting the bytes left out.
// The Result still carries all the output.
type Output struct {
	Stdout, Stderr string
	Skipped        int64
}

// StateReport is the reply of PickleState and RestoreState.
type StateReport struct {
	Saved    []string `json:"saved"`
	Restored []string `json:"restored"`
	Failed   []string `json:"failed"`
}
