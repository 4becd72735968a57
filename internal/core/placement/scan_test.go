package placement

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

// rooflineNames maps the synthetic fleet's names to the catalog's, as
// `switchyard bench placement --cost roofline` does, so that perf's
// predictor costs it.
var rooflineNames = map[string]string{"llama-8b": "llama-3.1-8b", "llama-70b": "llama-3.1-70b", "a100": "a100-80g"}

// The bounds the scan orders and skips by, plain and refined with the miss
// term, are never above the total they bound: checked for every candidate
// of a placer that keeps them all, with the linear stand-in and with the
// roofline predictor (whose decode_s prices the KV a batch holds).
func TestLowerBoundNeverExceedsTheTotal(t *testing.T) {
	cases := []struct {
		name   string
		cost   func() CostModel
		rename map[string]string
		opts   Options
	}{
		{"linear", func() CostModel { return BenchCost() }, nil, Options{Explain: 1 << 20}},
		{"linear, no gpu or priority axis", func() CostModel { return BenchCost() }, nil, Options{Explain: 1 << 20, Disabled: map[string]bool{AxisGPU: true, AxisPriority: true}}},
		{"roofline", func() CostModel { return perf.NewPredictor(nil) }, rooflineNames, Options{Explain: 1 << 20}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, reqs := Synthetic(SyntheticConfig{Workers: 200, Blocks: 20000, Requests: 100, Seed: 5, Rename: tc.rename}, now)
			p := New(tc.cost(), tc.opts)
			checked, refinedByMiss := 0, 0
			for i := range reqs {
				d := p.Place(f, &reqs[i], now)
				// Place leaves its classes prepared for this request but clears
				// the prefix lengths: match again to bound as it did.
				p.touched = f.Prefix().Match(reqs[i].BlockHashes, p.lens, p.touched[:0])
				p.mark(p.touched, rowTouched, true)
				for _, c := range d.Candidates {
					h := &p.view.hot[c.Worker.Idx]
					lb, _, _, _ := p.lowerBound(h, &p.classes[h.class], c.Worker.Idx, &p.req)
					refined := p.refinedBound(c.Worker.Idx, &p.req)
					if !(lb <= refined && refined <= c.Terms.TotalUSD) || lb <= 0 {
						t.Fatalf("request %d worker %s: bound %v, refined %v, total %v", i, c.Worker.ID, lb, refined, c.Terms.TotalUSD)
					}
					if c.Terms.MissUSD > 0 && refined > lb {
						refinedByMiss++
					}
					checked++
				}
				for _, w := range p.touched {
					p.lens[w] = 0
				}
				p.mark(p.touched, rowTouched, false)
			}
			if checked < 1000 || refinedByMiss == 0 {
				t.Fatalf("only %d candidates checked, %d refined by the miss term", checked, refinedByMiss)
			}
		})
	}
}

// With the roofline predictor the bound prices decode_s as the total does,
// the KV a batch holds included, so a placement evaluates a few times
// Explain workers, not the hundred or so whose bounds left that out (on
// the 1,000-worker synthetic fleet, evaluated and kept per placement by
// class: 97-133 without it, 22-34 with it).
func TestRooflineBoundsAreTight(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 1000, Blocks: 100000, Requests: 200, Seed: 1, Rename: rooflineNames}, now)
	p := New(perf.NewPredictor(nil), Options{})
	byClass := map[string][2]int{}
	for i := range reqs {
		d := p.Place(f, &reqs[i], now)
		n := byClass[reqs[i].Priority]
		byClass[reqs[i].Priority] = [2]int{n[0] + d.Considered, n[1] + 1}
	}
	for class, n := range byClass {
		if mean := float64(n[0]) / float64(n[1]); mean > 5*float64(p.Options().Explain) {
			t.Errorf("%s: %.1f workers evaluated and kept per placement, want at most %d", class, mean, 5*p.Options().Explain)
		}
	}
}

