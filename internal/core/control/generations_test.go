package control

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// driveGenerations runs a controller over one worker per pool of gpus that
// together complete rate requests a second of mix (split evenly: the
// router's split does not matter, the group's sum does), with every class
// meeting its SLO, and returns the last decision.
func driveGenerations(t *testing.T, cfg Config, gpus []string, mix Mix, rate float64, decisions int) Decision {
	t.Helper()
	for _, g := range gpus {
		cfg.Pools = append(cfg.Pools, Pool{GPU: g, Model: model, Min: 0, Max: 16})
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make([]float64, len(gpus))
	var d Decision
	now := t0
	slo := map[string]Attainment{schemas.PriorityCritical: {Met: 200, Total: 200}, schemas.PriorityInteractive: {Met: 300, Total: 300},
		schemas.PriorityStandard: {Met: 300, Total: 300}, schemas.PriorityBatch: {Met: 200, Total: 200}}
	for range decisions {
		now = now.Add(c.cfg.Interval)
		hbs := make([]schemas.Heartbeat, len(gpus))
		for i, g := range gpus {
			done[i] += rate * c.cfg.Interval.Seconds() / float64(len(gpus))
			hbs[i] = schemas.Heartbeat{WorkerID: fmt.Sprintf("%s-00", g), GPU: g, TP: 1, MaxBatch: 256,
				Models:  []schemas.ModelState{{Name: model, Dtype: "bf16", State: schemas.WeightHot}},
				Running: 4, CompletedTotal: uint64(done[i])}
		}
		d = c.Decide(Inputs{Now: now, Workers: hbs, Queued: map[string]int{}, SLO: slo, Mix: mix})
	}
	return d
}

// withPrices is the default catalog with some GPUs' $/h replaced.
func withPrices(t *testing.T, prices map[string]float64) *catalog.Catalog {
	t.Helper()
	var parts []string
	for g, p := range prices {
		parts = append(parts, fmt.Sprintf("%q:{\"price_per_hour\":%g}", g, p))
	}
	cat, err := catalog.Merge([]byte("{\"gpus\":{" + strings.Join(parts, ",") + "}}"))
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestGenerationSplit(t *testing.T) {
	gens := []string{"h100", "a100-80g", "l40s"}
	decodeHeavy := Mix{PromptTokens: 200, OutputTokens: 800}
	longPrompt := Mix{PromptTokens: 12000, OutputTokens: 300, PromptTokensSquared: 12000 * 12000 * 2.7}
	for _, tc := range []struct {
		name string
		cat  *catalog.Catalog
		itl  time.Duration
		mix  Mix
		rate float64
		// carrier is the one generation the group's recommendation gives
		// replicas; want, where set, how many.
		carrier string
		want    int
		// reason must name this in every pool's reason.
		reason string
	}{
		// Short prompts, long answers, at a rate one A100 serves within
		// the 50 ms TPOT target: one A100 ($1.80/h) is the cheapest
		// fleet, not the H100 ($3/h) nor two L40S ($2/h).
		{name: "decode-heavy goes to the cheaper generation that meets TPOT", mix: decodeHeavy, rate: 5,
			carrier: "a100-80g", want: 1, reason: "a100-80g 1"},
		// At 3 req/s one L40S ($1/h, 3.8 req/s at its batch) serves it.
		{name: "decode-heavy and small goes to one L40S", mix: decodeHeavy, rate: 2.5,
			carrier: "l40s", want: 1, reason: "l40s 1"},
		// 12k-token prompts: an A100 plans 0.43 req/s, an L40S 0.23; the
		// H100's 1.3 at $3/h is the lowest $/request by half, and
		// whole H100s carry the demand.
		{name: "long prompts go to H100", mix: longPrompt, rate: 1.5,
			carrier: "h100", reason: "the cheapest fleet that serves it: h100 "},
		// L40S made the cheapest per request by far, but at a 15 ms TPOT
		// target its single decode step (~21 ms for an 8B model) already
		// misses: it carries nothing.
		{name: "a generation that cannot meet TPOT carries nothing", cat: withPrices(t, map[string]float64{"l40s": 0.05}), itl: 15 * time.Millisecond,
			mix: decodeHeavy, rate: 3, carrier: "h100", reason: "l40s cannot meet the targets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Catalog: tc.cat, ITLTarget: tc.itl}
			d := driveGenerations(t, cfg, gens, tc.mix, tc.rate, 200)
			for _, rd := range d.Replicas {
				switch {
				case rd.GPU != tc.carrier && rd.Raw != 0:
					t.Errorf("%s: raw %d, want 0 (%s carries the demand); reason: %s", rd.Pool, rd.Raw, tc.carrier, rd.Reason)
				case rd.GPU == tc.carrier && (rd.Raw < 1 || tc.want > 0 && rd.Raw != tc.want):
					t.Errorf("%s: raw %d, want %d; reason: %s", rd.Pool, rd.Raw, max(tc.want, 1), rd.Reason)
				}
				if !strings.Contains(rd.Reason, tc.reason) || !strings.Contains(rd.Reason, "per 1k requests") {
					t.Errorf("%s: reason does not say %q with each generation's $/request: %s", rd.Pool, tc.reason, rd.Reason)
				}
			}
		})
	}
}

// A generation capped at the batch that meets TPOT gets no more demand
// than that batch serves: L40S priced cheapest per request, held to at most
// two replicas, carries two replicas' worth at its TPOT-capped capacity and
// the rest goes to the next cheapest.
func TestGenerationCappedAtWhatItServes(t *testing.T) {
	cat := withPrices(t, map[string]float64{"l40s": 0.2})
	c, err := New(Config{Catalog: cat, Pools: []Pool{{GPU: "h100", Model: model, Max: 16}, {GPU: "a100-80g", Model: model, Max: 16}, {GPU: "l40s", Model: model, Max: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	mix := Mix{PromptTokens: 1100, OutputTokens: 1400}
	var gs []generation
	for _, ps := range c.pools {
		pm := c.model(ps, mix)
		ps.calib = 1
		gs = append(gs, c.priceGeneration(ps, recommendation{capU: pm.capacity, burstCap: pm.burst}, mix))
	}
	l40s := gs[2]
	rep, err := perf.NewReplica(cat, "l40s", model, "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	if b := TargetBatch(rep, mix, c.cfg.ITLTarget); b >= 256 || l40s.capU != Capacity(rep, mix, c.cfg.ITLTarget) {
		t.Fatalf("l40s planned %.3f req/s at batch %d, want its TPOT-capped Capacity %.3f below the engine's batch", l40s.capU, b, Capacity(rep, mix, c.cfg.ITLTarget))
	}
	if cheapestPerRequest(gs) != 2 {
		t.Fatalf("l40s at $0.20/h is not the cheapest per request: %+v", gs)
	}
	// Three H100s and what two L40S serve: five L40S would be cheaper
	// still, but two are all the pool may hold.
	need := groupNeed{hiSteady: 3*gs[0].capU + 2*l40s.capU - 0.01, anyLoad: true}
	sizes, ok := cheapestFleet(gs, need, nil)
	if !ok {
		t.Fatal("no fleet serves")
	}
	if sizes[2] != 2 || sizes[0] != 3 {
		t.Errorf("sizes %v, want the l40s at its maximum 2 and 3 h100s for the rest", sizes)
	}
	rest := need.hiSteady - float64(sizes[2])*l40s.capU
	if got := float64(sizes[0])*gs[0].capU + float64(sizes[1])*gs[1].capU; got < rest {
		t.Errorf("the other generations carry %.2f req/s of the %.2f the capped l40s leaves: %v", got, rest, sizes)
	}
}

// With one pool the group's condition is the single pool's ceil(need/capU).
func TestGroupNeedReducesToOnePool(t *testing.T) {
	for _, tc := range []struct{ hiSteady, hiBurst, low, drain, capU, burstCap float64 }{
		{3, 1, 2, 0.5, 1.2, 4}, {0.4, 5, 0.1, 0, 1.2, 4}, {10, 0, 0, 3, 2.5, 2.5},
	} {
		need := groupNeed{hiSteady: tc.hiSteady, hiBurst: tc.hiBurst, low: tc.low, drain: tc.drain, anyLoad: true}
		single := ceilDiv(max(tc.hiSteady, tc.hiBurst*tc.capU/tc.burstCap)+tc.low+tc.drain, tc.capU)
		sizes, ok := cheapestFleet([]generation{{capU: tc.capU, burstCap: tc.burstCap, price: 3, min: 0, max: 64, perRequest: 1}}, need, nil)
		if !ok || sizes[0] != single {
			t.Errorf("%+v: group %v, single pool %d", tc, sizes, single)
		}
	}
}
