package engine

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// TestWeightTiers: the engine moves between weight tiers and says so in
// its heartbeat — the tier the weights sit in and, as load_s, the time to
// serve from there (the wake from host memory, not the cold load) — and a
// Wake starts the load at once, so a woken replica serves a request that
// arrives after the wake time without waiting for a load.
func TestWeightTiers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tier     string
		state    string
		maxReady float64 // seconds to serve from the tier, at most
		minReady float64
	}{
		{"asleep in host memory", schemas.TierHost, schemas.WeightSleeping, 2, 0.5},
		{"in the page cache", schemas.TierPageCache, schemas.WeightCold, 29, 25},
		{"on local disk", schemas.TierDisk, schemas.WeightCold, 30, 29},
		{"remote only", schemas.TierRemote, schemas.WeightAbsent, 45, 35},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			if err := e.SetWeightTier(tc.tier); err != nil {
				t.Fatal(err)
			}
			var hb schemas.Heartbeat
			e.FillHeartbeatAt(&hb, t0)
			m := hb.Models[0]
			if m.State != tc.state || m.Tier != tc.tier {
				t.Fatalf("heartbeat says %s in %s, want %s in %s", m.State, m.Tier, tc.state, tc.tier)
			}
			if m.LoadSeconds < tc.minReady || m.LoadSeconds > tc.maxReady {
				t.Fatalf("load_s %.2f, want in [%.1f, %.1f]", m.LoadSeconds, tc.minReady, tc.maxReady)
			}
			if got := e.ReadySeconds(t0); got != m.LoadSeconds {
				t.Fatalf("ReadySeconds %.3f, heartbeat %.3f", got, m.LoadSeconds)
			}
			ready := time.Duration(m.LoadSeconds * float64(time.Second))
			e.Wake(t0)
			e.FillHeartbeatAt(&hb, t0.Add(ready/2))
			if m := hb.Models[0]; m.State != schemas.WeightLoading || math.Abs(m.LoadSeconds-ready.Seconds()/2) > 0.01 {
				t.Fatalf("half way: %s, load_s %.2f, want loading with %.2f left", m.State, m.LoadSeconds, ready.Seconds()/2)
			}
			after := t0.Add(ready + time.Millisecond)
			e.FillHeartbeatAt(&hb, after)
			if m := hb.Models[0]; m.State != schemas.WeightHot || m.Tier != schemas.TierHBM {
				t.Fatalf("after the wake: %s in %s, want hot in hbm", m.State, m.Tier)
			}
			if err := e.Add(Sequence{ID: "a", PromptTokens: 100, MaxTokens: 4, Arrival: after}); err != nil {
				t.Fatal(err)
			}
			if st := e.Step(after); len(st.Emitted) == 0 || st.Duration > time.Second {
				t.Fatalf("first step after the wake: %d emitted in %s, want a token without a load", len(st.Emitted), st.Duration)
			}
		})
	}
	// A sleeping engine with work and no Wake loads on its first step.
	e := newEngine(t, Config{})
	if err := e.SetWeightState(schemas.WeightSleeping); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(Sequence{ID: "a", PromptTokens: 100, MaxTokens: 4, Arrival: t0}); err != nil {
		t.Fatal(err)
	}
	if st := e.Step(t0); st.Duration < 500*time.Millisecond || st.Duration > 2*time.Second || len(st.Emitted) != 0 {
		t.Fatalf("lazy wake: step %s with %d emitted, want the ~1 s wake", st.Duration, len(st.Emitted))
	}
	if err := e.SetWeightTier(schemas.TierHBM); err == nil {
		t.Fatal("SetWeightTier(hbm) accepted: loading is Wake's")
	}
}