// The total evaluate stops at once the list is full (before the
// surcharges: the miss and interference terms) is never above the full
// total, and below it wherever a surcharge is priced: checked for every
// candidate of a placer that keeps them all, evaluated again with a bar
// that every total is over.
func TestTotalBeforeSurchargesIsUnderTheTotal(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 200, Blocks: 20000, Requests: 100, Seed: 5}, now)
	p := New(BenchCost(), Options{Explain: 1 << 20})
	checked, surcharged := 0, 0
	var partial cand
	for i := range reqs {
		d := p.Place(f, &reqs[i], now)
		// As TestLowerBoundNeverExceedsTheTotal: evaluate as Place did.
		p.touched = f.Prefix().Match(reqs[i].BlockHashes, p.lens, p.touched[:0])
		p.mark(p.touched, rowTouched, true)
		p.bar = math.Inf(-1)
		for _, c := range d.Candidates {
			if reason := p.evaluate(&partial, c.Worker.Idx, &p.req, 0); reason != ReasonNone {
				t.Fatalf("request %d worker %s: %v on the second evaluation", i, c.Worker.ID, reason)
			}
			full, before := c.Terms.TotalUSD, partial.t.TotalUSD
			if !(before <= full) {
				t.Fatalf("request %d worker %s: total before surcharges %v, total %v", i, c.Worker.ID, before, full)
			}
			if c.Terms.MissUSD+c.Terms.InterferenceUSD > 0 {
				if !(before < full) {
					t.Fatalf("request %d worker %s: surcharges %v + %v not left out (%v, %v)", i, c.Worker.ID, c.Terms.MissUSD, c.Terms.InterferenceUSD, before, full)
				}
				surcharged++
			}
			checked++
		}
		for _, w := range p.touched {
			p.lens[w] = 0
		}
		p.mark(p.touched, rowTouched, false)
	}
	if checked < 1000 || surcharged < checked/10 {
		t.Fatalf("only %d candidates checked, %d with a surcharge", checked, surcharged)
	}
}

// Every live worker is accounted for exactly once: rejected with a reason,
// considered, or skipped by its bound.
func TestEveryWorkerIsAccountedFor(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 300, Blocks: 30000, Requests: 200, Seed: 6}, now)
	p := New(BenchCost(), Options{})
	for i := range reqs {
		d := p.Place(f, &reqs[i], now)
		if n := d.Considered + d.Skipped + len(d.Rejections); n != f.Len() {
			t.Fatalf("request %d: %d considered + %d skipped + %d rejected = %d, fleet has %d",
				i, d.Considered, d.Skipped, len(d.Rejections), n, f.Len())
		}
		var counted int
		for _, c := range d.Counts {
			counted += c
		}
		if counted != len(d.Rejections) {
			t.Fatalf("request %d: counts add to %d, %d rejections", i, counted, len(d.Rejections))
		}
	}
}

// A worker that its queue, prefill and decode alone put past the deadline
// is skipped once enough others pass, and rejected with its reason when
// too few do. A doomed worker holding the request's prefix is bounded
// before any group, while no candidate has set the bar, and is deferred
// the same way (settleDoomed) rather than evaluated as it comes.
func TestDoomedWorkersAreSkippedOnlyWhenTheListIsFull(t *testing.T) {
	hashes := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	for _, prefixHolder := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefix holder %v", prefixHolder), func(t *testing.T) {
			specs := []spec{{gpu: "fast", queued: 60000}} // 6 s of queue against a 3 s deadline
			for range 3 {
				specs = append(specs, spec{gpu: "fast"})
			}
			f := build(specs...)
			r := withDeadline(req(schemas.PriorityCritical), 3*time.Second)
			if prefixHolder {
				f.ApplyKV(&schemas.KVEvent{WorkerID: "A", Seq: 1, Kind: schemas.KVStored, Hashes: hashes}, now)
				r = withHashes(r, hashes)
			}

			o := testOpts()
			o.Explain = 2
			d := place(t, f, r, o)
			if !d.OK() || d.Skipped != 1 || len(d.Rejections) != 0 || d.Considered != 3 {
				t.Fatalf("full list: considered %d skipped %d rejections %v", d.Considered, d.Skipped, d.Counts)
			}

			o.Explain = 8
			d = place(t, f, r, o)
			if d.Skipped != 0 || d.Counts[ReasonDeadlineBusy] != 1 || d.Rejections[0].Worker.ID != "A" || d.Considered != 3 {
				t.Fatalf("list not full: considered %d skipped %d rejections %v", d.Considered, d.Skipped, d.Counts)
			}
		})
	}
}

