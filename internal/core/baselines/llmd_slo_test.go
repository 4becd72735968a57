package baselines

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

// sloWorker is one worker's load in an llm-d-slo test fleet.
type sloWorker struct {
	id      string
	gpu     string
	running int
	waiting int
	queued  int // prompt tokens queued for prefill (all critical)
	kvUsed  float64
}

func sloFleet(ws ...sloWorker) *fleet.Fleet {
	f := fleet.New(fleet.Options{})
	for _, w := range ws {
		gpu := w.gpu
		if gpu == "" {
			gpu = "h100"
		}
		total := 20000
		f.ApplyHeartbeat(&schemas.Heartbeat{WorkerID: w.id, GPU: gpu, TP: 1, KVBlocksTotal: total, KVBlocksFree: total - int(w.kvUsed*float64(total)),
			BlockSize: 16, Running: w.running, Waiting: w.waiting, QueuedTokens: w.queued, MaxBatch: 256,
			QueuedTokensByClass: map[string]int{schemas.PriorityCritical: w.queued},
			Models:              []schemas.ModelState{{Name: "llama-3.1-8b", Dtype: "bf16", State: schemas.WeightHot}}}, t0)
	}
	return f
}

func sloReq(id, class string, ttft, tpot time.Duration) *placement.Request {
	return &placement.Request{ID: id, Model: "llama-3.1-8b", Priority: class, PromptTokens: 1000, OutputTokens: 200,
		TTFTTarget: ttft, TPOTTarget: tpot, Submitted: t0}
}

// TestLLMDSLOPrefersHeadroom: the endpoint predicted to meet both targets
// takes the request, whichever target the others miss; without targets
// the lowest predicted latency wins. Each case places many requests on an
// unchanging fleet, so the ~1 % exploration shows as the rest.
func TestLLMDSLOPrefersHeadroom(t *testing.T) {
	// A deep prefill queue misses a 1 s TTFT; a batch of 250 long
	// sequences misses a 30 ms TPOT; an idle H100 meets both.
	queued := sloWorker{id: "queued", running: 8, waiting: 100, queued: 400000, kvUsed: 0.1}
	crowded := sloWorker{id: "crowded", running: 250, kvUsed: 0.9}
	free := sloWorker{id: "free", running: 4, kvUsed: 0.05}
	slowGPU := sloWorker{id: "l40s", gpu: "l40s", running: 4, kvUsed: 0.05}
	for _, tc := range []struct {
		name       string
		fleet      []sloWorker
		ttft, tpot time.Duration
		want       string
		minShare   float64
		least      bool // the chart's default strategy instead of "most"
	}{
		{"only one meets TTFT", []sloWorker{queued, free}, time.Second, time.Second, "free", 0.97, false},
		{"only one meets TPOT", []sloWorker{crowded, free}, time.Minute, 30 * time.Millisecond, "free", 0.97, false},
		{"only one meets both", []sloWorker{queued, crowded, free}, time.Second, 30 * time.Millisecond, "free", 0.97, false},
		// Both meet loose targets: "most" spreads onto the one with more
		// headroom, the H100; "least" bin-packs onto the one with less, the
		// L40S, keeping the H100 free.
		{"most takes the most headroom", []sloWorker{free, slowGPU}, 30 * time.Second, 200 * time.Millisecond, "free", 0.6, false},
		{"least packs the tighter fit", []sloWorker{free, slowGPU}, 30 * time.Second, 200 * time.Millisecond, "l40s", 0.6, true},
		// No SLO headers: headroom is −predicted, the fastest scores
		// highest; the weighted random picker still spreads (the crowded
		// worker's TTFT is as good, its TPOT worse: 0.8 of the score).
		{"no targets: the fastest most often", []sloWorker{queued, crowded, free}, 0, 0, "free", 0.45, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := LLMDSLODefaults
			if tc.least {
				cfg = LLMDSLOLeast
			}
			p := NewLLMDSLO(cfg, perf.NewPredictor(nil))
			if p.Name() != cfg.Name {
				t.Fatalf("name %q, want %q", p.Name(), cfg.Name)
			}
			f := sloFleet(tc.fleet...)
			n, got := 1000, 0
			for i := 0; i < n; i++ {
				d := p.Place(f, sloReq(fmt.Sprint(i), schemas.PriorityInteractive, tc.ttft, tc.tpot), t0)
				if !d.OK() {
					t.Fatalf("placement %d: no worker", i)
				}
				if d.Worker.ID == tc.want {
					got++
				}
				p.Done(fmt.Sprint(i), d.Worker.ID)
			}
			if share := float64(got) / float64(n); share < tc.minShare {
				t.Errorf("%s took %.3f of the requests, want at least %.2f", tc.want, share, tc.minShare)
			}
		})
	}
}

