package worker

import (
	"fmt"
	"testing"
)

func TestFaultFailsItsShareDeterministically(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Fault
		want float64
	}{
		{"healthy", Fault{}, 0},
		{"half", Fault{ErrorRate: 0.5, Seed: 7}, 0.5},
		{"tenth", Fault{ErrorRate: 0.1, Seed: 7}, 0.1},
		{"all", Fault{ErrorRate: 1, Seed: 7}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 20000
			failed := 0
			for i := range n {
				id := fmt.Sprintf("req-%d", i)
				a, b := tc.f.fails(id), tc.f.fails(id)
				if a != b {
					t.Fatalf("fails(%s) is not a pure function", id)
				}
				if a {
					failed++
				}
			}
			if got := float64(failed) / n; got < tc.want-0.02 || got > tc.want+0.02 {
				t.Fatalf("failed share %.3f, want %.2f ± 0.02", got, tc.want)
			}
		})
	}
}

func TestFaultSeedChangesWhichRequestsFail(t *testing.T) {
	a, b := Fault{ErrorRate: 0.5, Seed: 1}, Fault{ErrorRate: 0.5, Seed: 2}
	differ := 0
	for i := range 1000 {
		id := fmt.Sprintf("req-%d", i)
		if a.fails(id) != b.fails(id) {
			differ++
		}
	}
	if differ < 300 {
		t.Fatalf("seeds 1 and 2 disagree on %d of 1000 requests; want about half", differ)
	}
}

func TestFaultValidateAndStretch(t *testing.T) {
	for _, tc := range []struct {
		f       Fault
		ok      bool
		stretch float64
		active  bool
	}{
		{Fault{}, true, 1, false},
		{Fault{Slowdown: 1}, true, 1, false},
		{Fault{Slowdown: 0.5}, true, 1, false}, // never speeds a worker up
		{Fault{Slowdown: 6, ErrorRate: 0.5}, true, 6, true},
		{Fault{Slowdown: -1}, false, 1, false},
		{Fault{ErrorRate: 1.5}, false, 1, true},
	} {
		if err := tc.f.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.f, err, tc.ok)
		}
		if got := tc.f.stretch(); got != tc.stretch {
			t.Errorf("%+v: stretch %v, want %v", tc.f, got, tc.stretch)
		}
		if got := tc.f.Active(); got != tc.active {
			t.Errorf("%+v: Active %v, want %v", tc.f, got, tc.active)
		}
	}
}