// A placer reused while the fleet changes under it (heartbeats, KV events,
// bookings, removals, new workers in recycled slots) decides exactly as a
// new placer does: its copy of the fleet misses no change.
func TestReusedPlacerSeesEveryFleetChange(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 60, Blocks: 6000, Requests: 40, Seed: 7}, now)
	live := New(BenchCost(), Options{})
	rng := rand.New(rand.NewPCG(7, 7))
	gpus := []string{"b200", "h100", "a100", "l4"}
	states := []string{schemas.WeightHot, schemas.WeightSleeping, schemas.WeightCold}
	booked := []string{}
	at := now
	for step := range 400 {
		w := f.Workers()[rng.IntN(len(f.Workers()))]
		switch op := rng.IntN(6); {
		case op == 0 && w != nil:
			gpu := gpus[rng.IntN(len(gpus))]
			f.ApplyHeartbeat(&schemas.Heartbeat{
				WorkerID: w.ID, GPU: gpu, TP: 1 + rng.IntN(2), HBMTotalBytes: 80 << 30, HBMFreeBytes: uint64(rng.IntN(40)) << 30,
				KVBlocksTotal: 20000, KVBlocksFree: rng.IntN(20000), BlockSize: 16, Draining: rng.IntN(10) == 0,
				Models:  []schemas.ModelState{{Name: "llama-8b", Dtype: "bf16", State: states[rng.IntN(len(states))]}},
				Running: rng.IntN(64), QueuedTokens: rng.IntN(20000), PricePerHour: float64(rng.IntN(3)),
			}, at.Add(-time.Duration(rng.IntN(4000))*time.Millisecond))
		case op == 1 && w != nil:
			id := fmt.Sprintf("b%d", step)
			if err := f.Reserve(w.ID, id, schemas.Priorities[rng.IntN(4)], rng.IntN(4000), 100, rng.IntN(500), at); err == nil {
				booked = append(booked, id)
			}
		case op == 2 && len(booked) > 0:
			f.Unreserve(booked[rng.IntN(len(booked))])
		case op == 3 && w != nil && f.Len() > 20:
			f.Remove(w.ID)
		case op == 4:
			f.ApplyHeartbeat(&schemas.Heartbeat{
				WorkerID: fmt.Sprintf("new%d", step), GPU: gpus[rng.IntN(len(gpus))], TP: 1, HBMTotalBytes: 80 << 30,
				KVBlocksTotal: 20000, KVBlocksFree: 15000, BlockSize: 16,
				Models: []schemas.ModelState{{Name: "llama-8b", Dtype: "bf16", State: schemas.WeightHot}},
			}, at)
		case op == 5 && w != nil:
			f.ApplyKV(&schemas.KVEvent{WorkerID: w.ID, Kind: schemas.KVStored, Hashes: reqs[rng.IntN(len(reqs))].BlockHashes[:10]}, at)
		}
		r := &reqs[step%len(reqs)]
		got := live.Place(f, r, at)
		gw, gt, gc, gs, gr := got.Worker, got.Terms, append([]Candidate(nil), got.Candidates...), got.Skipped, append([]Rejection(nil), got.Rejections...)
		want := New(BenchCost(), Options{}).Place(f, r, at)
		if gw != want.Worker || !sameTerms(gt, want.Terms) || gs != want.Skipped || len(gc) != len(want.Candidates) || len(gr) != len(want.Rejections) {
			t.Fatalf("step %d: reused placer picked %v (%d candidates, %d skipped, %d rejected), new one %v (%d, %d, %d)",
				step, gw, len(gc), gs, len(gr), want.Worker, len(want.Candidates), want.Skipped, len(want.Rejections))
		}
		for k := range gr {
			if gr[k] != want.Rejections[k] {
				t.Fatalf("step %d: rejection %d differs", step, k)
			}
		}
	}
}

