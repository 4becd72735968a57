package stack

import (
	"testing"
	"time"
)

// waitFor polls ok until it holds, failing the test after d: tests wait
// for the state they need instead of sleeping a guessed time.
func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
