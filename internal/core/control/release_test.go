package control

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestFitHold(t *testing.T) {
	c := &Controller{}
	// A sudden return here costs 100 misses at 500 GPU-seconds each.
	const loadS, perMiss = 30.0, 500.0
	g := func(s float64, sud bool) gap {
		if sud {
			return gap{seconds: s, sudden: true, misses: 100}
		}
		return gap{seconds: s}
	}
	for _, tc := range []struct {
		name string
		gaps []gap
		want float64
	}{
		{"long quiet spells, demand back gradually: release at once", []gap{g(600, false), g(900, false), g(1200, false)}, 0},
		{"sudden returns: hold through the longest", []gap{g(120, true), g(300, true), g(200, true)}, 300},
		{"sudden after short spells, gradual after long ones", []gap{g(100, true), g(90, true), g(3600, false), g(5400, false)}, 100},
		{"gradual returns shorter than a re-buy are held through", []gap{g(20, false), g(25, false)}, 25},
		// A sudden return one replica fewer would have absorbed (no misses)
		// costs only the re-buy, as a gradual one does.
		{"sudden returns without misses: release at once", []gap{{seconds: 600, sudden: true}, {seconds: 900, sudden: true}}, 0},
		{"a few misses are worth a short hold, not a long one", []gap{{seconds: 120, sudden: true, misses: 1}, {seconds: 3600, sudden: true, misses: 1}}, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.fitHold(tc.gaps, loadS, perMiss); got != tc.want {
				t.Fatalf("hold %v, want %v", got, tc.want)
			}
		})
	}
}

func TestObserveLevels(t *testing.T) {
	ps := &poolState{Pool: Pool{Max: 4}}
	t0 := time.Unix(0, 0)
	const lead = 30
	// raw and the forecast-only raw at each second offset.
	steps := []struct {
		at            int
		raw, forecast int
	}{
		{0, 3, 3},
		{10, 1, 1},  // levels 2 and 3 unneeded from 10 s
		{20, 2, 1},  // level 2 back after 10 s: shorter than a lead time, not kept
		{30, 1, 1},  // level 2 unneeded again
		{130, 3, 1}, // back after 100 s (level 2) and 120 s (level 3) by a burst: sudden
		{140, 1, 1}, // both unneeded again
		{740, 2, 2}, // level 2 back after 600 s, foreseen by the forecast: gradual
	}
	for _, s := range steps {
		ps.observeLevels(t0.Add(time.Duration(s.at)*time.Second), s.raw, s.forecast, lead, nil)
	}
	if got := ps.levels[1].gaps; len(got) != 2 || got[0] != (gap{seconds: 100, sudden: true}) || got[1] != (gap{seconds: 600}) {
		t.Fatalf("level 2 gaps %+v", got)
	}
	if got := ps.levels[2].gaps; len(got) != 1 || got[0] != (gap{seconds: 120, sudden: true}) {
		t.Fatalf("level 3 gaps %+v", got)
	}
	if idle := ps.idle(3, t0.Add(800*time.Second)); idle != 660*time.Second {
		t.Fatalf("level 3 idle %v, want 660s", idle)
	}
	if idle := ps.idle(2, t0.Add(800*time.Second)); idle != 0 {
		t.Fatalf("level 2 is needed, idle %v", idle)
	}
}

