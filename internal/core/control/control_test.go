package control

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const model = "llama-3.1-8b"

// fleet is a toy world for the scaler: n workers w00.. with their own
// monotonic completion counters, as live workers report them.
type fleet struct {
	n    int
	done map[int]uint64
	frac float64
}

// serve spreads rate·dt completions over the fleet.
func (f *fleet) serve(rate float64, dt time.Duration) {
	if f.done == nil {
		f.done = map[int]uint64{}
	}
	if f.n == 0 {
		return
	}
	per := rate*dt.Seconds()/float64(f.n) + f.frac
	whole := uint64(per)
	f.frac = per - float64(whole)
	for i := 0; i < f.n; i++ {
		f.done[i] += whole
	}
}

func (f *fleet) heartbeats(running, waiting int) []schemas.Heartbeat {
	hbs := make([]schemas.Heartbeat, f.n)
	for i := range hbs {
		hbs[i] = schemas.Heartbeat{
			WorkerID: fmt.Sprintf("w%02d", i), GPU: "h100", TP: 1, MaxBatch: 256,
			Models:  []schemas.ModelState{{Name: model, Dtype: "bf16", State: schemas.WeightHot}},
			Running: running, Waiting: waiting, CompletedTotal: f.done[i],
		}
	}
	return hbs
}

// resize follows the controller; a removed worker's counter is gone with it.
func (f *fleet) resize(n int) {
	for i := n; i < f.n; i++ {
		delete(f.done, i)
	}
	f.n = n
}

func newCtl(t *testing.T, p Pool, mod func(*Config)) *Controller {
	t.Helper()
	cfg := Config{Pools: []Pool{p}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// steady feeds the controller a fleet of n workers that keep up with
// rate requests per second, with per-interval noise, and returns the
// desired replicas after each decision.
func drive(c *Controller, f *fleet, steps int, now *time.Time, rate func(i int) float64, queue func(i int) int) []int {
	out := make([]int, 0, steps)
	iv := c.cfg.Interval
	for i := 0; i < steps; i++ {
		*now = now.Add(iv)
		f.serve(rate(i), iv)
		in := Inputs{Now: *now, Workers: f.heartbeats(0, 0), Queued: map[string]int{schemas.PriorityInteractive: queue(i)}}
		d := c.Decide(in)
		out = append(out, d.Replicas[0].Desired)
		f.resize(d.Replicas[0].Desired) // the scaler obeys at once
	}
	return out
}

func changes(xs []int) int {
	n := 0
	for i := 1; i < len(xs); i++ {
		if xs[i] != xs[i-1] {
			n++
		}
	}
	return n
}

func TestNoFlappingOnNoisyLoad(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 20}, nil)
	capU := Capacity(c.pools[0].rep, Mix{PromptTokens: 1024, OutputTokens: 256}, c.cfg.ITLTarget) * c.cfg.TargetUtilization
	rng := rand.New(rand.NewPCG(1, 2))
	f := &fleet{n: 4}
	now := t0
	// Mean demand of 4 replicas, ±30 % noise every interval, and a queue
	// that blips now and then.
	got := drive(c, f, 600, &now, func(int) float64 { return 4 * capU * (0.85 + 0.3*rng.Float64()) },
		func(i int) int {
			if rng.IntN(10) == 0 {
				return rng.IntN(20)
			}
			return 0
		})
	// 20 minutes of noise: the fleet settles and stays within a narrow band.
	tail := got[100:]
	lo, hi := tail[0], tail[0]
	for _, x := range tail {
		lo, hi = min(lo, x), max(hi, x)
	}
	if n := changes(tail); n > 6 || hi-lo > 2 {
		t.Errorf("flapping: %d changes, range [%d, %d] over %d decisions: %v", n, lo, hi, len(tail), tail)
	}
}