// sameTerms compares breakdowns, NaN-free by construction, field by field.
func sameTerms(a, b Terms) bool { return a == b && !math.IsNaN(a.TotalUSD) }

// Residencies are cached per model; more models than the cache keeps, and
// a model changing state between placements, still decide as a new placer.
func TestResidencyCacheFollowsModelsAndStates(t *testing.T) {
	f := fleet.New(fleet.Options{})
	hb := func(id, model, state string) {
		f.ApplyHeartbeat(&schemas.Heartbeat{
			WorkerID: id, GPU: "fast", TP: 1, HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30,
			KVBlocksTotal: 1000, KVBlocksFree: 800, BlockSize: 16,
			Models: []schemas.ModelState{{Name: model, Dtype: "bf16", State: state}},
		}, now)
	}
	live := New(testCost{}, testOpts())
	for k := range maxModelKeys + 10 {
		model := fmt.Sprintf("m%d", k)
		// A holds the model cold, B hot; then they swap.
		hb("A", model, schemas.WeightCold)
		hb("B", model, schemas.WeightHot)
		r := req(schemas.PriorityStandard)
		r.Model = model
		if d := live.Place(f, r, now); winner(d) != "B" || d.Terms.LoadSeconds != 0 {
			t.Fatalf("%s: picked %s with load %v, want the hot B", model, winner(d), d.Terms.LoadSeconds)
		}
		hb("A", model, schemas.WeightHot)
		hb("B", model, schemas.WeightCold)
		if d := live.Place(f, r, now); winner(d) != "A" {
			t.Fatalf("%s after the swap: picked %s, want A", model, winner(d))
		}
	}
	if len(live.modelIdx) > maxModelKeys {
		t.Fatalf("%d residency columns kept, bound %d", len(live.modelIdx), maxModelKeys)
	}
}

// A weight state first met on a worker in the middle of a placement, after
// its class was prepared for the request, still gets its load time.
func TestLoadOfAStateFirstSeenMidPlacement(t *testing.T) {
	f := build(spec{gpu: "fast"}, spec{gpu: "fast", state: schemas.WeightCold})
	o := testOpts()
	o.Explain = 10
	p := New(testCost{}, o)
	loadOf := func(d *Decision, id string) float64 {
		for _, c := range d.Candidates {
			if c.Worker.ID == id {
				return c.Terms.LoadSeconds
			}
		}
		t.Fatalf("%s not a candidate: %v", id, d.Counts)
		return 0
	}
	if got := loadOf(p.Place(f, req(schemas.PriorityStandard), now), "B"); got != 20 {
		t.Fatalf("cold B: load_s %v, want 20", got)
	}
	f.ApplyHeartbeat(&schemas.Heartbeat{
		WorkerID: "B", GPU: "fast", TP: 1, HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30,
		KVBlocksTotal: 1000, KVBlocksFree: 800, BlockSize: 16,
		Models: []schemas.ModelState{{Name: "m", Dtype: "bf16", State: schemas.WeightSleeping}},
	}, now)
	if got := loadOf(p.Place(f, req(schemas.PriorityStandard), now), "B"); got != 2 {
		t.Fatalf("sleeping B: load_s %v, want 2", got)
	}
}

