package kernel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// collector gathers streamed output the way a caller must: without blocking.
type collector struct {
	mu     sync.Mutex
	chunks []Output
	at     []time.Time
}

func (c *collector) add(o Output) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chunks = append(c.chunks, o)
	c.at = append(c.at, time.Now())
}

// A run that prints for a while streams its output in order, in chunks about
// StreamInterval apart, before the reply; the reply still has everything.
func TestExecStreamsOutput(t *testing.T) {
	a := startAgent(t)
	var col collector
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := a.c.Exec(ctx, ExecRequest{
		Code:     "import time, sys\nfor i in range(8):\n  print('line', i)\n  print('err', i, file=sys.stderr)\n  time.sleep(0.1)",
		OnOutput: col.add, StreamInterval: 100 * time.Millisecond,
	})
	if err != nil || !res.Success {
		t.Fatalf("got %+v, %v", res, err)
	}
	var out, errOut strings.Builder
	for _, o := range col.chunks {
		out.WriteString(o.Stdout)
		errOut.WriteString(o.Stderr)
	}
	if len(col.chunks) < 3 {
		t.Errorf("got %d chunks, want at least 3 over 0.8 s at 100 ms", len(col.chunks))
	}
	if !strings.HasPrefix(res.Stdout, out.String()) || !strings.HasPrefix(res.Stderr, errOut.String()) || out.Len() == 0 {
		t.Errorf("streamed %q / %q, not a prefix of the result's %q / %q", out.String(), errOut.String(), res.Stdout, res.Stderr)
	}
	for i := 1; i < len(col.at); i++ {
		if d := col.at[i].Sub(col.at[i-1]); d < 80*time.Millisecond {
			t.Errorf("chunks %d and %d only %s apart, want about 100 ms", i-1, i, d)
		}
	}
	// Without OnOutput nothing streams, and the next run is unaffected.
	if r := a.exec(t, "print('quiet')"); r.Stdout != "quiet\n" {
		t.Errorf("got %q", r.Stdout)
	}
}

// A flood of output streams at most maxStreamChunk bytes of each stream per
// chunk, and what the host allocates stays bounded by the output cap, not by
// what the code writes.
func TestStreamFloodIsBounded(t *testing.T) {
	a := startAgent(t)
	var col collector
	var total int64
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var res *Result
	var err error
	alloc := allocatedBy(func() {
		res, err = a.c.Exec(ctx, ExecRequest{
			// about 200 MB through stdout in 1.5 s
			Code:        "import os, time\nb = b'x' * (1 << 20)\nt = time.time()\nwhile time.time() - t < 1.5: os.write(1, b)",
			OutputLimit: 1 << 20, OnOutput: func(o Output) { total += int64(len(o.Stdout)) + o.Skipped; col.add(o) },
			StreamInterval: 50 * time.Millisecond,
		})
	})
	if err != nil || !res.Truncated {
		t.Fatalf("got %+v, %v; want a truncated result", res, err)
	}
	for i, o := range col.chunks {
		if len(o.Stdout) > maxStreamChunk {
			t.Fatalf("chunk %d has %d bytes, over %d", i, len(o.Stdout), maxStreamChunk)
		}
	}
	if total > 1<<20 {
		t.Errorf("streamed %d bytes (with skipped), more than the output cap of 1 MiB", total)
	}
	t.Logf("%d chunks, %d bytes accounted, host allocated %d MB", len(col.chunks), total, alloc>>20)
	if alloc > 64<<20 {
		t.Errorf("host allocated %d MB while the code wrote far more than its 1 MiB cap, want < 64 MB", alloc>>20)
	}
}

// Output lines a caller did not ask for, or past the per-line bound, break
// the client like any forged reply.
func TestForgedOutputLines(t *testing.T) {
	big := strings.Repeat("x", 3*maxStreamChunk+1)
	for _, tt := range []struct{ name, line string }{
		{"not asked for", `{"op":"output","id":1,"stdout":"hi","stderr":"","skipped":0}`},
		{"chunk too long", fmt.Sprintf(`{"op":"output","id":1,"stdout":%q,"stderr":"","skipped":0}`, big)},
		{"no id", `{"op":"output","stdout":"hi"}`},
		{"negative skip", `{"op":"output","id":1,"stdout":"","stderr":"","skipped":-1}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, strings.NewReader(helloLine+tt.line+"\n"), Options{})
			onOutput := func(Output) {}
			if tt.name == "not asked for" {
				onOutput = nil
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err := c.Exec(ctx, ExecRequest{Code: "1", OnOutput: onOutput})
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("got %v, want ErrProtocol", err)
			}
		})
	}
}
