package control

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// trafficStep drives one decision: arrivals requests arrive in the interval
// and are served within it (the toy fleet keeps up), the scaler obeys.
func trafficStep(c *Controller, f *fleet, now *time.Time, arrivals float64) Decision {
	iv := c.cfg.Interval
	*now = now.Add(iv)
	f.serve(arrivals/iv.Seconds(), iv)
	d := c.Decide(Inputs{Now: *now, Workers: f.heartbeats(0, 0), Mix: Mix{PromptTokens: 2048, OutputTokens: 28}})
	f.resize(d.Replicas[0].Desired)
	return d
}

func TestBurstScaling(t *testing.T) {
	h100 := Pool{GPU: "h100", Model: model, Min: 1, Max: 32}
	capacity := func(c *Controller) float64 {
		return Capacity(c.pools[0].rep, Mix{PromptTokens: 2048, OutputTokens: 28}, c.cfg.ITLTarget)
	}
	for _, tc := range []struct {
		name string
		// burstX is the burst's rate in replicas' modelled capacity; it
		// lasts burstS seconds every periodS, quiet (0.05 of a replica)
		// between.
		burstX          float64
		burstS, periodS int
		minutes         int
		// wantMinAfterWarmup is the least desired size once the first burst
		// has been seen; wantMax the most ever.
		wantMinAfterWarmup, wantMax int
	}{
		// A 10 s burst at 3 replicas' capacity every 2 minutes: each burst
		// is over long before a replica ordered for it loads (31 s), so
		// once a burst has come back after a release the capacity it
		// needed must be kept through the quiet between them. (The first
		// burst is demand arriving, not returning: until one has returned
		// the hold is the prior, one lead time.)
		{"short bursts after quiet spells keep capacity", 3, 10, 120, 20, 3, 4},
		// The same bursts every 3 minutes still fall inside the window.
		{"sparser bursts still inside the window", 3, 10, 180, 20, 3, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, h100, nil)
			capa := capacity(c)
			f := &fleet{n: 1}
			now := t0
			seen, reached := false, 0
			for i := 0; i < tc.minutes*30; i++ {
				sec := (i * 2) % tc.periodS
				rate := 0.05 * capa
				if sec >= tc.periodS-tc.burstS {
					rate = tc.burstX * capa
				}
				d := trafficStep(c, f, &now, rate*c.cfg.Interval.Seconds())
				got := d.Replicas[0].Desired
				if got > tc.wantMax {
					t.Fatalf("t=%ds: desired %d over %d for a %.0f-replica burst: %s", i*2, got, tc.wantMax, tc.burstX, d.Replicas[0].Reason)
				}
				if seen && got < tc.wantMinAfterWarmup {
					t.Fatalf("t=%ds: desired %d between bursts of %.0f replicas: the next burst would meet a fleet too small for it", i*2, got, tc.burstX)
				}
				// From the second burst on, the level has returned.
				if sec == tc.periodS-tc.burstS {
					reached++
				}
				seen = seen || (reached >= 2 && got >= tc.wantMinAfterWarmup)
			}
			if !seen {
				t.Fatalf("never scaled to %d for bursts of %.0f replicas' capacity", tc.wantMinAfterWarmup, tc.burstX)
			}
		})
	}
}

func TestSteadyLowLoadScalesDownAfterTheWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window time.Duration // 0: the default, DownLeadTimes lead times
	}{
		{"default window", 0},
		{"explicit window", 2 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 16}, func(cfg *Config) { cfg.DownWindow = tc.window })
			capa := Capacity(c.pools[0].rep, Mix{PromptTokens: 2048, OutputTokens: 28}, c.cfg.ITLTarget)
			window := c.downWindow(c.pools[0])
			if tc.window > 0 && window != tc.window {
				t.Fatalf("window %s, want the configured %s", window, tc.window)
			}
			f := &fleet{n: 6}
			now := t0
			// A steady half replica of load on six replicas: one is enough.
			var got []int
			for i := 0; i < int((window+5*time.Minute)/c.cfg.Interval); i++ {
				got = append(got, trafficStep(c, f, &now, 0.5*capa*c.cfg.Interval.Seconds()).Replicas[0].Desired)
			}
			first := -1
			for i, x := range got {
				if x < 6 {
					first = i
					break
				}
			}
			if first < 0 || got[len(got)-1] != 1 {
				t.Fatalf("steady low load: desired %v, want 6 down to 1", got)
			}
			if held := time.Duration(first+1) * c.cfg.Interval; held < window {
				t.Errorf("first scale-down after %s, inside the %s stabilization window", held, window)
			}
			if n := changes(got); n != 5 {
				t.Errorf("%d changes on the way from 6 to 1, want 5 single steps: %v", n, got)
			}
		})
	}
}

