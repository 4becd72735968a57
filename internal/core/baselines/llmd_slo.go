package baselines

import (
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/schemas"
)

// LLMDSLOConfig is the tuning of llm-d's predicted-latency scheduling with
// SLO headers, as the llm-d guide's predicted-latency-slo.values.yaml
// (guides/predicted-latency-routing/router in github.com/llm-d/llm-d)
// configures its EndpointPickerConfig: the profile
//
//	predicted-latency-producer
//	  → prefix-cache-affinity-filter (strict-affinity-filter, affinityThreshold 0.99)
//	  → slo-headroom-tier-filter
//	  → prefix-cache-affinity-filter (loose-affinity-filter, affinityThreshold 0.80)
//	  → latency-scorer
//	  → weighted-random-picker
//
// with latency-slo-admitter in front of scheduling. Every field below that
// the values file leaves unset takes the plugin README's default
// (llm-d-router pkg/epp/framework/plugins/...; each field names its file).
type LLMDSLOConfig struct {
	// Name is the policy's name.
	Name string
	// StrictAffinity and LooseAffinity are the two affinity filters'
	// affinityThreshold: the share of the prompt's blocks an endpoint must
	// hold to be sticky (scheduling/filter/prefixcacheaffinity/README.md).
	StrictAffinity, LooseAffinity float64
	// MaxTTFTPenalty is the filters' maxTTFTPenaltyMs: stickiness breaks
	// when the best sticky endpoint's predicted TTFT exceeds the best
	// other's by more (default 18 s). The TTFT is the latency predictor's
	// (ttftSource: latencyPredictor), here the roofline's.
	MaxTTFTPenalty time.Duration
	// Explore is the tier filter's share of requests sent to the negative
	// tier when both tiers exist, so that endpoints recovering from
	// overload are seen again (scheduling/filter/sloheadroomtier: 99 % /
	// 1 %).
	Explore float64
	// TTFTWeight and TPOTWeight blend the normalised headrooms in the
	// latency scorer (scheduling/scorer/latency: ttftWeight 0.8,
	// tpotWeight 0.2).
	TTFTWeight, TPOTWeight float64
	// Most is the scorer's headroomSelectionStrategy "most": prefer the
	// endpoint with the most positive headroom (spread, "more
	// conservative, leaves slack for unexpected spikes"); false is "least",
	// the chart's default: prefer the one closest to its SLO (bin-pack).
	// llm-d-slo runs "most", the stronger of the two here: "least" packs
	// requests onto the endpoints whose predicted headroom is nearest zero,
	// and a prediction that is right on average misses there about half
	// the time (priority-burst, seed 1: high bar 0.068× with "least",
	// 0.707× with "most"; Dynamo 0.841×). llm-d-slo-least is the default
	// strategy, for reference.
	Most bool
	// ColdKV is the KV-cache use below which the SLO admitter counts an
	// endpoint as cold and admits (requestcontrol/admitter/latencyslo: 2 %).
	ColdKV float64
	// Quantile scales the roofline's predictions, which are means, towards
	// the quantile llm-d's sidecars predict (p90): 1.32 would be the p90 of
	// a 25 % relative spread. 0 or 1 uses the means as they are, the
	// default, because it measured better (priority-burst, seed 1, high
	// bar: "most" 0.707× at 1, 0.421× at 1.32; "least" 0.068× at 1, 0.105×
	// at 1.32): the roofline is the engines' own model, so a margin only
	// pushes endpoints that would meet the targets into the negative tier.
	Quantile float64
	// Seed seeds the exploration draw and the weighted random picker.
	Seed uint64
}

// LLMDSLODefaults are the guide's values and the plugins' defaults, but
// for the scorer's strategy, "most" (see Most). LLMDSLOLeast keeps the
// default "least".
var (
	LLMDSLODefaults = LLMDSLOConfig{
		Name: "llm-d-slo", StrictAffinity: 0.99, LooseAffinity: 0.80, MaxTTFTPenalty: 18 * time.Second,
		Explore: 0.01, TTFTWeight: 0.8, TPOTWeight: 0.2, Most: true, ColdKV: 0.02, Seed: Seed,
	}
	LLMDSLOLeast = func() LLMDSLOConfig { c := LLMDSLODefaults; c.Name, c.Most = "llm-d-slo-least", false; return c }()
)

