package control

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestFitHold(t *testing.T) {
	c := &Controller{}
	const loadS, sudden = 30.0, 50000.0
	g := func(s float64, sud bool) gap { return gap{seconds: s, sudden: sud} }
	for _, tc := range []struct {
		name string
		gaps []gap
		want float64
	}{
		{"long quiet spells, demand back gradually: release at once", []gap{g(600, false), g(900, false), g(1200, false)}, 0},
		{"sudden returns: hold through the longest", []gap{g(120, true), g(300, true), g(200, true)}, 300},
		{"sudden after short spells, gradual after long ones", []gap{g(100, true), g(90, true), g(3600, false), g(5400, false)}, 100},
		{"gradual returns shorter than a re-buy are held through", []gap{g(20, false), g(25, false)}, 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.fitHold(tc.gaps, loadS, sudden); got != tc.want {
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
		ps.observeLevels(t0.Add(time.Duration(s.at)*time.Second), s.raw, s.forecast, lead)
	}
	if got := ps.levels[1].gaps; len(got) != 2 || got[0] != (gap{100, true}) || got[1] != (gap{600, false}) {
		t.Fatalf("level 2 gaps %+v", got)
	}
	if got := ps.levels[2].gaps; len(got) != 1 || got[0] != (gap{120, true}) {
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
	mix := Mix{PromptTokens: 1024, OutputTokens: 256}
	h, n := c.holdFor(ps, 3, mix)
	if lead := ps.rep.LoadSeconds(schemas.WeightCold) + c.cfg.Interval.Seconds(); n != 0 || h != c.priorHold(ps) || h.Seconds() < lead-c.cfg.Interval.Seconds() {
		t.Fatalf("prior hold %v from %d gaps", h, n)
	}
	ps.levels = make([]level, 8)
	ps.levels[2].gaps = []gap{{seconds: 3600, sudden: false}, {seconds: 7200, sudden: false}}
	h, n = c.holdFor(ps, 3, mix)
	lead := ps.rep.LoadSeconds(schemas.WeightCold) + c.cfg.Interval.Seconds()
	if n != 2 || h.Seconds() > lead+c.cfg.Interval.Seconds()+1e-6 {
		t.Fatalf("after gradual hour-long gaps the hold is %v (from %d gaps), want about a lead time (%.1fs)", h, n, lead)
	}
	// A level with no gaps of its own borrows the pool's.
	if h2, n2 := c.holdFor(ps, 5, mix); n2 != 2 || h2 != h {
		t.Fatalf("level 5 hold %v from %d gaps", h2, n2)
	}
}