func TestBoundsHold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		min, max int
		rate     float64
		queue    int
		want     int
	}{
		{"huge demand capped at max", 1, 5, 1e4, 5000, 5},
		{"idle held at min", 2, 10, 0, 0, 2},
		{"idle to zero when allowed", 0, 10, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: tc.min, Max: tc.max}, nil)
			f := &fleet{n: 3}
			now := t0
			got := drive(c, f, 300, &now, func(int) float64 { return tc.rate }, func(int) int { return tc.queue })
			for i, x := range got {
				if x < tc.min || x > tc.max {
					t.Fatalf("decision %d: %d outside [%d, %d]", i, x, tc.min, tc.max)
				}
			}
			if last := got[len(got)-1]; last != tc.want {
				t.Errorf("settled at %d, want %d", last, tc.want)
			}
		})
	}
	if _, err := New(Config{Pools: []Pool{{GPU: "h100", Model: model, Min: 3, Max: 2}}}); err == nil {
		t.Error("min > max accepted")
	}
	if _, err := New(Config{Pools: []Pool{{GPU: "h100", Model: "no-such-model", Max: 2}}}); err == nil {
		t.Error("unknown model accepted")
	}
}

func TestScaleUpUnderRisingQueueAndDownWhenIdle(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 16}, nil)
	f := &fleet{n: 1}
	now := t0
	// The queue grows by 40 requests per interval for a minute.
	up := drive(c, f, 30, &now, func(int) float64 { return 2 }, func(i int) int { return 40 * (i + 1) })
	if up[len(up)-1] < 4 {
		t.Fatalf("desired %v under a rising queue, want ≥ 4 by the end", up)
	}
	for i := 1; i < len(up); i++ {
		if up[i] < up[i-1] {
			t.Fatalf("scaled down while the queue rose: %v", up)
		}
		if up[i]-up[i-1] > max(4, up[i-1]) {
			t.Fatalf("step %d → %d exceeds the max step", up[i-1], up[i])
		}
	}
	peak := up[len(up)-1]
	// Then nothing: one replica at a time, after the stabilization window.
	start := now
	down := drive(c, f, 400, &now, func(int) float64 { return 0 }, func(int) int { return 0 })
	if down[len(down)-1] != 1 {
		t.Fatalf("idle fleet settled at %d, want the minimum 1: %v", down[len(down)-1], down)
	}
	first := -1
	for i, x := range down {
		if x < peak {
			first = i
			break
		}
	}
	// Each replica is released only after its level's hold (release.go):
	// at least a lead time, the prior until demand has been seen to return.
	ps := c.pools[0]
	lead := time.Duration((ps.rep.LoadSeconds(schemas.WeightCold) + c.cfg.Interval.Seconds()) * float64(time.Second))
	hold, _ := c.holdFor(ps, peak)
	if held := time.Duration(first+1) * c.cfg.Interval; held < lead || held+c.cfg.Interval < hold {
		t.Errorf("first scale-down after %s (from %s), before a lead time %s or the level's %s hold", held, start, lead, hold)
	}
	for i := 1; i < len(down); i++ {
		if down[i-1]-down[i] > c.cfg.MaxDownStep {
			t.Fatalf("scale-down step %d → %d", down[i-1], down[i])
		}
	}
}

func TestScaleFromZeroAccountsForLoadTime(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 0, Max: 8}, nil)
	d := c.Decide(Inputs{Now: t0, Queued: map[string]int{schemas.PriorityStandard: 30}})
	if got := d.Desired(PoolKey("h100", model)); got < 1 {
		t.Fatalf("desired %d with 30 queued and no replicas", got)
	}
	if len(d.Changes) == 0 || !strings.Contains(d.Changes[0].Reason, "scale from zero") || !strings.Contains(d.Changes[0].Reason, "cold weight load") {
		t.Fatalf("changes %+v", d.Changes)
	}
	// The forecast horizon is the cold-load time plus one interval.
	load := c.pools[0].rep.LoadSeconds(schemas.WeightCold)
	if !strings.Contains(d.Replicas[0].Reason, fmt.Sprintf("+%.0fs", load+c.cfg.Interval.Seconds())) {
		t.Errorf("reason %q does not plan over the %.1fs load", d.Replicas[0].Reason, load)
	}
}

