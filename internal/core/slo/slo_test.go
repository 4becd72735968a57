package slo

import (
	"testing"
	"time"
)

func TestMet(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ok := Observed{OK: true, TTFT: 200 * time.Millisecond, ITL: 20 * time.Millisecond, Finished: t0.Add(time.Second)}
	for _, tc := range []struct {
		name string
		o    Observed
		t    Target
		want bool
	}{
		{"no target, answered", ok, Target{}, true},
		{"no target, failed", Observed{}, Target{}, false},
		{"all kept", ok, Target{TTFT: 300 * time.Millisecond, TPOT: 25 * time.Millisecond, Deadline: t0.Add(2 * time.Second)}, true},
		{"first token late", ok, Target{TTFT: 100 * time.Millisecond}, false},
		{"tokens too slow", ok, Target{TPOT: 10 * time.Millisecond}, false},
		{"past the deadline", ok, Target{Deadline: t0.Add(500 * time.Millisecond)}, false},
		{"exactly at the bounds", ok, Target{TTFT: 200 * time.Millisecond, TPOT: 20 * time.Millisecond, Deadline: t0.Add(time.Second)}, true},
	} {
		if got := Met(tc.o, tc.t); got != tc.want {
			t.Errorf("%s: Met = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAttainment(t *testing.T) {
	if got := Attainment(0, 0); got != 1 {
		t.Errorf("no requests: %v, want 1", got)
	}
	if got := Attainment(9, 10); got != 0.9 {
		t.Errorf("9 of 10: %v", got)
	}
}
