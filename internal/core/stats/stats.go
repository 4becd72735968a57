// Package stats owns the one definition of a quantile that every figure
// Switchyard reports goes through — the simulator's TTFT and ITL
// percentiles, replay's per-bucket p95, the bench commands' latencies — so
// a p99 in one report means what it means in another.
package stats

import (
	"math"
	"slices"
)

// Quantile is the q-quantile (0 ≤ q ≤ 1) of sorted xs by linear
// interpolation between the two nearest ranks (Hyndman & Fan type 7, what
// NumPy and Prometheus' histogram_quantile within a bucket do). It is 0
// for no data, so JSON reports stay valid; q outside [0, 1] is clamped.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	q = math.Max(0, math.Min(1, q))
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

// QuantileOf is Quantile of xs in any order; xs is left as it was.
func QuantileOf(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return Quantile(s, q)
}
