package engine

import (
	"testing"
	"time"
)

// TestTargetStepCap: with TargetStepCap, a long prompt prefilling beside an
// interactive sequence with a 75 ms TPOT target is cut into chunks that keep
// the sequence's mean time per token within the target (a step may use the
// slack its earlier tokens left); without it (vLLM's fixed token budget)
// the 8,192-token chunks stretch its mean past the target. Either way the
// long prompt finishes, later with the cap.
func TestTargetStepCap(t *testing.T) {
	const tpot = 75 * time.Millisecond
	cases := []struct {
		name     string
		cap      bool
		wantMean func(mean time.Duration) bool
	}{
		{"cap from the target", true, func(m time.Duration) bool { return m <= tpot }},
		{"fixed token budget", false, func(m time.Duration) bool { return m > tpot }},
	}
	var ends [2]time.Time
	for k, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{TargetStepCap: tc.cap})
			chat := seqOf("chat", 1, 200, 30)
			chat.TPOTTarget = tpot
			if err := e.Add(chat); err != nil {
				t.Fatal(err)
			}
			// Two steps: the chat's prefill, then its first decode.
			now := t0
			for i := 0; i < 2; i++ {
				now = now.Add(e.Step(now).Duration)
			}
			long := seqOf("long", 2, 60000, 50)
			long.Arrival = now
			if err := e.Add(long); err != nil {
				t.Fatal(err)
			}
			var first, last time.Time
			var steps int
			var maxStep time.Duration
			fin, end := run(t, e, now, func(st Step) {
				for _, em := range st.Emitted {
					if em.ID == "chat" {
						steps++
						maxStep = max(maxStep, st.Duration)
					}
				}
			})
			for _, f := range fin {
				if f.ID == "chat" {
					first, last = f.FirstTokenAt, f.FinishedAt
				}
			}
			mean := last.Sub(first) / time.Duration(chat.MaxTokens-1)
			if !tc.wantMean(mean) {
				t.Fatalf("chat's mean time per token %v (longest step %v over %d steps)", mean, maxStep, steps)
			}
			ends[k] = end
			t.Logf("mean %v, longest step %v, all done at %v", mean, maxStep, end.Sub(t0))
		})
	}
	if !ends[0].After(ends[1]) {
		t.Fatalf("the capped run ended at %v, no later than the uncapped %v: the cap cut nothing", ends[0].Sub(t0), ends[1].Sub(t0))
	}
}
