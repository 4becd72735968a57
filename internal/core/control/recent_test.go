package control

import (
	"testing"
	"time"
)

func TestRecentWindowAndMix(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Recent{Window: 10 * time.Second}
	r.ObserveCached(t0, "critical", true, true, 100, 10, 0)
	r.ObserveCached(t0.Add(5*time.Second), "critical", false, false, 0, 0, 0)
	r.ObserveCached(t0.Add(6*time.Second), "batch", true, true, 300, 30, 0)
	slo := r.SLO(t0.Add(8*time.Second), nil)
	if slo["critical"] != (Attainment{Met: 1, Total: 2}) || slo["batch"] != (Attainment{Met: 1, Total: 1}) {
		t.Fatalf("slo %+v", slo)
	}
	slo = r.SLO(t0.Add(12*time.Second), slo) // the first outcome ages out
	if slo["critical"] != (Attainment{Met: 0, Total: 1}) {
		t.Fatalf("after the window: %+v", slo)
	}
	// The squares' mean, 50,000, is what the prompts' spread adds to their
	// mean's square (40,000): attention is priced on it.
	if m := r.Mix(); m.PromptTokens != 200 || m.OutputTokens != 20 || m.PromptTokensSquared != 50000 {
		t.Fatalf("mix %+v, want the means of the two successes (squares 50000)", m)
	}
}