// variedFleetNamed is the synthetic fleet with a fifth of its workers
// changed in the ways the synthetic one never is: draining, stale, no KV
// capacity reported, their own load-time estimates, no price of their own,
// TP 2, a GPU the cost model does not know, or an architecture without
// FP8; its GPU and model names replaced by rename's (rooflineNames: for
// perf's predictor).
func variedFleetNamed(t *testing.T, seed uint64, rename map[string]string) (*fleet.Fleet, []Request) {
	t.Helper()
	name := func(s string) string {
		if n, ok := rename[s]; ok {
			return n
		}
		return s
	}
	f, reqs := Synthetic(SyntheticConfig{Workers: 300, Blocks: 30000, Requests: 150, Seed: seed, Rename: rename}, now)
	rng := rand.New(rand.NewPCG(seed, 99))
	for _, w := range f.Workers() {
		if rng.IntN(5) != 0 {
			continue
		}
		idle := rng.IntN(4) == 0 // nothing running or queued: the class bound is near its own
		hb := &schemas.Heartbeat{
			WorkerID: w.ID, GPU: w.GPU, Arch: w.Arch, TP: w.TP, HBMTotalBytes: w.HBMTotal, HBMFreeBytes: w.HBMFree,
			KVBlocksTotal: w.KVBlocksTotal, KVBlocksFree: w.KVBlocksFree, BlockSize: w.BlockSize,
			Models: append([]schemas.ModelState(nil), w.Models...), Running: w.Running, QueuedTokens: w.QueuedTokens,
			MaxBatch: w.MaxBatch, PricePerHour: w.PricePerHour,
		}
		if idle {
			hb.Running, hb.QueuedTokens = 0, 0
		} else if rng.IntN(2) == 0 {
			// An engine that shares its prefill steps (sharedQueue): the
			// bounds must price the queue as queueTerm does.
			hb.StepCap, hb.Prefilling, hb.Waiting = true, rng.IntN(6), rng.IntN(3)
		}
		seen := now
		switch rng.IntN(9) {
		case 0:
			hb.Draining = true
		case 1:
			seen = now.Add(-10 * time.Second)
		case 2:
			hb.KVBlocksTotal, hb.KVBlocksFree, hb.BlockSize = 0, 0, 0
		case 3:
			for k := range hb.Models {
				if hb.Models[k].State != schemas.WeightHot {
					hb.Models[k].LoadSeconds = float64(1 + rng.IntN(30))
				}
			}
		case 4:
			hb.PricePerHour = 0
		case 5:
			hb.TP = 2
		case 6:
			hb.GPU = "tpu"
		case 7:
			hb.Arch = "ampere"
		case 8:
			// A full cache whose blocks some classes may reclaim from others.
			hb.KVBlocksFree = rng.IntN(50)
			used := hb.KVBlocksTotal - hb.KVBlocksFree
			hb.KVBlocksByClass = map[string]int{}
			for _, c := range schemas.Priorities[:3] {
				n := rng.IntN(used/3 + 1)
				hb.KVBlocksByClass[c] = n
				used -= n
			}
			hb.KVBlocksByClass[schemas.PriorityBatch] = used
		}
		f.ApplyHeartbeat(hb, seen)
	}
	for i := range reqs {
		r := &reqs[i]
		switch rng.IntN(6) {
		case 0:
			r.Model, r.Dtype = name("llama-70b"), "fp8"
		case 1:
			r.Deadline = time.Time{}
		case 2:
			r.Exclude = []string{f.Workers()[rng.IntN(len(f.Workers()))].ID}
		case 3:
			r.Workflow = &schemas.Workflow{ID: "wf", Step: 1 + rng.IntN(4), Of: 4}
			r.WorkflowDeadline = now.Add(time.Duration(5+rng.IntN(20)) * time.Second)
		case 4:
			r.Priority = ""
		}
	}
	return f, reqs
}

