package waitfor

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestTrueReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	True(t, "three polls", time.Minute, func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Fatalf("polled %d times, want 3", n.Load())
	}
}

// fakeT records a Fatalf instead of ending the test, so the timeout path
// can be checked.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func TestTrueFailsNamingWhatNeverCame(t *testing.T) {
	ft := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != ft {
				t.Fatalf("recovered %v, want the fake's Fatalf", r)
			}
		}()
		True(ft, "a thing", 50*time.Millisecond, func() bool { return false })
	}()
	if ft.failed == "" {
		t.Fatal("no failure reported after the deadline")
	}
}
