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

// driveGenerations runs a controller over pools of gpus whose workers
// together complete rate requests a second of mix (split evenly: the
// router's split does not matter, the group's sum does), with every class
// meeting its SLO, and returns the last decision. Each pool starts with one
// worker and the pools' sizes are started and released at once.
func driveGenerations(t *testing.T, cfg Config, gpus []string, mix Mix, rate float64, decisions int) Decision {
	t.Helper()
	ds := runGenFleet(t, cfg, gpus, mix, func(int) float64 { return rate }, decisions, 0)
	return ds[len(ds)-1]
}

// runGenFleet is driveGenerations with the rate a function of the decision
// and workers that serve load after they are started (the cold start;
// until then they are Inputs.Starting): the pools' desired sizes are
// reconciled after each decision, releasing replicas still loading first.
// It returns every decision.
func runGenFleet(t *testing.T, cfg Config, gpus []string, mix Mix, rate func(step int) float64, decisions int, load time.Duration) []Decision {
	t.Helper()
	for _, g := range gpus {
		cfg.Pools = append(cfg.Pools, Pool{GPU: g, Model: model, Min: 0, Max: 16})
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type worker struct {
		id    string
		ready time.Time
		done  float64
	}
	now := t0
	workers := map[string][]*worker{}
	seq := 0
	start := func(gpu string, at time.Time) {
		seq++
		workers[gpu] = append(workers[gpu], &worker{id: fmt.Sprintf("%s-%02d", gpu, seq), ready: at})
	}
	for _, g := range gpus {
		start(g, now)
	}
	slo := map[string]Attainment{schemas.PriorityCritical: {Met: 200, Total: 200}, schemas.PriorityInteractive: {Met: 300, Total: 300},
		schemas.PriorityStandard: {Met: 300, Total: 300}, schemas.PriorityBatch: {Met: 200, Total: 200}}
	var out []Decision
	for step := range decisions {
		now = now.Add(c.cfg.Interval)
		var ready []*worker
		starting := map[string]int{}
		var hbs []schemas.Heartbeat
		for _, g := range gpus {
			for _, w := range workers[g] {
				if w.ready.After(now) {
					starting[PoolKey(g, model)]++
					continue
				}
				ready = append(ready, w)
			}
		}
		for _, g := range gpus {
			for _, w := range workers[g] {
				if w.ready.After(now) {
					continue
				}
				w.done += rate(step) * c.cfg.Interval.Seconds() / float64(len(ready))
				hbs = append(hbs, schemas.Heartbeat{WorkerID: w.id, GPU: g, TP: 1, MaxBatch: 256,
					Models:  []schemas.ModelState{{Name: model, Dtype: "bf16", State: schemas.WeightHot}},
					Running: 4, CompletedTotal: uint64(w.done)})
			}
		}
		d := c.Decide(Inputs{Now: now, Workers: hbs, Queued: map[string]int{}, SLO: slo, Mix: mix, Starting: starting})
		out = append(out, d)
		for _, rd := range d.Replicas {
			ws := workers[rd.GPU]
			for len(ws) < rd.Desired {
				start(rd.GPU, now.Add(load))
				ws = workers[rd.GPU]
			}
			for len(ws) > rd.Desired {
				// Release one still loading first, else the newest.
				k := len(ws) - 1
				for j, w := range ws {
					if w.ready.After(now) {
						k = j
					}
				}
				ws = append(ws[:k], ws[k+1:]...)
			}
			workers[rd.GPU] = ws
		}
	}
	return out
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

// When demand moves the split to another generation, the replica it moves
// off is released once the replica replacing it serves, not held by its
// own pool's release levels as if the split's move were a return of demand
// (issue 30: on the ServeGen day the pools held $153 of a day the split
// asked $80 for). Until then it is kept: a replica still loading serves
// nothing. ServeGen R1's mix (1.3k in with a long tail, 1.5k out): at
// 0.3 req/s one L40S ($1/h) serves it; at 1.2 req/s one H100 ($3/h), where
// two A100 (their prefills cap them at 0.89 req/s) or four L40S cost more.
func TestGroupReleasesTheReplicaItMovedOff(t *testing.T) {
	mix := Mix{PromptTokens: 1300, OutputTokens: 1500, PromptTokensSquared: 4274 * 4274}
	const load = 30 * time.Second
	const rise = 400 // the decision at which the rate rises
	rate := func(step int) float64 {
		if step < rise {
			return 0.3
		}
		return 1.2
	}
	gpus := []string{"h100", "a100-80g", "l40s"}
	ds := runGenFleet(t, Config{}, gpus, mix, rate, rise+300, load)
	sizes := func(d Decision) map[string]int {
		out := map[string]int{}
		for _, rd := range d.Replicas {
			out[rd.GPU] = rd.Desired
		}
		return out
	}
	reason := func(d Decision, gpu string) string {
		for _, rd := range d.Replicas {
			if rd.GPU == gpu {
				return rd.Reason
			}
		}
		return ""
	}
	if s := sizes(ds[rise-1]); s["l40s"] != 1 || s["a100-80g"] != 0 || s["h100"] != 0 {
		t.Fatalf("at 0.3 req/s the fleet is %v; want one l40s: %s", s, reason(ds[rise-1], "l40s"))
	}
	// The decision at which a replacement was first ordered.
	ordered := -1
	for i := rise; i < len(ds) && ordered < 0; i++ {
		if s := sizes(ds[i]); s["h100"]+s["a100-80g"] > 0 {
			ordered = i
		}
	}
	if ordered < 0 {
		t.Fatalf("at 1.2 req/s no replacement was ordered: %s", reason(ds[len(ds)-1], "h100"))
	}
	serving := ordered + int(load/(2*time.Second)) + 1
	for i := rise; i < serving; i++ {
		if sizes(ds[i])["l40s"] < 1 {
			t.Fatalf("decision %d: the l40s was released while its replacement was still loading: %s", i, reason(ds[i], "l40s"))
		}
	}
	// The split may order an A100 on the way up, while the forecast is
	// still climbing to 1.2 req/s, and then the H100 that serves it all.
	// Once the H100 serves, the fleet is that H100 alone within one lead
	// time (load plus an interval), not after the L40S's or the A100's own
	// zero window (5 minutes).
	lead := int(load/(2*time.Second)) + 1
	h100At := -1
	for i := ordered; i < len(ds) && h100At < 0; i++ {
		if sizes(ds[i])["h100"] > 0 {
			h100At = i
		}
	}
	if h100At < 0 || h100At+2*lead >= len(ds) {
		t.Fatalf("no h100 ordered in time (decision %d of %d): %s", h100At, len(ds), reason(ds[len(ds)-1], "h100"))
	}
	h100Serves := h100At + lead
	for i := h100Serves + lead; i < len(ds); i++ {
		if s := sizes(ds[i]); s["l40s"] != 0 || s["a100-80g"] != 0 || s["h100"] != 1 {
			t.Fatalf("decision %d (%ds after the h100 serves): %v, want one h100 alone: %s", i, 2*(i-h100Serves), s, reason(ds[i], "l40s"))
		}
	}
}