func TestBurstRate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts []float64 // per 2 s interval, oldest first
		budget float64
		want   float64
	}{
		{"nothing", nil, 1, 0},
		{"steady rate approaches the rate", []float64{10, 10, 10, 10, 10, 10, 10, 10, 10, 10}, 1, 100.0 / 21},
		{"a one-interval spike queues for the budget", []float64{0, 0, 0, 60}, 1, 20},
		{"an older spike counts over the time since", []float64{60, 0, 0, 0}, 1, 60.0 / 9},
		{"no budget: the arrivals over the time since", []float64{0, 60, 0}, 0, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as := make([]arrival, len(tc.counts))
			for i, n := range tc.counts {
				as[i] = arrival{n: n, dt: 2}
			}
			if got := burstRate(as, tc.budget); got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("burstRate = %.4f, want %.4f", got, tc.want)
			}
		})
	}
	as := []arrival{{1, 2}, {2, 2}, {3, 2}, {4, 2}}
	if got := trimArrivals(as, 5); len(got) != 2 || got[0].n != 3 || got[1].n != 4 {
		t.Errorf("trimArrivals kept %v, want the last 4 s", got)
	}
}

func TestSLOMissBumpDoesNotWindUp(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 20}, func(cfg *Config) { cfg.UpCooldown = time.Nanosecond })
	f := &fleet{n: 2}
	now := t0
	miss := map[string]Attainment{schemas.PriorityInteractive: {Met: 90, Total: 100}}
	// Misses stay in the attainment window for a minute after one burst:
	// the controller adds one replica, not one per decision.
	var got []int
	for i := 0; i < 30; i++ {
		now = now.Add(c.cfg.Interval)
		d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(1, 0), SLO: miss})
		f.resize(d.Replicas[0].Desired)
		got = append(got, f.n)
	}
	if got[len(got)-1] != 3 {
		t.Errorf("a minute of one burst's misses moved the fleet %v, want 2 -> 3 once", got)
	}
}

func TestMissesCalibrateCapacityAndItRecovers(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 20}, nil)
	f := &fleet{n: 2}
	now := t0
	miss := map[string]Attainment{schemas.PriorityCritical: {Met: 95, Total: 100}}
	step := func(slo map[string]Attainment) ReplicaDecision {
		now = now.Add(c.cfg.Interval)
		d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(1, 0), SLO: slo})
		f.resize(d.Replicas[0].Desired)
		return d.Replicas[0]
	}
	model0 := step(nil).Capacity
	// Three minutes of misses: one cut per lead time plus attainment window.
	var cut float64
	for i := 0; i < 90; i++ {
		cut = step(miss).Capacity
	}
	if want := model0 * c.cfg.MissCapacityCut * c.cfg.MissCapacityCut; cut > want*1.001 || cut < want*0.999 {
		t.Fatalf("capacity after 3 minutes of misses %.2f, want two cuts to %.2f (model %.2f)", cut, want, model0)
	}
	// An hour of met SLOs brings it most of the way back.
	var back float64
	for i := 0; i < 1800; i++ {
		back = step(nil).Capacity
	}
	if back < 0.95*model0 || back > model0 {
		t.Errorf("capacity after an hour of met SLOs %.2f, want near the model's %.2f", back, model0)
	}
}

