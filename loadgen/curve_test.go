package loadgen

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

func TestRateCurveAt(t *testing.T) {
	c := RateCurve{{At: 10 * time.Second, Mult: 0.5}, {At: 20 * time.Second, Mult: 1.5}, {At: 30 * time.Second, Mult: 1.5}}
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{
		{0, 0.5},                // held flat before the first point
		{10 * time.Second, 0.5}, // on a point
		{15 * time.Second, 1.0}, // halfway up the ramp
		{25 * time.Second, 1.5}, // plateau
		{time.Hour, 1.5},        // held flat after the last point
		{12500 * time.Millisecond, 0.75},
	} {
		if got := c.At(tc.at); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("At(%s) = %g, want %g", tc.at, got, tc.want)
		}
	}
	if got := RateCurve(nil).At(time.Minute); got != 1 {
		t.Errorf("nil curve At = %g, want 1", got)
	}
	if got := c.Peak(); got != 1.5 {
		t.Errorf("Peak = %g, want 1.5", got)
	}
}

// Mean is the average multiplier over [0, d): the expected number of
// arrivals is Rate × Mean(d) × d seconds. The tests' oracle for arrival
// counts; the generator itself thins by the curve and never needs it.
func (c RateCurve) Mean(d time.Duration) float64 {
	if len(c) == 0 || d <= 0 {
		return 1
	}
	// Integrate the trapezoids between breakpoints clipped to [0, d).
	knots := []time.Duration{0}
	for _, p := range c {
		if p.At > 0 && p.At < d {
			knots = append(knots, p.At)
		}
	}
	knots = append(knots, d)
	area := 0.0
	for i := 1; i < len(knots); i++ {
		a, b := knots[i-1], knots[i]
		area += (c.At(a) + c.At(b)) / 2 * (b - a).Seconds()
	}
	return area / d.Seconds()
}

func TestRateCurveMean(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    RateCurve
		d    time.Duration
		want float64
	}{
		{"nil", nil, time.Minute, 1},
		{"flat", RateCurve{{0, 0.3}}, time.Minute, 0.3},
		// 0.2 for 1.5, ramp 2.5 (mean 0.6), 1 for 1.5, fall 1.5 (mean
		// 0.6), 0.2 for 3 (tenths of d).
		{"rise-fall", RiseFall(10 * time.Minute), 10 * time.Minute, (0.2*1.5 + 0.6*2.5 + 1*1.5 + 0.6*1.5 + 0.2*3) / 10},
		// Clipped inside the ramp: 0.2 for 1.5 min, then 0.2 -> 0.52 over 1 min.
		{"clipped", RiseFall(10 * time.Minute), 150 * time.Second, (0.2*90 + (0.2+0.52)/2*60) / 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Mean(tc.d); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("Mean(%s) = %g, want %g", tc.d, got, tc.want)
			}
		})
	}
}

// TestRiseFallArrivals checks the scenario's arrivals follow its curve:
// per phase, the count is within four standard deviations of the Poisson
// expectation, the peak is several times the quiet spells, and the same
// seed gives the same arrivals.
func TestRiseFallArrivals(t *testing.T) {
	const d = 6 * time.Minute
	w := RiseFallWorkload(d, 7)
	arr := w.Generate()
	if !reflect.DeepEqual(arr, RiseFallWorkload(d, 7).Generate()) {
		t.Fatal("the same seed gave different arrivals")
	}
	tenth := d / 10
	phases := []struct {
		name     string
		from, to time.Duration
	}{
		{"quiet", 0, 15 * tenth / 10},
		{"ramp", 15 * tenth / 10, 4 * tenth},
		{"peak", 4 * tenth, 55 * tenth / 10},
		{"fall", 55 * tenth / 10, 7 * tenth},
		{"tail", 7 * tenth, d},
	}
	got := map[string]float64{}
	for _, p := range phases {
		n := 0
		for _, a := range arr {
			if a.Offset >= p.from && a.Offset < p.to {
				n++
			}
		}
		// Expected arrivals: the curve's integral over the phase.
		span := (p.to - p.from).Seconds()
		want := w.Rate * (w.Curve.Mean(p.to)*p.to.Seconds() - w.Curve.Mean(p.from)*p.from.Seconds())
		if p.from == 0 {
			want = w.Rate * w.Curve.Mean(p.to) * p.to.Seconds()
		}
		if math.Abs(float64(n)-want) > 4*math.Sqrt(want) {
			t.Errorf("%s: %d arrivals, want %.0f ± %.0f", p.name, n, want, 4*math.Sqrt(want))
		}
		got[p.name] = float64(n) / span
	}
	if ratio := got["peak"] / got["tail"]; ratio < 4 || ratio > 6 {
		t.Errorf("peak rate %.1f/s over quiet %.1f/s = %.2f, want about 5", got["peak"], got["tail"], ratio)
	}
	// Azure-code-like sizes, and no two prompts share their first KV
	// block, so no prefix cache can hit.
	first := map[string]bool{}
	var prompt, output float64
	for _, a := range arr {
		r := a.Request
		if r.Model != "llama-3.1-8b" || r.Workflow != nil {
			t.Fatalf("rise-fall asks for one model and no workflows, got model %q workflow %v", r.Model, r.Workflow)
		}
		ids := tokens.Tokenize(r.Prompt)
		if n := len(ids); n < 1024 || n > 3072 {
			t.Fatalf("prompt of %d tokens, want 1,024..3,072", n)
		}
		if r.MaxTokens < 8 || r.MaxTokens > 48 {
			t.Fatalf("max_tokens %d, want 8..48", r.MaxTokens)
		}
		key := fmt.Sprint(ids[:tokens.BlockSize])
		if first[key] {
			t.Fatalf("two prompts share their first block: %.60q", r.Prompt)
		}
		first[key] = true
		prompt += float64(len(ids))
		output += float64(r.MaxTokens)
	}
	n := float64(len(arr))
	if prompt/n < 1900 || prompt/n > 2200 || output/n < 25 || output/n > 31 {
		t.Fatalf("mean prompt %.0f and output %.1f tokens, want about 2,048 and 28 (the Azure code trace's)", prompt/n, output/n)
	}
}

func TestScenarioNames(t *testing.T) {
	for _, name := range Scenarios {
		if _, err := Scenario(name, time.Minute, 1); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Scenario("sawtooth", time.Minute, 1); err == nil {
		t.Error("an unknown scenario was accepted")
	}
	def, _ := Scenario("default", time.Minute, 1)
	if !reflect.DeepEqual(def.Generate(), DefaultWorkload(time.Minute, 1).Generate()) {
		t.Error("the default scenario is not the default workload")
	}
}