func TestForecastLeadsARamp(t *testing.T) {
	// A steady ramp: the desired fleet runs ahead of the current arrival
	// rate by the trend over the load time.
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 64}, nil)
	f := &fleet{n: 1}
	now := t0
	var last Decision
	for i := 0; i < 40; i++ {
		now = now.Add(c.cfg.Interval)
		f.serve(float64(i)*2, c.cfg.Interval) // rate 2·i req/s, rising
		hbs := f.heartbeats(0, 0)
		last = c.Decide(Inputs{Now: now, Workers: hbs})
		f.resize(last.Replicas[0].Desired)
	}
	r := last.Replicas[0]
	// Critically damped (criticalTrendGain), the trend is taken up over
	// about two lead times: after 40 intervals it leads by 5 %, where the
	// ringing gain 0.2 led by 11 %.
	if r.Forecast <= r.ArrivalRate*1.03 {
		t.Errorf("forecast %.1f does not lead the arrival rate %.1f on a ramp", r.Forecast, r.ArrivalRate)
	}
}

func TestSLOMissAddsReplicaAndBlocksScaleDown(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 10}, func(c *Config) { c.UpCooldown = time.Nanosecond })
	f := &fleet{n: 3}
	now := t0
	drive(c, f, 5, &now, func(int) float64 { return 0 }, func(int) int { return 0 })
	miss := map[string]Attainment{schemas.PriorityInteractive: {Met: 90, Total: 100}}
	for i := 0; i < 3; i++ {
		now = now.Add(c.cfg.Interval)
		hbs := f.heartbeats(1, 0)
		d := c.Decide(Inputs{Now: now, Workers: hbs, SLO: miss})
		f.resize(d.Replicas[0].Desired)
	}
	if f.n <= 3 {
		t.Fatalf("desired %d after SLO misses, want > 3", f.n)
	}
	// Too few samples are not trusted.
	c2 := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 10}, nil)
	d := c2.Decide(Inputs{Now: t0, Workers: (&fleet{n: 2}).heartbeats(1, 0), SLO: map[string]Attainment{schemas.PriorityCritical: {Met: 1, Total: 5}}})
	if d.Replicas[0].Desired != 2 {
		t.Errorf("5 samples moved the fleet to %d", d.Replicas[0].Desired)
	}
}

func TestSpecHysteresisAndDwell(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 4}, nil)
	hb := func(running int, spec bool) []schemas.Heartbeat {
		h := (&fleet{n: 1}).heartbeats(running, 0)
		h[0].SpecDecode = spec
		return h
	}
	d := c.Decide(Inputs{Now: t0, Workers: hb(2, false)})
	if len(d.Spec) != 1 || !d.Spec[0].On {
		t.Fatalf("idle worker: spec %+v, want on", d.Spec)
	}
	// Already on: no repeated command.
	d = c.Decide(Inputs{Now: t0.Add(time.Minute), Workers: hb(2, true)})
	if len(d.Spec) != 0 {
		t.Errorf("repeated spec command %+v", d.Spec)
	}
}

func TestWarmthSleepsSurplusAndWakesBeforeColdStart(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 8}, nil)
	f := &fleet{n: 4}
	now := t0
	var slept []string
	state := map[string]string{}
	// Workers obey, but their heartbeats report it only two intervals later.
	type cmd struct {
		at     time.Time
		id, to string
	}
	var lag []cmd
	// Sleep follows the damped fleet size down (a replica the fleet still
	// counts on is never put to sleep), so this runs long enough for the
	// desired size to reach its minimum.
	hbs := func() []schemas.Heartbeat {
		h := f.heartbeats(0, 0)
		for i := range h {
			if s, ok := state[h[i].WorkerID]; ok {
				h[i].Models[0].State = s
			}
		}
		return h
	}
	for i := 0; i < 300; i++ {
		now = now.Add(c.cfg.Interval)
		for len(lag) > 0 && now.Sub(lag[0].at) >= 2*c.cfg.Interval {
			state[lag[0].id] = lag[0].to
			lag = lag[1:]
		}
		d := c.Decide(Inputs{Now: now, Workers: hbs()})
		for _, w := range d.Warmth {
			if w.State != schemas.WeightSleeping {
				t.Fatalf("unexpected warmth %+v", w)
			}
			slept = append(slept, w.Worker)
			lag = append(lag, cmd{now, w.Worker, w.State})
		}
	}
	if len(slept) != 3 {
		t.Fatalf("slept %v, want the 3 surplus of 4 idle workers", slept)
	}
	// Demand returns: the sleepers wake first.
	hbs0 := hbs()
	now = now.Add(c.cfg.Interval)
	d := c.Decide(Inputs{Now: now, Workers: hbs0, Queued: map[string]int{schemas.PriorityInteractive: 2000}})
	woke := 0
	for _, w := range d.Warmth {
		if w.State == schemas.WeightHot {
			woke++
		}
	}
	if woke != 3 {
		t.Errorf("woke %d of 3 sleepers under a 2000-request queue: %+v", woke, d.Warmth)
	}
}