// TestLLMDSLOExplores: with one endpoint meeting the targets and one not,
// about 1 % of requests go to the negative tier; with exploration off,
// none does.
func TestLLMDSLOExplores(t *testing.T) {
	for _, tc := range []struct {
		name     string
		explore  float64
		lo, hi   float64
		negative string
	}{
		{"the default 1 %", LLMDSLODefaults.Explore, 0.005, 0.015, "queued"},
		{"off", 0, 0, 0, "queued"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := LLMDSLODefaults
			cfg.Explore = tc.explore
			p := NewLLMDSLO(cfg, perf.NewPredictor(nil))
			f := sloFleet(sloWorker{id: "queued", running: 8, waiting: 100, queued: 400000, kvUsed: 0.1}, sloWorker{id: "free", running: 4, kvUsed: 0.05})
			n, neg := 10000, 0
			for i := 0; i < n; i++ {
				d := p.Place(f, sloReq(fmt.Sprint(i), schemas.PriorityInteractive, time.Second, 100*time.Millisecond), t0)
				if d.Worker.ID == tc.negative {
					neg++
				}
				p.Done(fmt.Sprint(i), d.Worker.ID)
			}
			if share := float64(neg) / float64(n); share < tc.lo || share > tc.hi {
				t.Errorf("negative tier took %.4f, want within [%g, %g]", share, tc.lo, tc.hi)
			}
		})
	}
}

