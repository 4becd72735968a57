// Package waitfor is how tests wait: poll the state they need until it
// holds, and fail naming what never came, instead of sleeping a guessed
// time that is too long on a quiet machine and too short on a loaded one.
package waitfor

import (
	"testing"
	"time"
)

// Poll is how often a condition is checked.
const Poll = 20 * time.Millisecond

// True polls ok until it holds, failing the test after within with what
// was awaited.
func True(t testing.TB, what string, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(Poll)
	}
}