// TestHeadroomOnlyForTheHighClasses: the same bursts, once with the high
// classes a third of the traffic and once with HeadroomForAll. Burst
// headroom is bought for the high classes' share only, so the first fleet
// peaks lower — but never below what the mean forecast needs.
func TestHeadroomOnlyForTheHighClasses(t *testing.T) {
	slo := map[string]Attainment{
		schemas.PriorityCritical: {Met: 10, Total: 10}, schemas.PriorityInteractive: {Met: 20, Total: 20},
		schemas.PriorityStandard: {Met: 40, Total: 40}, schemas.PriorityBatch: {Met: 20, Total: 30},
	}
	peak := func(all, highOnly bool) (peak, floor int) {
		// No step limit: the test compares how much headroom is
		// bought, which a step limit reached in both runs would hide.
		c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 32}, func(cfg *Config) {
			cfg.HeadroomForAll, cfg.PlanHighOnly, cfg.MaxUpStep = all, highOnly, 32
		})
		mix := Mix{PromptTokens: 2048, OutputTokens: 28}
		capa := Capacity(c.pools[0].rep, mix, c.cfg.ITLTarget)
		// A burst is planned against the rate a replica starts requests
		// at, not its steady completion rate.
		burstCapa := BurstCapacity(c.pools[0].rep, mix, c.cfg.ITLTarget)
		f := &fleet{n: 1}
		now := t0
		floor = 1 << 30
		// 10 s at 6 replicas' burst capacity every 2 minutes, a quarter of
		// a replica between: the mean is about 0.7 replicas.
		for i := 0; i < 20*30; i++ {
			rate := 0.25 * capa
			if (i*2)%120 >= 110 {
				rate = 6 * burstCapa
			}
			now = now.Add(c.cfg.Interval)
			f.serve(rate, c.cfg.Interval)
			d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(0, 0), Mix: Mix{PromptTokens: 2048, OutputTokens: 28}, SLO: slo})
			f.resize(d.Replicas[0].Desired)
			peak = max(peak, f.n)
			if i > 5*30 {
				floor = min(floor, f.n)
			}
		}
		return peak, floor
	}
	highPeak, highFloor := peak(false, false)
	allPeak, _ := peak(true, false)
	onlyPeak, onlyFloor := peak(false, true)
	if highPeak >= allPeak {
		t.Errorf("peak fleet %d with headroom for a third of the traffic, %d for all of it: want fewer", highPeak, allPeak)
	}
	// Sized for the high third alone, the fleet is smaller still.
	if onlyPeak >= highPeak {
		t.Errorf("peak fleet %d planned for the high classes only, %d planned for all with their headroom: want fewer", onlyPeak, highPeak)
	}
	if highFloor < 1 || onlyFloor < 1 {
		t.Errorf("fleet fell to %d / %d between bursts", highFloor, onlyFloor)
	}
	t.Logf("peak replicas: %d (headroom for the high classes' 33%%), %d (for all), %d (planned for the high classes only)", highPeak, allPeak, onlyPeak)
}

// TestTurnedAwayDemandGrowsTheFleet: three replicas' worth of requests
// arrive at a fleet whose admission sheds what it predicts would miss its
// deadline — here everything beyond 60 % of the fleet's modelled capacity,
// as queueing delay grows long before a replica is saturated. Counting only
// completions the controller reads that served rate as the demand and
// stays small; with the shed requests in Inputs.Unserved it grows to the
// load.
func TestTurnedAwayDemandGrowsTheFleet(t *testing.T) {
	for _, tc := range []struct {
		name        string
		countUnsrvd bool
		wantAtLeast int
	}{
		{"served rate only", false, 1},
		{"turned-away requests counted", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 16}, nil)
			capa := Capacity(c.pools[0].rep, Mix{PromptTokens: 2048, OutputTokens: 28}, c.cfg.ITLTarget)
			f := &fleet{n: 1}
			now := t0
			var unserved float64
			for i := 0; i < 5*30; i++ {
				demand := 3 * capa
				served := min(demand, 0.6*float64(f.n)*capa)
				unserved += (demand - served) * c.cfg.Interval.Seconds()
				now = now.Add(c.cfg.Interval)
				f.serve(served, c.cfg.Interval)
				in := Inputs{Now: now, Workers: f.heartbeats(0, 0), Mix: Mix{PromptTokens: 2048, OutputTokens: 28}}
				if tc.countUnsrvd {
					in.Unserved = uint64(unserved)
				}
				f.resize(c.Decide(in).Replicas[0].Desired)
			}
			if f.n < tc.wantAtLeast || (!tc.countUnsrvd && f.n >= 3) {
				t.Errorf("fleet of %d after 5 minutes of 3 replicas' demand; want at least %d", f.n, tc.wantAtLeast)
			}
			t.Logf("%s: %d replicas", tc.name, f.n)
		})
	}
	for _, tc := range []struct {
		status, code, worker string
		want                 bool
	}{
		{schemas.StatusShed, schemas.CodeShed, "", true},
		{schemas.StatusFailed, schemas.CodeDeadlineExceeded, "", true},
		{schemas.StatusFailed, schemas.CodeDeadlineExceeded, "w1", false}, // it reached a worker
		{schemas.StatusRejected, schemas.CodeQuotaExceeded, "", false},    // not a capacity matter
		{schemas.StatusOK, "", "w1", false},
	} {
		if got := Unserved(tc.status, tc.code, tc.worker); got != tc.want {
			t.Errorf("Unserved(%s, %s, %q) = %v, want %v", tc.status, tc.code, tc.worker, got, tc.want)
		}
	}
}
