package control

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestBinomialTail(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		p    float64
		want float64
	}{
		{100, 0, 0.01, 1},
		{100, 1, 0.01, 1 - math.Pow(0.99, 100)},                      // 0.634
		{100, 2, 0.01, 1 - math.Pow(0.99, 100) - math.Pow(0.99, 99)}, // 0.264
		{100, 5, 0.01, 0.003432},
		{10, 11, 0.01, 0},
		{10, 1, 0, 0},
	} {
		if got := binomialTail(tc.n, tc.k, tc.p); math.Abs(got-tc.want) > 1e-5 {
			t.Errorf("binomialTail(%d, %d, %g) = %.6f, want %.6f", tc.n, tc.k, tc.p, got, tc.want)
		}
	}
}

// TestMissesWhileShortDoNotCutTheModel: misses while replicas the
// controller ordered are still loading are the cold start's, not the
// model's — the capacity planned per replica stays the model's. Once the
// fleet has served at its size through an attainment window, the same
// misses cut it.
func TestMissesWhileShortDoNotCutTheModel(t *testing.T) {
	c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 20}, nil)
	key := PoolKey("h100", model)
	f := &fleet{n: 2}
	now := t0
	miss := map[string]Attainment{schemas.PriorityInteractive: {Met: 90, Total: 100}}
	step := func(starting int) ReplicaDecision {
		now = now.Add(c.cfg.Interval)
		f.serve(4, c.cfg.Interval)
		d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(1, 0), SLO: miss, Starting: map[string]int{key: starting}})
		return d.Replicas[0]
	}
	model0 := step(2).Capacity
	for i := 0; i < 20; i++ {
		if got := step(2).Capacity; got != model0 {
			t.Fatalf("decision %d with 2 replicas loading: capacity %.3f, want the model's %.3f", i, got, model0)
		}
	}
	f.resize(4) // the two have loaded: the fleet is at its size
	var cutAt time.Duration
	since := now
	for i := 0; i < 60 && cutAt == 0; i++ {
		if step(0).Capacity < model0 {
			cutAt = now.Sub(since)
		}
	}
	if cutAt < c.cfg.SLOWindow || cutAt > c.cfg.SLOWindow+2*c.cfg.Interval {
		t.Errorf("misses at size cut the model %v after the fleet reached it, want one attainment window (%v) after", cutAt, c.cfg.SLOWindow)
	}
}

// TestMissesWithinChanceDoNotCutTheModel: at a 99 % target, 2 misses in
// a window of 110 are what a fleet meeting it misses one window in three;
// 8 are not.
func TestMissesWithinChanceDoNotCutTheModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		missed int
		cut    bool
	}{
		{"2 of 110", 2, false},
		{"8 of 110", 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, Pool{GPU: "h100", Model: model, Min: 1, Max: 20}, nil)
			f := &fleet{n: 2}
			now := t0
			slo := map[string]Attainment{schemas.PriorityInteractive: {Met: 110 - tc.missed, Total: 110}}
			model0 := Capacity(c.pools[0].rep, Mix{PromptTokens: 1024, OutputTokens: 256}, c.cfg.ITLTarget)
			var last float64
			for i := 0; i < 10; i++ {
				now = now.Add(c.cfg.Interval)
				f.serve(4, c.cfg.Interval)
				d := c.Decide(Inputs{Now: now, Workers: f.heartbeats(1, 0), SLO: slo})
				f.resize(d.Replicas[0].Desired)
				last = d.Replicas[0].Capacity
			}
			if cut := last < model0*0.999; cut != tc.cut {
				t.Errorf("%d misses of 110: capacity %.3f, the model's %.3f: cut %v, want cut %v", tc.missed, last, model0, cut, tc.cut)
			}
		})
	}
}
