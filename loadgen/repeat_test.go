package loadgen

import (
	"testing"
	"time"
)

// TestRiseFallRepeat: the curve opens quiet and reaches the peak once in
// every period, quiet again between swings — a rise after every fall,
// which RiseFall's single swing lacks — and the scenario is named and
// runs for four periods by default.
func TestRiseFallRepeat(t *testing.T) {
	const d, p = 10 * time.Minute, RiseFallRepeatPeriod
	c := RiseFallRepeat(d, p)
	if got := c.At(0); got != 0.2 {
		t.Fatalf("opens at %g, want the quiet 0.2", got)
	}
	for start := time.Duration(0); start < d; start += p {
		peakAt, quietAt := start+time.Duration(0.75*float64(p)), start+time.Duration(0.3*float64(p))
		if got := c.At(peakAt); got != 1 {
			t.Errorf("period at %s: %g at its plateau, want the peak 1", start, got)
		}
		if got := c.At(quietAt); got != 0.2 {
			t.Errorf("period at %s: %g in its quiet spell, want 0.2", start, got)
		}
	}
	if DefaultScenarioDuration("rise-fall-repeat") != 4*p {
		t.Errorf("default duration %s, want four periods", DefaultScenarioDuration("rise-fall-repeat"))
	}
	w, err := Scenario("rise-fall-repeat", d, 1)
	if err != nil {
		t.Fatal(err)
	}
	if w.Rate != RiseFallPeakRate || len(w.Curve) != len(c) || w.Sizes == nil {
		t.Fatalf("scenario workload: rate %g, %d curve points (want %d), sizes %v", w.Rate, len(w.Curve), len(c), w.Sizes)
	}
	if got := RiseFallRepeat(d, 0); len(got) != 1 || got.At(time.Minute) != 0.2 {
		t.Errorf("a zero period gives %v, want the quiet rate only", got)
	}
}
