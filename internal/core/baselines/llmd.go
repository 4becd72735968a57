package baselines

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
)

// LLMDWeights are the scorer weights of an llm-d scheduling profile.
type LLMDWeights struct {
	Name                              string
	PrefixCache, KVUtilization, Queue float64
}

// LLMDDefaults is the llm-d "precise prefix cache aware" well-lit path:
// guides/precise-prefix-cache-aware in github.com/llm-d/llm-d, whose
// EndpointPickerConfig scores with precise-prefix-cache-scorer weight 3,
// kv-cache-utilization-scorer weight 2 and queue-scorer weight 2, then
// max-score-picker. LLMDLoadOnly is the benchmark's "load-scheduling"
// control (llm-d blog "KV-Cache Wins You Can See", 2025-09-24: "load
// scorers: vLLM queueing + kv-cache-utilization").
var (
	LLMDDefaults = LLMDWeights{Name: "llm-d", PrefixCache: 3, KVUtilization: 2, Queue: 2}
	LLMDLoadOnly = LLMDWeights{Name: "llm-d-load", KVUtilization: 2, Queue: 2}
)

// LLMD is llm-d's endpoint picker (EPP) with its scorers, re-implemented
// from the plugin documentation (llm-d-inference-scheduler docs/architecture.md
// "Scorers"; gateway-api-inference-extension scorer plugins):
//
//   - precise-prefix-cache-scorer: the number of leading prompt blocks the
//     pod holds according to the KV-event index (llm-d-kv-cache-manager's
//     longest-prefix scoring), min-max normalised over the candidates;
//   - kv-cache-utilization-scorer: 1 − the pod's KV-cache usage fraction;
//   - queue-scorer: the pod's waiting-queue length, min-max normalised and
//     inverted (shortest queue scores 1; all equal scores 1);
//   - max-score-picker: the highest weighted sum, ties broken at random.
//
// Signal mapping: the KV index is the fleet's prefix index, fed by the
// workers' KV events exactly as llm-d's kvevents.Pool is fed by vLLM's;
// queue length and KV usage come from the worker heartbeat (llm-d scrapes
// vLLM's Prometheus endpoint every 50 ms by default; run the simulator with
// a matching heartbeat period to give it that freshness).
type LLMD struct {
	base
	w       LLMDWeights
	flow    LLMDFlowControl
	lens    []int32
	touched []int32
	scores  []float64
}

// NewLLMD returns an llm-d EPP with weights w.
func NewLLMD(w LLMDWeights) *LLMD {
	return &LLMD{base: newBase(w.Name), w: w, flow: LLMDFlowDefaults}
}

// Place implements placement.Policy.
func (p *LLMD) Place(f *fleet.Fleet, req *placement.Request, now time.Time) *placement.Decision {
	c := p.candidates(f, req.Model, req.Phase, now)
	if len(c) == 0 {
		return p.decide(req, nil)
	}
	best, _ := p.pick(f, req, c)
	return p.decide(req, best)
}

// pick runs the profile's scorers and max-score-picker over c, returning
// the pod chosen and the prompt blocks the KV index says it holds (0 when
// the profile has no prefix scorer).
func (p *LLMD) pick(f *fleet.Fleet, req *placement.Request, c []*fleet.Worker) (best *fleet.Worker, prefixBlocks int) {
	if p.w.PrefixCache > 0 {
		for len(p.lens) < f.Prefix().MaxWorker() {
			p.lens = append(p.lens, 0)
		}
		p.touched = f.Prefix().Match(req.BlockHashes, p.lens, p.touched[:0])
	}
	p.scores = p.scores[:0]
	minP, maxP := int32(1<<30), int32(-1)
	minQ, maxQ := 1<<30, -1
	for _, w := range c {
		l := p.prefixLen(w)
		minP, maxP = min(minP, l), max(maxP, l)
		minQ, maxQ = min(minQ, w.Waiting), max(maxQ, w.Waiting)
	}
	bestS, ties := 0.0, 0
	for _, w := range c {
		s := 0.0
		if p.w.PrefixCache > 0 && maxP > minP {
			s += p.w.PrefixCache * float64(p.prefixLen(w)-minP) / float64(maxP-minP)
		}
		if p.w.KVUtilization > 0 && w.KVBlocksTotal > 0 {
			used := 1 - float64(w.KVBlocksFree)/float64(w.KVBlocksTotal)
			s += p.w.KVUtilization * (1 - used)
		}
		if p.w.Queue > 0 {
			q := 1.0
			if maxQ > minQ {
				q = float64(maxQ-w.Waiting) / float64(maxQ-minQ)
			}
			s += p.w.Queue * q
		}
		switch {
		case best == nil || s > bestS:
			best, bestS, ties = w, s, 1
		case s == bestS:
			ties++
			if p.rng.IntN(ties) == 0 {
				best = w
			}
		}
	}
	if best != nil {
		prefixBlocks = int(p.prefixLen(best))
	}
	for _, t := range p.touched {
		p.lens[t] = 0
	}
	p.touched = p.touched[:0]
	return best, prefixBlocks
}

func (p *LLMD) prefixLen(w *fleet.Worker) int32 {
	if p.w.PrefixCache == 0 || int(w.Idx) >= len(p.lens) {
		return 0
	}
	return p.lens[w.Idx]
}