// Pruning changes nothing a decision is judged by, whatever the options:
// a placer that keeps every candidate (and so never skips one) picks the
// same worker with the same breakdown, the cheapest-first lists agree, and
// so does Unresolvable.
func TestPruningKeepsTheWinnerAcrossOptions(t *testing.T) {
	weights := func(model, _ string) uint64 {
		if model == "llama-70b" {
			return 70 << 30
		}
		return 16 << 30
	}
	variants := map[string]Options{"defaults": {}, "weights": {WeightBytes: weights}, "explain 1": {Explain: 1}, "explain 3": {Explain: 3}}
	for _, a := range Axes {
		variants["no "+a] = Options{Disabled: map[string]bool{a: true}, WeightBytes: weights}
	}
	// The queue priced as shared (sharedQueue) in every class, under each
	// variant: its bounds must hold wherever the scan takes them.
	for name, o := range maps.Clone(variants) {
		o.SharedPrefill = map[string]bool{}
		for _, c := range schemas.Priorities {
			o.SharedPrefill[c] = true
		}
		variants["shared prefill, "+name] = o
	}
	for _, cm := range costModels {
		f, reqs := variedFleetNamed(t, 11, cm.rename)
		for name, o := range variants {
			t.Run(cm.name+"/"+name, func(t *testing.T) {
				pruningKeepsTheWinner(t, f, reqs, cm.cost, o)
			})
		}
	}
}

// costModels are the cost models the scan's tests run under: the linear
// stand-in, whose decode does not read the context, and perf's roofline
// predictor, whose decode prices the KV a batch holds (the bounds' KV
// terms are exercised only there), each with the names it knows.
var costModels = []struct {
	name   string
	cost   func() CostModel
	rename map[string]string
}{
	{"linear", func() CostModel { return BenchCost() }, nil},
	{"roofline", func() CostModel { return perf.NewPredictor(nil) }, rooflineNames},
}

func pruningKeepsTheWinner(t *testing.T, f *fleet.Fleet, reqs []Request, cost func() CostModel, o Options) {
	t.Helper()
	pruned := New(cost(), o)
	full := o
	full.Explain = 1 << 20
	all := New(cost(), full)
	skipped, placed := 0, 0
	for i := range reqs {
		a := pruned.Place(f, &reqs[i], now)
		aw, at, ac, au := a.Worker, a.Terms, append([]Candidate(nil), a.Candidates...), a.Unresolvable
		skipped += a.Skipped
		b := all.Place(f, &reqs[i], now)
		if aw != b.Worker || at != b.Terms || au != b.Unresolvable {
			t.Fatalf("request %d: pruned picked %v (unresolvable %v), full %v (%v)", i, aw, au, b.Worker, b.Unresolvable)
		}
		if len(ac) != min(len(b.Candidates), pruned.Options().Explain) {
			t.Fatalf("request %d: %d candidates kept, full placer has %d", i, len(ac), len(b.Candidates))
		}
		for k := range ac {
			if ac[k] != b.Candidates[k] {
				t.Fatalf("request %d: candidate %d differs", i, k)
			}
		}
		if aw != nil {
			placed++
		}
	}
	if skipped == 0 || placed < len(reqs)/2 {
		t.Fatalf("skipped %d workers, placed %d of %d", skipped, placed, len(reqs))
	}
}

// A group's bound, and its decode bucket's, is never above the bound,
// deadline-miss term included (refinedBound), of any of its workers that
// holds no cached prefix, for every request and group of a varied fleet,
// under each cost model.
func TestGroupBoundIsUnderItsWorkers(t *testing.T) {
	for _, cm := range costModels {
		t.Run(cm.name, func(t *testing.T) {
			f, reqs := variedFleetNamed(t, 12, cm.rename)
			p := New(cm.cost(), Options{})
			compared := 0
			for i := range reqs {
				r := &reqs[i]
				p.Place(f, r, now)
				// Place leaves the classes prepared and groups bounded for r (its
				// copy, with the defaults filled in, which these requests already
				// have but for the priority).
				if r.Priority == "" {
					continue
				}
				compared += checkGroupBounds(t, p, i, r)
			}
			if compared < 10000 {
				t.Fatalf("only %d comparisons", compared)
			}
		})
	}
}