func TestShedTightensOnlyAtMax(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 2}, func(c *Config) { c.UpCooldown = time.Nanosecond })
	miss := map[string]Attainment{schemas.PriorityCritical: {Met: 50, Total: 100}}
	f := &fleet{n: 2}
	now := t0
	var shed []ShedDecision
	for i := 0; i < 5; i++ {
		now = now.Add(c.cfg.Interval)
		d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(10, 10), SLO: miss})
		shed = append(shed, d.Shed...)
	}
	if len(shed) != 2 || shed[0].Class != schemas.PriorityStandard || shed[1].Margin != 2.5 {
		t.Fatalf("shed %+v", shed)
	}
	shed = nil
	for i := 0; i < 40; i++ {
		now = now.Add(c.cfg.Interval)
		d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(1, 0)})
		shed = append(shed, d.Shed...)
	}
	if len(shed) != 2 || shed[1].Margin != 1.5 {
		t.Fatalf("relax %+v", shed)
	}
}

// TestBookedCountsAsArrivals: requests the routers dispatched since the
// workers' last heartbeats are arrivals, in the system, at the decision
// that sees them booked, not a heartbeat later (a burst placed at once left
// the router's queue before any heartbeat counted it); they are not
// backlog, since they were placed where there was room.
func TestBookedCountsAsArrivals(t *testing.T) {
	for _, tc := range []struct {
		name        string
		booked      map[string]int
		wantBacklog int
		wantRate    float64 // requests a second at the second decision, within 1 %
	}{
		{"nothing booked", nil, 0, 0},
		{"a burst booked on both", map[string]int{"w00": 30, "w01": 30}, 0, 60 / 2.0},
		{"booked on a worker not in the pool", map[string]int{"elsewhere": 30}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 20}, nil)
			f := &fleet{n: 2}
			c.Decide(Inputs{Now: t0, Workers: f.heartbeats(0, 0)})
			// The same heartbeats a 2 s interval later: the burst is only booked.
			now := t0.Add(2 * time.Second)
			d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(0, 0), Booked: tc.booked})
			rd := d.Replicas[0]
			if rd.Backlog != tc.wantBacklog {
				t.Errorf("backlog %d, want %d", rd.Backlog, tc.wantBacklog)
			}
			if math.Abs(rd.ArrivalRate-tc.wantRate) > 0.01*tc.wantRate+1e-9 {
				t.Errorf("arrival rate %.3f/s, want %.3f/s", rd.ArrivalRate, tc.wantRate)
			}
		})
	}
}

// TestPrefillingCountsAsBacklog: running sequences that have not had
// their first token (the heartbeat's prefilling) are backlog beside the
// engine's waiting ones, as a short-prompt policy admits them to the
// batch past a full prefill queue instead of holding them in the router.
func TestPrefillingCountsAsBacklog(t *testing.T) {
	for _, tc := range []struct {
		name                string
		waiting, prefilling int
		wantBacklog         int
	}{
		{"none", 0, 0, 0},
		{"waiting only", 30, 0, 60},
		{"prefilling only", 0, 30, 60},
		{"both", 10, 20, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 20}, nil)
			f := &fleet{n: 2}
			hbs := f.heartbeats(40, tc.waiting)
			for i := range hbs {
				hbs[i].Prefilling = tc.prefilling
			}
			d := c.Decide(Inputs{Now: t0, Workers: hbs})
			if got := d.Replicas[0].Backlog; got != tc.wantBacklog {
				t.Errorf("backlog %d, want %d", got, tc.wantBacklog)
			}
		})
	}
}