// Before any return the hold is the prior; after, it is fitted.
func TestHoldForPrior(t *testing.T) {
	c, err := New(Config{Pools: []Pool{{GPU: "h100", Model: "llama-3.1-8b", Min: 1, Max: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	ps := c.pools[0]
	h, n := c.holdFor(ps, 3)
	if lead := ps.rep.LoadSeconds(schemas.WeightCold) + c.cfg.Interval.Seconds(); n != 0 || h != c.priorHold(ps) || h.Seconds() < lead-c.cfg.Interval.Seconds() {
		t.Fatalf("prior hold %v from %d gaps", h, n)
	}
	ps.levels = make([]level, 8)
	ps.levels[2].gaps = []gap{{seconds: 3600, sudden: false}, {seconds: 7200, sudden: false}}
	h, n = c.holdFor(ps, 3)
	lead := ps.rep.LoadSeconds(schemas.WeightCold) + c.cfg.Interval.Seconds()
	if n != 2 || h.Seconds() > lead+c.cfg.Interval.Seconds()+1e-6 {
		t.Fatalf("after gradual hour-long gaps the hold is %v (from %d gaps), want about a lead time (%.1fs)", h, n, lead)
	}
	// A level with no gaps of its own borrows the pool's.
	if h2, n2 := c.holdFor(ps, 5); n2 != 2 || h2 != h {
		t.Fatalf("level 5 hold %v from %d gaps", h2, n2)
	}
}

func TestShortMisses(t *testing.T) {
	// Ten 2 s intervals: 4 requests per interval (2 req/s), then a burst.
	steady := func(n int, per float64) []arrival {
		as := make([]arrival, n)
		for i := range as {
			as[i] = arrival{n: per, dt: 2}
		}
		return as
	}
	burst := append(steady(5, 4), steady(5, 40)...) // 20 req/s for 10 s
	for _, tc := range []struct {
		name           string
		as             []arrival
		share, mu      float64
		wantLo, wantHi float64
	}{
		{"the short fleet keeps up: none", steady(10, 4), 1, 3, 0, 0},
		{"no capacity at all: every high request", steady(10, 4), 0.5, 0, 20, 20},
		// 20 req/s of high requests against 10 starts/s: the queue grows 10/s
		// and passes the 1 s budget (10 requests) after a second; the other
		// nine seconds' 180 requests of the burst's 200 wait too long.
		{"a burst twice the short fleet's rate", burst, 1, 10, 175, 185},
		// The same burst, a quarter of it high-priority: 5 req/s of them
		// against 10 starts/s, which the short fleet absorbs.
		{"the high share of the burst fits", burst, 0.25, 10, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := shortMisses(tc.as, tc.share, tc.mu, 1)
			if got < tc.wantLo-1e-9 || got > tc.wantHi+1e-9 {
				t.Fatalf("misses %.2f, want %.0f..%.0f", got, tc.wantLo, tc.wantHi)
			}
		})
	}
}

// A sudden return's misses are gathered over the lead time after it, from
// what the pool reports a fleet one replica short would have missed.
func TestObserveLevelsPricesSuddenReturns(t *testing.T) {
	ps := &poolState{Pool: Pool{Max: 3}}
	t0 := time.Unix(0, 0)
	const lead = 30
	short := func(per float64) func(int) float64 {
		return func(k int) float64 { return per * float64(k) }
	}
	ps.observeLevels(t0, 2, 2, lead, short(0))
	ps.observeLevels(t0.Add(10*time.Second), 1, 1, lead, short(0))
	ps.observeLevels(t0.Add(200*time.Second), 2, 1, lead, short(1))  // sudden return of level 2
	ps.observeLevels(t0.Add(210*time.Second), 2, 1, lead, short(3))  // the burst grows: 6 for level 2
	ps.observeLevels(t0.Add(220*time.Second), 2, 1, lead, short(2))  // falls back: the most is kept
	ps.observeLevels(t0.Add(260*time.Second), 2, 1, lead, short(50)) // past the lead time: not counted
	if got := ps.levels[1].gaps; len(got) != 1 || got[0] != (gap{seconds: 190, sudden: true, misses: 6}) {
		t.Fatalf("level 2 gaps %+v", got)
	}
}

// A level the recommendation reaches for the first time is demand
// arriving, not returning: it records no gap, so a fleet's first climb
// (a ramp from one replica) does not fit holds for a release it has never
// made. Once the level has been needed, leaving and reaching it again is a
// return.
func TestObserveLevelsFirstReachIsNoReturn(t *testing.T) {
	ps := &poolState{Pool: Pool{Max: 4}}
	t0 := time.Unix(0, 0)
	const lead = 30
	for _, s := range []struct{ at, raw, forecast int }{
		{0, 1, 1},
		{100, 4, 1}, // levels 2-4 reached for the first time, by a burst
		{110, 1, 1},
		{300, 4, 1}, // and back 190 s later: a sudden return
	} {
		ps.observeLevels(t0.Add(time.Duration(s.at)*time.Second), s.raw, s.forecast, lead, nil)
	}
	for k := 2; k <= 4; k++ {
		if got := ps.levels[k-1].gaps; len(got) != 1 || got[0] != (gap{seconds: 190, sudden: true}) {
			t.Fatalf("level %d gaps %+v, want the one return after 190 s", k, got)
		}
	}
}