// A group's decode_s (groupDecode) is the least its members' can be, KV
// terms and, for a critical request, the floor included: never over a
// member's decode without a cached prefix, and equal to it for a group of
// one, under each cost model. Bounded at the decode alone, a critical
// request's groups were far under their members, and it read two to three
// times as many workers one by one as the other classes.
func TestGroupDecodeIsItsMembersLeast(t *testing.T) {
	for _, cm := range costModels {
		t.Run(cm.name, func(t *testing.T) {
			f, reqs := variedFleetNamed(t, 13, cm.rename)
			p := New(cm.cost(), Options{})
			exact := map[string]int{}
			for i := range reqs {
				p.Place(f, &reqs[i], now)
				r := &p.req
				for g, members := range p.view.members {
					cl := &p.classes[g/bands/decodeBuckets]
					if cl.epoch != p.epoch || len(members) == 0 || isInf(decodeAlone(cl)) {
						continue // not prepared, or a GPU the cost model cannot run the model on
					}
					gd := p.groupDecode(cl, &p.view.groups[g], g/bands%decodeBuckets)
					for _, w := range members {
						d := p.decode(cl, r, &p.view.hot[w], p.view.held[w], 0)
						if !(gd <= d) {
							t.Fatalf("request %d (%s) group %d: decode %v over worker %d's %v", i, r.Priority, g, gd, w, d)
						}
						if len(members) == 1 && gd != d {
							t.Fatalf("request %d (%s) group %d of one: decode %v, its worker's %v", i, r.Priority, g, gd, d)
						}
					}
					if len(members) == 1 {
						exact[r.Priority]++
					}
				}
			}
			for _, c := range schemas.Priorities {
				if exact[c] < 10 {
					t.Fatalf("only %d groups of one compared for %s requests (%v)", exact[c], c, exact)
				}
			}
		})
	}
}

// A class too slow to compete is passed over unread: its stale worker is
// skipped, not found stale, while a stale worker of the competing class is.
func TestAClassThatCannotCompeteIsNotRead(t *testing.T) {
	f := build(
		spec{gpu: "fast"}, spec{gpu: "fast"}, spec{gpu: "fast", seenAgo: time.Minute},
		spec{gpu: "slow"}, spec{gpu: "slow", seenAgo: time.Minute},
	)
	o := testOpts()
	o.Explain = 2
	d := place(t, f, req(schemas.PriorityCritical), o)
	if winner(d) != "A" && winner(d) != "B" {
		t.Fatalf("picked %s", winner(d))
	}
	if d.Counts[ReasonStale] != 1 || d.Rejections[0].Worker.ID != "C" || d.Skipped != 2 || d.Considered != 2 {
		t.Fatalf("stale %d (first %s), skipped %d, considered %d", d.Counts[ReasonStale], d.Rejections[0].Worker.ID, d.Skipped, d.Considered)
	}
}

// One placer used on two fleets in turn (a simulator reusing its policy
// across runs) decides on each as a new placer would.
func TestPlacerMovesBetweenFleets(t *testing.T) {
	f1, reqs := Synthetic(SyntheticConfig{Workers: 80, Blocks: 8000, Requests: 30, Seed: 21}, now)
	f2, _ := Synthetic(SyntheticConfig{Workers: 50, Blocks: 5000, Requests: 1, Seed: 22}, now)
	shared := New(BenchCost(), Options{})
	for i := range reqs {
		f := []*fleet.Fleet{f1, f2}[i%2]
		got := shared.Place(f, &reqs[i], now)
		gw, gt, gs, gr := got.Worker, got.Terms, got.Skipped, len(got.Rejections)
		want := New(BenchCost(), Options{}).Place(f, &reqs[i], now)
		if gw != want.Worker || gt != want.Terms || gs != want.Skipped || gr != len(want.Rejections) {
			t.Fatalf("request %d on fleet %d: shared placer picked %v, a new one %v", i, i%2+1, gw, want.Worker)
		}
	}
}

