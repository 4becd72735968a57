package loadgen

import "time"

// RiseFallRepeat is load that rises and falls again and again over d: a
// quiet rate at 20 % of the peak, and every period a swing — a ramp of a
// fifteenth of the period to the peak, a plateau of a sixth, a fall of a
// fifteenth — ending a period's quiet. The first swing ends the first
// period, so each run opens quiet.
//
// It is the rise-fall scenario's swing as a recurring burst, the shape
// where a replica given back on the fall is wanted again on the next
// rise: the controller's ski-rental hold learns the gaps between swings,
// and with SleepOnRelease (`demo --sleep-on-release`) a replica past its
// hold can be kept asleep for the next rise and woken in about a second
// instead of cold-started (issue 30). RiseFall has no second rise, so a
// sleep there has nothing to catch.
func RiseFallRepeat(d, period time.Duration) RateCurve {
	const quiet = 0.2
	if period <= 0 || d <= 0 {
		return RateCurve{{At: 0, Mult: quiet}}
	}
	frac := func(start time.Duration, f float64) time.Duration { return start + time.Duration(float64(period)*f) }
	c := RateCurve{{At: 0, Mult: quiet}}
	for start := time.Duration(0); start < d; start += period {
		c = append(c,
			RatePoint{At: frac(start, 0.6), Mult: quiet},
			RatePoint{At: frac(start, 0.6+1.0/15), Mult: 1},
			RatePoint{At: frac(start, 0.6+1.0/15+1.0/6), Mult: 1},
			RatePoint{At: frac(start, 0.6+2.0/15+1.0/6), Mult: quiet},
		)
	}
	return c
}

// RiseFallRepeatPeriod is the rise-fall-repeat scenario's period: a swing
// every 2.5 minutes, its quiet spell (about 1.5 minutes) longer than a
// replica's release hold before demand has been seen to return (one lead
// time, 31 s for llama-3.1-8b on an H100 from local disk).
const RiseFallRepeatPeriod = 150 * time.Second

// RiseFallRepeatWorkload is the rise-fall-repeat scenario over d: the
// rise-fall scenario's tenants, request sizes and peak rate
// (RiseFallWorkload), its rate following RiseFallRepeat.
func RiseFallRepeatWorkload(d time.Duration, seed uint64) Workload {
	w := RiseFallWorkload(d, seed)
	w.Curve = RiseFallRepeat(d, RiseFallRepeatPeriod)
	return w
}