// LLMDSLO is llm-d's predicted-latency scheduling with per-request SLOs
// (llm-d.ai/docs/architecture/advanced/latency-predictor; the
// predicted-latency well-lit path, llm-d.ai/docs/guides/predicted-latency-routing),
// the strongest SLO-aware baseline the anchors ship. The request's targets
// are its x-slo-ttft-ms and x-slo-tpot-ms headers: here Request.TTFTTarget
// and TPOTTarget, which carry the same numbers (schemas.Admitted's
// ttft_target_ms and tpot_target_ms).
//
//   - predicted-latency-producer: per endpoint, a predicted TTFT and TPOT
//     and their headrooms, SLO − predicted (positive meets it). llm-d's
//     sidecars learn p90 TTFT and TPOT online with XGBoost from KV-cache
//     use, input length, waiting and running counts and the prefix score;
//     this port asks internal/core/perf's roofline instead (the CostModel
//     the router holds), the model the simulated engines run on, so the
//     baseline's predictions are as good as any this fleet can have: its
//     best case, not a learning curve. TTFT is the prefill queued ahead of
//     the request on that endpoint (its class and higher: the engine
//     prefills in class order) plus its own uncached prefill, each chunk
//     sharing a step with the decodes running there; TPOT is the decode
//     step at the batch it joins, at the context that batch holds, plus the
//     queued prefill the engine runs in those steps spread over its
//     output. The TTFT budget is what the target leaves after the time
//     the request has already waited.
//   - prefix-cache-affinity-filter: keep the endpoints holding at least the
//     threshold share of the prompt's blocks (the fleet's KV-event index,
//     as llm-d's precise prefix producer reads vLLM's events), unless none
//     does, or the best sticky endpoint's TTFT is worse than the best
//     other's by more than MaxTTFTPenalty.
//   - slo-headroom-tier-filter: split into endpoints meeting both targets
//     and the rest; keep the first with probability 1 − Explore, else the
//     second (one tier alone is kept).
//   - latency-scorer: positive headroom: normalise each headroom over the
//     candidates so the largest scores 1 ("most"; "least": the smallest),
//     and blend them, 0.8 × TTFT's and 0.2 × TPOT's (a dimension with no
//     spread gives its weight to the other). All negative: idle endpoints
//     only, if any; else the least severe deficit bucket (only TPOT
//     negative, then only TTFT, then both), the deficit closest to zero
//     scoring highest. No predictions
//     (no cost model): the composite fallback, KV free share + queue +
//     prefix score, weights 1 each.
//   - weighted-random-picker: A-Res weighted sampling over the scores.
//
// Queue and admission (Gatekeeper): llm-d v0.10's flow control as the
// llm-d baseline runs it (strict priority bands, 60 s TTL, 5,000 per band,
// the lower bands held while every endpoint is saturated), with the
// latency-slo-admitter in front of placement: a sheddable request (llm-d
// priority < 0: here the batch class) is refused when no endpoint is
// predicted to meet both its targets, none is idle and none is cold (KV
// use under ColdKV); other classes always pass it. Inside a band llm-d's
// slo-deadline-ordering-policy serves the earliest submission + TTFT
// target first; the router's queue item carries the request's whole
// deadline, not its TTFT target, so the band is served first come, first
// served, which is that order up to the per-prompt-token part of the
// targets (at most 1 s of an interactive 10k-token prompt's 2 s base).
//
// Gaps, as llm-d documents them: its predictor assumes one GPU type per
// pool; fed the roofline, this port predicts each generation's own speed,
// which llm-d cannot do on a mixed pool — again its best case.
type LLMDSLO struct {
	base
	cfg  LLMDSLOConfig
	cost placement.CostModel
	flow LLMDFlowControl

	lens    []int32
	touched []int32
	ps      []sloPred
	keep    []int
	scores  []float64
}

// sloPred is one candidate's prediction.
type sloPred struct {
	w          *fleet.Worker
	ttft, tpot float64 // seconds
	// hTTFT and hTPOT are the headrooms, target − predicted, in seconds.
	hTTFT, hTPOT float64
	prefix       float64 // share of the prompt's blocks held
	ok           bool    // a prediction exists
}

// NewLLMDSLO returns llm-d's predicted-latency SLO scheduler predicting
// with cost (nil: no predictions, the scorer's composite fallback).
func NewLLMDSLO(cfg LLMDSLOConfig, cost placement.CostModel) *LLMDSLO {
	name := cfg.Name
	if name == "" {
		name = "llm-d-slo"
	}
	return &LLMDSLO{base: newBaseSeed(name, cfg.Seed), cfg: cfg, cost: cost, flow: LLMDFlowDefaults}
}

