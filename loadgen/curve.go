package loadgen

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// RatePoint is a rate multiplier at an offset from the start of a run.
type RatePoint struct {
	At   time.Duration
	Mult float64
}

// RateCurve shapes a workload's rate over time: the multiplier at t is
// interpolated linearly between the surrounding points and held flat
// before the first and after the last. A nil curve is a constant 1.
type RateCurve []RatePoint

// At is the multiplier at t.
func (c RateCurve) At(t time.Duration) float64 {
	if len(c) == 0 {
		return 1
	}
	i := sort.Search(len(c), func(i int) bool { return c[i].At > t })
	switch {
	case i == 0:
		return c[0].Mult
	case i == len(c):
		return c[len(c)-1].Mult
	}
	a, b := c[i-1], c[i]
	f := float64(t-a.At) / float64(b.At-a.At)
	return a.Mult + f*(b.Mult-a.Mult)
}

// Peak is the largest multiplier on the curve (1 for a nil curve):
// piecewise-linear, so it lies on a point.
func (c RateCurve) Peak() float64 {
	if len(c) == 0 {
		return 1
	}
	hi := c[0].Mult
	for _, p := range c[1:] {
		hi = max(hi, p.Mult)
	}
	return hi
}

// RiseFall is load that rises and falls once over d: quiet at 20 % of the
// peak, a ramp to the peak, a plateau, a fall, and a quiet tail twice as
// long as the opening one. In tenths of d: quiet 0–1.5, ramp 1.5–4, peak
// 4–5.5, fall 5.5–7, quiet 7–10.
//
// The shape is one swing of the Azure LLM 2023 code trace's bursts at
// their own pace, not time-compressed: over 3-minute windows that trace's
// rate swings between about a fifth of its peak and the peak, with ramps
// and falls of one to three minutes. Over a d of several minutes the
// ramp is then longer than a replica's cold start (29.4 s for
// llama-3.1-8b on an H100), as in the trace, and the quiet tail (108 s at the
// default six minutes) is longer than the controller's hold on a replica
// no longer needed before demand has been seen to return (one lead time,
// 31 s) plus a few one-replica steps, so a scaler has the time to give
// replicas back.
func RiseFall(d time.Duration) RateCurve {
	at := func(tenths float64) time.Duration { return time.Duration(float64(d) * tenths / 10) }
	const quiet = 0.2
	return RateCurve{
		{At: 0, Mult: quiet},
		{At: at(1.5), Mult: quiet},
		{At: at(4), Mult: 1},
		{At: at(5.5), Mult: 1},
		{At: at(7), Mult: quiet},
		{At: at(10), Mult: quiet},
	}
}

// RiseFallPeakRate is the rise-fall scenario's peak request rate per
// second: several times one H100's modelled capacity for its request sizes
// (about 22 req/s), so that even the critical and interactive half of it
// needs more than one replica at the peak, and the quiet spells need one.
const RiseFallPeakRate = 100

// RiseFallWorkload is the rise-fall scenario over d: the demo's four
// tenants (one per priority class, same shares and deadlines) sending
// requests shaped like the Azure LLM 2023 code trace's — prompts of 1,024
// to 3,072 tokens (mean 2,048, the trace's), 8 to 48 output tokens (mean
// 28, the trace's), every prompt unique as the trace records no prefix
// reuse — at a rate following RiseFall and peaking at RiseFallPeakRate.
// It asks for one model (no "auto", which a one-model fleet could not
// serve) and starts no agentic workflows, so attainment measures how well
// the fleet's size follows the load.
func RiseFallWorkload(d time.Duration, seed uint64) Workload {
	w := DefaultWorkload(d, seed)
	w.Rate = RiseFallPeakRate
	w.Curve = RiseFall(d)
	w.Sizes = &Sizes{PromptMin: 1024, PromptMax: 3072, OutputMin: 8, OutputMax: 48}
	w.RepeatFraction, w.AutoFraction = 0, 0
	w.Workflows = 0
	w.BurstFactor = 0
	return w
}

// Scenarios names the workloads `switchyard demo --scenario` runs.
var Scenarios = []string{"default", "rise-fall", "rise-fall-repeat"}

// DefaultScenarioDuration is how long a scenario runs when no duration is
// asked for.
func DefaultScenarioDuration(name string) time.Duration {
	switch name {
	case "rise-fall":
		return 6 * time.Minute
	case "rise-fall-repeat":
		return 4 * RiseFallRepeatPeriod
	}
	return 15 * time.Second
}

// Scenario returns the named workload over d.
func Scenario(name string, d time.Duration, seed uint64) (Workload, error) {
	switch name {
	case "", "default":
		return DefaultWorkload(d, seed), nil
	case "rise-fall":
		return RiseFallWorkload(d, seed), nil
	case "rise-fall-repeat":
		return RiseFallRepeatWorkload(d, seed), nil
	}
	return Workload{}, fmt.Errorf("unknown scenario %q (want one of %s)", name, strings.Join(Scenarios, ", "))
}
