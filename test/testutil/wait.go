package testutil

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually checks its condition: often enough that
// a test waits little past the moment the condition holds, rarely enough
// that polling costs nothing next to a sandbox.
const pollEvery = 10 * time.Millisecond

// Eventually waits until cond holds, checking it every few milliseconds,
// and fails the test naming what it waited for if within passes first.
// Tests use it instead of a sleep to wait for something to happen: it
// returns as soon as the thing is observed, and a thing that never comes
// fails the test rather than letting it run on a guess.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(pollEvery)
	}
}
