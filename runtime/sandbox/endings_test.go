package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
)

// TestRunEndings: every way a run can end has its own error type, and the flags say only what
// happened (issue 11: an OOM kill used to come back as a timeout).
func TestRunEndings(t *testing.T) {
	small := cgroups.Limits{MemoryBytes: 64 << 20, CPUs: 1, Pids: 32}
	tests := []struct {
		name, code string
		timeout    time.Duration
		lim        cgroups.Limits
		wantType   string
		timedOut   bool
		oom        bool
		exitCode   int
		message    string
	}{
		{"timeout", "while True: pass", time.Second, defaultLimits, sandbox.ErrTypeTimeout, true, false, 137, "time limit of 1s"},
		{"memory bomb", "x = []\nwhile True: x.append(bytearray(8 << 20))", 30 * time.Second, small, sandbox.ErrTypeOutOfMemory, false, true, 137, "ran out of memory"},
		{"SIGKILL of itself", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", 30 * time.Second, defaultLimits, sandbox.ErrTypeSignal, false, false, 137, "signal 9 (SIGKILL)"},
		{"SIGSEGV", "import ctypes\nctypes.string_at(0)", 30 * time.Second, defaultLimits, sandbox.ErrTypeSignal, false, false, 139, "SIGSEGV"},
		{"os._exit", "import os\nos._exit(3)", 30 * time.Second, defaultLimits, sandbox.ErrTypeExited, false, false, 3, "status 3"},
		{"fork bomb", "import os, time\nfor _ in range(10000):\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)", 30 * time.Second, small, sandbox.ErrTypeProcessLimit, false, false, 1, "process limit (32"},
		{"thread bomb", "import threading, time\nfor _ in range(10000):\n    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()", 30 * time.Second, small, sandbox.ErrTypeProcessLimit, false, false, 1, "process limit (32"},
		{"forged reply", "g = display.__globals__\ng['_replies'].write(b'{\"id\": 1, \"ok\": true, \"stdout\": 5}\\n')\ng['_replies'].flush()\nimport time\ntime.sleep(5)", 30 * time.Second, defaultLimits, sandbox.ErrTypeProtocol, false, false, 137, "breaks forge's protocol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			r := run(t, tt.code, tt.timeout, tt.lim)
			if r.Error == nil || r.Error.Type != tt.wantType || r.Success {
				t.Fatalf("error %+v success %v, want type %s", r.Error, r.Success, tt.wantType)
			}
			if r.TimedOut != tt.timedOut || r.OOMKilled != tt.oom || r.ExitCode != tt.exitCode {
				t.Errorf("timed_out %v oom_killed %v exit_code %d, want %v %v %d", r.TimedOut, r.OOMKilled, r.ExitCode, tt.timedOut, tt.oom, tt.exitCode)
			}
			if !strings.Contains(r.Error.Message, tt.message) {
				t.Errorf("message %q, want it to say %q", r.Error.Message, tt.message)
			}
			if !tt.timedOut && time.Since(start) > tt.timeout/2 {
				t.Errorf("took %s: the end was not noticed until near the time limit", time.Since(start))
			}
		})
	}
}

// TestCaughtPidsLimitIsNoError: code that handles the refused fork itself succeeds.
func TestCaughtPidsLimitIsNoError(t *testing.T) {
	r := run(t, "import os, time\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\nexcept OSError:\n    pass", 30*time.Second, cgroups.Limits{MemoryBytes: 64 << 20, CPUs: 1, Pids: 16})
	if !r.Success || r.Error != nil {
		t.Errorf("success %v error %+v, want success", r.Success, r.Error)
	}
}

// TestKilledFromOutside: a signal from the host to the agent is reported as a signal, not as
// a limit, and the session-facing reason says so.
func TestKilledFromOutside(t *testing.T) {
	sb := start(t, sandbox.Config{Limits: defaultLimits})
	done := make(chan *kernel.Result, 1)
	go func() {
		r, err := sb.Exec(context.Background(), "import time\ntime.sleep(60)", sandbox.ExecOptions{Timeout: 60 * time.Second})
		if err != nil {
			t.Errorf("Exec: %v", err)
		}
		done <- r
	}()
	agent := agentHostPid(t, sb)
	// Whether the cell has started or not, the agent dies of the signal.
	if err := syscall.Kill(agent, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r == nil {
		return
	}
	if r.Error == nil || r.Error.Type != sandbox.ErrTypeSignal || r.TimedOut || r.OOMKilled || r.ExitCode != 128+15 {
		t.Errorf("error %+v timed_out %v oom %v exit %d, want %s and exit 143", r.Error, r.TimedOut, r.OOMKilled, r.ExitCode, sandbox.ErrTypeSignal)
	}
	if why := sb.DeathReason(); !strings.Contains(why, "SIGTERM") {
		t.Errorf("death reason %q, want it to name SIGTERM", why)
	}
}

// agentHostPid finds the host pid of the agent: the child of the sandbox's init.
func agentHostPid(t *testing.T, sb *sandbox.Sandbox) int {
	t.Helper()
	kids := strings.Fields(readFile(fmt.Sprintf("/proc/%d/task/%d/children", sb.Pid(), sb.Pid())))
	if len(kids) == 0 {
		t.Fatalf("init %d has no children", sb.Pid())
	}
	pid, err := strconv.Atoi(kids[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