// A kept placer's queue orders stay exact through bookings, releases and
// heartbeats that move workers' queues, batches and classes: each group's
// byQueue[k] is its members ordered by queue[k], then Idx.
func TestQueueOrdersFollowTheFleet(t *testing.T) {
	f, reqs := Synthetic(SyntheticConfig{Workers: 200, Blocks: 5000, Requests: 300, Seed: 31}, now)
	p := New(BenchCost(), Options{})
	rng := rand.New(rand.NewPCG(31, 32))
	var booked []string
	for i := range reqs {
		r := &reqs[i]
		d := p.Place(f, r, now)
		if d.OK() {
			prefill, out, blocks := d.Booking(r.PromptTokens, r.OutputTokens)
			if err := f.Reserve(d.Worker.ID, r.ID, r.Priority, prefill, out, blocks, now); err != nil {
				t.Fatal(err)
			}
			booked = append(booked, r.ID)
		}
		if len(booked) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(booked))
			f.Unreserve(booked[k])
			booked = slices.Delete(booked, k, k+1)
		}
		if rng.IntN(4) == 0 {
			w := f.Workers()[rng.IntN(len(f.Workers()))]
			f.ApplyHeartbeat(&schemas.Heartbeat{
				WorkerID: w.ID, GPU: []string{"h100", "a100", "l4"}[rng.IntN(3)], TP: 1,
				HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30, KVBlocksTotal: 50000, KVBlocksFree: 30000, BlockSize: 16,
				Running: rng.IntN(40), QueuedTokens: rng.IntN(6000),
				QueuedTokensByClass: map[string]int{schemas.PriorityBatch: rng.IntN(3000), schemas.PriorityInteractive: rng.IntN(1000)},
			}, now)
		}
	}
	p.Place(f, &reqs[0], now)
	v := &p.view
	for g, members := range v.members {
		for k, q := range v.byQueue[g] {
			if !slices.Equal(slices.Sorted(slices.Values(q)), members) {
				t.Fatalf("group %d rank %d: queue order holds %v, members %v", g, k, q, members)
			}
			if !slices.IsSortedFunc(q, func(a, b int32) int {
				if c := cmp.Compare(v.hot[a].queue[k], v.hot[b].queue[k]); c != 0 {
					return c
				}
				return cmp.Compare(a, b)
			}) {
				t.Fatalf("group %d rank %d: not in queue order", g, k)
			}
		}
	}
}

// checkGroupBounds checks, after p placed request i (r), that no group's
// bound nor its decode bucket's is over the refined bound of any of its
// members, and returns how many it compared.
func checkGroupBounds(t *testing.T, p *Placer, i int, r *Request) int {
	t.Helper()
	compared := 0
	for g, members := range p.view.members {
		cl := &p.classes[g/bands/decodeBuckets]
		if cl.epoch != p.epoch || len(members) == 0 {
			continue
		}
		lo := g / bands % decodeBuckets
		bound := p.groupBound(cl, &p.view.groups[g], lo)
		bucket := p.groupBound(cl, &p.view.buckets[g/bands], lo)
		for _, w := range members {
			if lb := p.refinedBound(int32(w), r); !(bound <= lb) || !(bucket <= lb) {
				t.Fatalf("request %d (%s, %d tokens) group %d (%s): bound %v (its bucket's %v) over worker %d's %v", i, r.Priority, r.PromptTokens, g, cl.gpu, bound, bucket, w, lb)
			}
			compared++
		}
	}
	return compared
}
