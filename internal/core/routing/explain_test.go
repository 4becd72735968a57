package routing

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// A request held because its only worker advertises a long cold load says
// so, with the figure and the time left (issue 31: a guessed 24 s load held
// every request for a model past its 20 s deadline, and no log said why).
func TestHeldReasonNamesTheAdvertisedLoad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state string
		load  float64
		want  []string
	}{
		{"cold with a long load", schemas.WeightCold, 24, []string{"deadline_busy", "w1 deadline_busy: model " + model + " cold, load_s 24.00 advertised", "to the deadline"}},
		{"hot", schemas.WeightHot, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			hb := heartbeat("w1", 1)
			hb.Models[0].State, hb.Models[0].LoadSeconds = tc.state, tc.load
			s.apply(Input{Kind: InHeartbeat, Heartbeat: hb})
			acts := s.admit(admitted("r1", "acme", 20*time.Second, 100, 16, s.now))
			delayed := only(acts, ActDelayed)
			if tc.want == nil {
				if len(delayed) > 0 || len(only(acts, ActDispatch)) != 1 {
					t.Fatalf("a hot worker did not take it: %s", kinds(acts))
				}
				return
			}
			if len(delayed) != 1 {
				t.Fatalf("want one delayed action, got %s", kinds(acts))
			}
			for _, w := range tc.want {
				if !strings.Contains(delayed[0].Reason, w) {
					t.Errorf("reason %q lacks %q", delayed[0].Reason, w)
				}
			}
		})
	}
}

// A model whose only worker fell silent (its engine died) is answered
// unplaceable once the silence passes DeadAfter, not held to its deadline;
// a worker back sooner takes what waited (docs/engines.md, issue 31).
func TestOnlyWorkerSilentIsRefusedNotHeldToTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		// back is when the worker heartbeats again after falling silent
		// (0: never); submitAt is when the request comes, after the silence
		// began.
		back, submitAt time.Duration
		// wantBy is how long after the request it is answered or placed.
		wantKind string
		wantBy   time.Duration
	}{
		// Silent past the breaker's staleness bound (3 s), so the breaker
		// is open when the request comes.
		{"silent moments ago, never back", 0, 4 * time.Second, ActFail, DeadAfter - 4*time.Second + time.Second},
		{"silent for long", 0, DeadAfter + 2*time.Second, ActFail, 100 * time.Millisecond},
		{"back within the bound", 6 * time.Second, 4 * time.Second, ActDispatch, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			s.advance(time.Second, "w1")
			silentAt := s.now
			s.advance(tc.submitAt)
			submitted := s.now
			acts := s.admit(admitted("r1", "acme", 30*time.Second, 100, 16, s.now))
			for s.now.Sub(submitted) < 25*time.Second && len(only(acts, ActFail))+len(only(acts, ActDispatch)) == 0 {
				live := []string{}
				if tc.back > 0 && s.now.Sub(silentAt) >= tc.back {
					live = append(live, "w1")
				}
				acts = s.advance(100*time.Millisecond, live...)
			}
			took := s.now.Sub(submitted)
			got := only(acts, tc.wantKind)
			if len(got) != 1 || took > tc.wantBy {
				t.Fatalf("after %s: %s, want %s within %s", took, kinds(acts), tc.wantKind, tc.wantBy)
			}
			if tc.wantKind == ActFail && (got[0].Err.Code != schemas.CodeUnplaceable || !strings.Contains(got[0].Err.Message, "silent")) {
				t.Fatalf("answered %+v, want unplaceable naming the silence", got[0].Err)
			}
		})
	}
}