// Place implements placement.Policy.
func (p *LLMDSLO) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	c := p.candidates(f, req.Model, req.Phase, now)
	if len(c) == 0 {
		return p.decide(req, nil)
	}
	p.predict(f, req, c, now)
	p.keep = p.keep[:0]
	for i := range p.ps {
		p.keep = append(p.keep, i)
	}
	p.affinity(p.cfg.StrictAffinity)
	p.tier()
	p.affinity(p.cfg.LooseAffinity)
	p.score()
	return p.decide(req, p.pick())
}

// predict fills p.ps for the candidates: the predicted-latency producer.
func (p *LLMDSLO) predict(f *fleet.Fleet, req *placement.Request, c []*fleet.Worker, now time.Time) {
	for len(p.lens) < f.Prefix().MaxWorker() {
		p.lens = append(p.lens, 0)
	}
	p.touched = f.Prefix().Match(req.BlockHashes, p.lens, p.touched[:0])
	ttftBudget, tpotBudget := sloBudgets(req, now)
	p.ps = p.ps[:0]
	for _, w := range c {
		held := 0
		if int(w.Idx) < len(p.lens) {
			held = int(p.lens[w.Idx])
		}
		sp := sloPred{w: w}
		if n := len(req.BlockHashes); n > 0 {
			sp.prefix = float64(held) / float64(n)
		}
		if p.cost != nil {
			sp.ttft, sp.tpot = p.latency(w, req, held*blockSize(w))
			if q := p.cfg.Quantile; q > 0 {
				sp.ttft, sp.tpot = q*sp.ttft, q*sp.tpot
			}
			sp.ok = !math.IsInf(sp.ttft, 1) && !math.IsInf(sp.tpot, 1)
			if !sp.ok {
				// The roofline cannot run it there (an unknown or invalid
				// replica): predicted never, finite so scores stay numbers.
				sp.ttft, sp.tpot = 1e6, 1e6
			}
		}
		sp.hTTFT, sp.hTPOT = ttftBudget-sp.ttft, tpotBudget-sp.tpot
		p.ps = append(p.ps, sp)
	}
	for _, t := range p.touched {
		p.lens[t] = 0
	}
	p.touched = p.touched[:0]
}

// sloBudgets are the TTFT seconds the request's target leaves at now and
// its TPOT target; 0 where the request sets none, so the headroom is
// −predicted, as llm-d scores a request without SLO headers.
func sloBudgets(req *placement.Request, now time.Time) (ttft, tpot float64) {
	if req.TTFTTarget > 0 {
		ttft = req.TTFTTarget.Seconds()
		if !req.Submitted.IsZero() && now.After(req.Submitted) {
			ttft -= now.Sub(req.Submitted).Seconds()
		}
	}
	return ttft, req.TPOTTarget.Seconds()
}

func blockSize(w *fleet.Worker) int {
	if w.BlockSize > 0 {
		return w.BlockSize
	}
	return tokens.BlockSize
}

// queueRefTokens is the prefill size the per-token queue rate is read at.
const queueRefTokens = 1024

// latency predicts the request's TTFT and TPOT on w with cached prompt
// tokens already there, from the roofline.
func (p *LLMDSLO) latency(w *fleet.Worker, req *placement.Request, cached int) (ttft, tpot float64) {
	dtype := req.Dtype
	if dtype == "" {
		if m, ok := w.Model(req.Model, ""); ok {
			dtype = m.Dtype
		}
	}
	tp := max(w.TP, 1)
	cached = min(cached, max(req.PromptTokens-1, 0))
	perToken := p.cost.PrefillSeconds(w.GPU, req.Model, dtype, tp, queueRefTokens, 0) / queueRefTokens
	// Prefill queued ahead: the engine prefills in class order, so the
	// classes at and above the request's; all of it runs in the decode
	// steps the request will share.
	rank := max(schemas.PriorityRank(req.Priority), 0)
	ahead, all := 0, w.BookedPromptTokens
	for k := 0; k < fleet.NumClasses; k++ {
		all += w.QueuedByClass[k]
		if k <= rank {
			ahead += w.QueuedByClass[k] + w.BookedPromptByClass[k]
		}
	}
	batch := w.Running + w.Waiting + w.BookedRequests + 1
	ctx := req.PromptTokens + req.OutputTokens/2
	if used := (w.KVBlocksTotal - w.KVBlocksFree) * blockSize(w); batch > 1 && used > 0 {
		// The batch's mean context is what its KV cache holds, with this
		// request's own context added.
		ctx = max(ctx, (used+ctx)/batch)
	}
	step := p.cost.DecodeSeconds(w.GPU, req.Model, dtype, tp, 1, batch, ctx)
	uncached := req.PromptTokens - cached
	chunks := math.Ceil(float64(uncached) / float64(2048))
	ttft = float64(ahead)*perToken + p.cost.PrefillSeconds(w.GPU, req.Model, dtype, tp, uncached, cached) + chunks*step
	out := max(req.OutputTokens, 1)
	tpot = p.cost.DecodeSeconds(w.GPU, req.Model, dtype, tp, out, batch, ctx)/float64(out) + float64(all)*perToken/float64(out)
	return ttft, tpot
}

