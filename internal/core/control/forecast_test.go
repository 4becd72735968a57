package control

import (
	"testing"
)

// After a fall to a flat rate the demand forecast settles on that rate
// from above: Holt's method with a trend gain too large for its level gain
// rings, and its trend carried the level below zero while a fifth of the
// peak still arrived (issue 30: 56 of 300 decisions on rise-fall-repeat
// read 0 req/s).
func TestForecastAfterAFallStaysNearTheFlatRate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// peak for hold intervals after a ramp of ramp intervals from
		// flat, then back down over fall intervals to flat.
		peak, flat       float64
		ramp, hold, fall int
	}{
		{name: "rise-fall-repeat's swing", peak: 100, flat: 20, ramp: 5, hold: 12, fall: 5},
		{name: "a step down after a long peak", peak: 100, flat: 20, ramp: 1, hold: 60, fall: 1},
		{name: "a fall to a tenth", peak: 200, flat: 20, ramp: 10, hold: 30, fall: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 64}, nil)
			f := &fleet{n: 1}
			now := t0
			const quiet, after = 45, 150
			rate := func(i int) float64 {
				switch i -= quiet; {
				case i < 0:
					return tc.flat
				case i < tc.ramp:
					return tc.flat + (tc.peak-tc.flat)*float64(i+1)/float64(tc.ramp)
				case i < tc.ramp+tc.hold:
					return tc.peak
				case i < tc.ramp+tc.hold+tc.fall:
					return tc.peak - (tc.peak-tc.flat)*float64(i-tc.ramp-tc.hold+1)/float64(tc.fall)
				}
				return tc.flat
			}
			end := quiet + tc.ramp + tc.hold + tc.fall
			low, worst := 0, tc.peak
			for i := 0; i < end+after; i++ {
				now = now.Add(c.cfg.Interval)
				f.serve(rate(i), c.cfg.Interval)
				d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(0, 0)})
				f.resize(d.Replicas[0].Desired)
				if i < end {
					continue
				}
				if r := d.Replicas[0].ArrivalRate; r < tc.flat/2 {
					low++
					worst = min(worst, r)
				}
			}
			if low > 0 {
				t.Errorf("after the fall to %.0f req/s the arrival rate read under half of it at %d of %d decisions (lowest %.1f)", tc.flat, low, after, worst)
			}
		})
	}
}