// TestLLMDSLODeterministic: one seed gives one sequence of picks; another
// seed another (the picker and the exploration draw are seeded).
func TestLLMDSLODeterministic(t *testing.T) {
	run := func(seed uint64) []string {
		cfg := LLMDSLODefaults
		cfg.Seed = seed
		p := NewLLMDSLO(cfg, perf.NewPredictor(nil))
		f := sloFleet(sloWorker{id: "a", running: 8, kvUsed: 0.1}, sloWorker{id: "b", running: 12, kvUsed: 0.1},
			sloWorker{id: "c", running: 16, kvUsed: 0.2}, sloWorker{id: "d", gpu: "a100-80g", running: 2})
		var out []string
		for i := 0; i < 300; i++ {
			d := p.Place(f, sloReq(fmt.Sprint(i), schemas.PriorityInteractive, 2*time.Second, 75*time.Millisecond), t0)
			out = append(out, d.Worker.ID)
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	same := func(x, y []string) bool { return fmt.Sprint(x) == fmt.Sprint(y) }
	if !same(a, b) {
		t.Error("the same seed gave two sequences of picks")
	}
	if same(a, c) {
		t.Error("seeds 7 and 8 gave the same 300 picks: the picker is not seeded")
	}
}

// TestLLMDSLOGate: the SLO admitter refuses a sheddable (batch) request
// no endpoint is predicted to meet, unless one is idle or cold; other
// classes pass it; flow control's TTL and saturation hold as for llm-d.
func TestLLMDSLOGate(t *testing.T) {
	busy := []sloWorker{{id: "a", running: 200, queued: 400000, kvUsed: 0.5}, {id: "b", running: 200, queued: 400000, kvUsed: 0.5}}
	for _, tc := range []struct {
		name     string
		fleet    []sloWorker
		class    string
		ttft     time.Duration
		queued   time.Duration // how long it has waited in the queue
		want     string        // "open", "hold", "reject"
		cost     bool
		reason   string
		saturate bool
	}{
		{"batch that no endpoint meets is refused", busy, schemas.PriorityBatch, time.Second, 0, "reject", true, "slo", false},
		{"batch that one endpoint meets passes", append(busy[:1:1], sloWorker{id: "c", running: 2, kvUsed: 0.1}), schemas.PriorityBatch, 30 * time.Second, 0, "open", true, "", false},
		{"a cold endpoint admits", append(busy[:1:1], sloWorker{id: "c", running: 3, queued: 400000}), schemas.PriorityBatch, time.Second, 0, "open", true, "", false},
		{"interactive is never shed by the admitter", busy, schemas.PriorityInteractive, time.Second, 0, "open", true, "", false},
		{"without predictions the admitter passes", busy, schemas.PriorityBatch, time.Second, 0, "open", false, "", false},
		{"past the TTL it is rejected", busy, schemas.PriorityInteractive, time.Second, 61 * time.Second, "reject", true, "ttl", false},
		{"a saturated pool holds the lower bands", busy, schemas.PriorityStandard, time.Second, 0, "hold", true, "pool saturated", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cost placement.CostModel
			if tc.cost {
				cost = perf.NewPredictor(nil)
			}
			p := NewLLMDSLO(LLMDSLODefaults, cost)
			ws := tc.fleet
			if tc.saturate {
				ws = nil
				for _, w := range tc.fleet {
					w.waiting = 10
					ws = append(ws, w)
				}
			}
			f := sloFleet(ws...)
			now := t0.Add(tc.queued)
			v := p.Gate(f, sloReq("r", tc.class, tc.ttft, 50*time.Millisecond), t0, 1, now)
			got := "open"
			switch {
			case v.Reject != nil:
				got = "reject"
			case v.Hold:
				got = "hold"
			}
			if got != tc.want || (tc.reason != "" && v.Reason != tc.reason) {
				t.Errorf("verdict %v, want %s (%s)", v, tc.want, tc.reason)
			}
		})
	}
}

// TestLLMDSLOLatency: the predictions move the way the engine does — a
// deeper queue ahead raises TTFT, a longer cached prefix lowers it, a
// bigger batch raises TPOT, a lower class's queue does not delay a
// critical request's first token.
func TestLLMDSLOLatency(t *testing.T) {
	p := NewLLMDSLO(LLMDSLODefaults, perf.NewPredictor(nil))
	f := sloFleet(sloWorker{id: "idle"}, sloWorker{id: "queued", queued: 50000}, sloWorker{id: "batch", running: 128, kvUsed: 0.5})
	w := map[string]*fleet.Worker{}
	for _, x := range f.Workers() {
		if x != nil {
			w[x.ID] = x
		}
	}
	r := sloReq("r", schemas.PriorityCritical, time.Second, 50*time.Millisecond)
	idleTTFT, idleTPOT := p.latency(w["idle"], r, 0)
	qTTFT, _ := p.latency(w["queued"], r, 0)
	cachedTTFT, _ := p.latency(w["idle"], r, 800)
	_, batchTPOT := p.latency(w["batch"], r, 0)
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{fmt.Sprintf("queue raises TTFT (%.3f > %.3f s)", qTTFT, idleTTFT), qTTFT > idleTTFT+0.5},
		{fmt.Sprintf("a cached prefix lowers TTFT (%.4f < %.4f s)", cachedTTFT, idleTTFT), cachedTTFT < idleTTFT},
		{fmt.Sprintf("a batch raises TPOT (%.4f > %.4f s)", batchTPOT, idleTPOT), batchTPOT > idleTPOT},
		{"finite", !math.IsInf(idleTTFT, 0) && !math.IsNaN(idleTPOT)},
	} {
		if !c.ok {
			t.Error(c.name)
		}
	}
	// A standard request queues behind the critical tokens; a critical one
	// behind a standard queue does not.
	f2 := fleet.New(fleet.Options{})
	f2.ApplyHeartbeat(&schemas.Heartbeat{WorkerID: "s", GPU: "h100", TP: 1, KVBlocksTotal: 20000, KVBlocksFree: 20000, BlockSize: 16, QueuedTokens: 50000,
		QueuedTokensByClass: map[string]int{schemas.PriorityStandard: 50000}, Models: []schemas.ModelState{{Name: "llama-3.1-8b", Dtype: "bf16", State: schemas.WeightHot}}}, t0)
	ws := f2.Workers()
	crit, _ := p.latency(ws[0], sloReq("c", schemas.PriorityCritical, time.Second, 0), 0)
	std, _ := p.latency(ws[0], sloReq("s", schemas.PriorityStandard, time.Second, 0), 0)
	if !(std > crit+0.5) {
		t.Errorf("standard TTFT %.3f s, critical %.3f s: the standard queue should delay only its class and lower", std, crit)
	}
}