// affinity is prefix-cache-affinity-filter at threshold over p.keep.
func (p *LLMDSLO) affinity(threshold float64) {
	bestSticky, bestOther := math.Inf(1), math.Inf(1)
	sticky := 0
	for _, i := range p.keep {
		if s := &p.ps[i]; s.prefix >= threshold {
			sticky++
			bestSticky = min(bestSticky, s.ttft)
		} else {
			bestOther = min(bestOther, s.ttft)
		}
	}
	if sticky == 0 || sticky == len(p.keep) {
		return
	}
	// The TTFT load gate: sticky endpoints much slower than the rest lose
	// their stickiness (skipped without predictions).
	if p.cost != nil && p.cfg.MaxTTFTPenalty > 0 && bestSticky-bestOther > p.cfg.MaxTTFTPenalty.Seconds() {
		return
	}
	kept := p.keep[:0]
	for _, i := range p.keep {
		if p.ps[i].prefix >= threshold {
			kept = append(kept, i)
		}
	}
	p.keep = kept
}

// positive is the tier filter's positive tier: both targets met.
func (s *sloPred) positive() bool { return s.ok && s.hTTFT >= 0 && s.hTPOT >= 0 }

// tier is slo-headroom-tier-filter over p.keep.
func (p *LLMDSLO) tier() {
	pos := 0
	for _, i := range p.keep {
		if p.ps[i].positive() {
			pos++
		}
	}
	if pos == 0 || pos == len(p.keep) {
		return
	}
	// The draw is made only when both tiers exist, as the filter makes it.
	want := p.rng.Float64() >= p.cfg.Explore
	kept := p.keep[:0]
	for _, i := range p.keep {
		if p.ps[i].positive() == want {
			kept = append(kept, i)
		}
	}
	p.keep = kept
}

// score is latency-scorer over p.keep, into p.scores (parallel to p.keep).
func (p *LLMDSLO) score() {
	p.scores = p.scores[:0]
	for range p.keep {
		p.scores = append(p.scores, 0)
	}
	if p.cost == nil {
		p.composite()
		return
	}
	anyPos := false
	for _, i := range p.keep {
		anyPos = anyPos || p.ps[i].positive()
	}
	// Which candidates are scored: the positive ones if any; else the idle
	// ones if any; else the least severe deficit bucket.
	in := func(s *sloPred) bool { return s.positive() }
	if !anyPos {
		idle := false
		for _, i := range p.keep {
			idle = idle || p.idle(p.ps[i].w)
		}
		if idle {
			in = func(s *sloPred) bool { return p.idle(s.w) }
		} else {
			best := 3
			for _, i := range p.keep {
				best = min(best, deficit(&p.ps[i]))
			}
			in = func(s *sloPred) bool { return deficit(s) == best }
		}
	}
	loT, hiT, loP, hiP := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, i := range p.keep {
		if s := &p.ps[i]; in(s) {
			loT, hiT = min(loT, s.hTTFT), max(hiT, s.hTTFT)
			loP, hiP = min(loP, s.hTPOT), max(hiP, s.hTPOT)
		}
	}
	wT, wP := p.cfg.TTFTWeight, p.cfg.TPOTWeight
	switch {
	case hiT == loT && hiP == loP:
		wT, wP = 1, 0 // every scored endpoint alike: equal scores
	case hiT == loT:
		wT, wP = 0, 1
	case hiP == loP:
		wT, wP = 1, 0
	}
	// "least" prefers the smallest positive headroom and, below zero, the
	// deficit closest to zero (largest headroom); "most" the largest
	// positive headroom.
	leastPos := anyPos && !p.cfg.Most
	norm := func(h, lo, hi float64) float64 {
		if hi == lo {
			return 1
		}
		if leastPos {
			return (hi - h) / (hi - lo)
		}
		return (h - lo) / (hi - lo)
	}
	for k, i := range p.keep {
		if s := &p.ps[i]; in(s) {
			p.scores[k] = wT*norm(s.hTTFT, loT, hiT) + wP*norm(s.hTPOT, loP, hiP)
		}
	}
}

// deficit is the scorer's bucket of a negative-headroom endpoint: 0 when
// only TPOT misses, 1 when only TTFT, 2 when both.
func deficit(s *sloPred) int {
	switch {
	case s.hTTFT >= 0:
		return 0
	case s.hTPOT >= 0:
		return 1
	}
	return 2
}

// idle is the scorer's idle endpoint: nothing dispatched there by this
// router and nothing running or waiting in its last heartbeat.
func (p *LLMDSLO) idle(w *fleet.Worker) bool {
	return p.outstanding[w.ID] == 0 && w.Running == 0 && w.Waiting == 0 && w.BookedRequests == 0
}

// composite is the scorer's fallback without predictions.
func (p *LLMDSLO) composite() {
	minQ, maxQ := math.MaxInt, math.MinInt
	for _, i := range p.keep {
		q := p.ps[i].w.Waiting
		minQ, maxQ = min(minQ, q), max(maxQ, q)
	}
	for k, i := range p.keep {
		s := &p.ps[i]
		kv := 0.0
		if s.w.KVBlocksTotal > 0 {
			kv = float64(s.w.KVBlocksFree) / float64(s.w.KVBlocksTotal)
		}
		q := 1.0
		if maxQ > minQ {
			q = float64(maxQ-s.w.Waiting) / float64(maxQ-minQ)
		}
		p.scores[k] = kv + q + s.prefix
	}
}

// pick is weighted-random-picker: A-Res (Efraimidis–Spirakis) sampling,
// the largest u^(1/score) wins; zero scores only when every score is zero,
// then uniformly.
func (p *LLMDSLO) pick() *fleet.Worker {
	best, bestKey := -1, math.Inf(-1)
	for k, i := range p.keep {
		u := p.rng.Float64()
		key := math.Inf(-1)
		if s := p.scores[k]; s > 0 {
			key = math.Log(u) / s
		}
		if best < 0 || key > bestKey {
			best, bestKey = i, key
		}
	}
	if math.IsInf(bestKey, -1) {
		best = p.keep[p.rng.IntN(len(p.keep))]
	}
	return p.ps[best].w
}

// QueueDiscipline implements Gatekeeper: llm-d's strict priority bands,
// each served in arrival order (see LLMDSLO), requests leaving by TTL.
func (p *LLMDSLO) QueueDiscipline() queue.Discipline {
	return queue.Discipline{Strict: true, ArrivalOrder: true, NoExpiry: true}
}

// Gate implements Gatekeeper: llm-d's flow control, then the
// latency-slo-admitter for sheddable requests.
func (p *LLMDSLO) Gate(f *fleet.Fleet, req *placement.Request, enqueued time.Time, bandDepth int, now time.Time) Verdict {
	if v := llmdFlowGate(p.flow, req, enqueued, bandDepth, now, func() []*fleet.Worker { return p.candidates(f, req.Model, req.Phase, now) }); v.Reject != nil || v.Hold {
		return v
	}
	// Dispatched from flow control: the admitter runs before scheduling.
	if req.Priority == schemas.PriorityBatch && !p.admits(f, req, now) {
		return Verdict{Reject: schemas.Errf(schemas.CodeShed, "", "llm-d latency-slo-admitter: no endpoint is predicted to meet the request's SLO"), Reason: "slo"}
	}
	return Verdict{}
}

// admits is the latency-slo-admitter: some endpoint predicted to meet both
// targets, or idle, or cold; always without SLO headers or predictions.
func (p *LLMDSLO) admits(f *fleet.Fleet, req *placement.Request, now time.Time) bool {
	if (req.TTFTTarget <= 0 && req.TPOTTarget <= 0) || p.cost == nil {
		return true
	}
	c := p.candidates(f, req.Model, req.Phase, now)
	if len(c) == 0 {
		return true // placement answers a request no endpoint can serve
	}
	p.predict(f, req, c, now)
	for i := range p.ps {
		s := &p.ps[i]
		w := s.w
		kv := 0.0
		if w.KVBlocksTotal > 0 {
			kv = 1 - float64(w.FreeBlocks())/float64(w.KVBlocksTotal)
		}
		if s.positive() || p.idle(w) || kv < p.cfg.ColdKV {
			return true
		}
	}
	return false
}

// llmdSaturated is the utilization detector over ws (see LLMDFlowControl).
func llmdSaturated(fc LLMDFlowControl, ws []*fleet.Worker) bool {
	if len(ws) == 0 {
		return false
	}
	for _, w := range ws {
		kv := 0.0
		if w.KVBlocksTotal > 0 {
			kv = 1 - float64(w.FreeBlocks())/float64(w.KVBlocksTotal)
		}
		if w.Waiting < fc.QueueDepthThreshold && kv < fc.KVCacheUtilThreshold {
			return false
		}
	}
	return true
}
