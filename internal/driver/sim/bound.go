package sim

// The roofline bound of a capacity table: the rate scale at which the
// trace's demand meets what the fleet could serve if every engine ran its
// largest batch all the time. Every policy's capacity reads as a share of
// it, so "2× the best baseline" can be told apart from "2× a baseline that
// reaches a tenth of the limit".

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
)

// ModelBound is one model's part of the bound: its demand at 1× and the
// requests per second the pools serving it could complete at the roofline.
type ModelBound struct {
	Model string `json:"model"`
	// DemandPerSec is the model's arrivals per second in the 1× window.
	DemandPerSec float64 `json:"demand_per_s"`
	// CapacityPerSec sums the pools' roofline completions per second.
	CapacityPerSec float64 `json:"capacity_per_s"`
	// Scale is CapacityPerSec ÷ DemandPerSec.
	Scale float64 `json:"scale"`
}

// BoundScale is the rate scale at which tr's demand (the arrivals in its
// first window, all of it when window ≤ 0) meets cfg's fleet's roofline
// throughput, the least over the models the trace asks for; each model's
// figures come with it.
//
// A replica's roofline throughput is internal/core/perf's step model at
// the engine's largest batch (engine.DefaultMaxBatch, or the fewer
// sequences of the model's mean shape its KV cache holds), each step
// decoding that batch and taking in, as a sliver beside the decodes, the
// uncached prompt tokens that replace the sequences finishing (the prefix
// a global cache of unbounded size would hold counts as cached). It is an
// upper bound, not a prediction: a TPOT target holds the batch smaller,
// prefill arrives in chunks rather than slivers, queues and bursts leave
// engines idle, and a finite cache misses; a policy's capacity at SLO is
// some share of it.
func BoundScale(cfg Config, tr *traces.Trace, window time.Duration) (float64, []ModelBound, error) {
	cfg.fill()
	w := tr.Window(window)
	span := window
	if span <= 0 {
		span = w.Span()
	}
	if len(w.Requests) == 0 || span <= 0 {
		return 0, nil, fmt.Errorf("sim: bound: no demand in the %v window", window)
	}
	type mix struct {
		n                        int
		prompt, output, uncached float64
		seen                     map[uint64]struct{}
	}
	mixes := map[string]*mix{}
	for i := range w.Requests {
		q := &w.Requests[i]
		m := q.Model
		if m == "" {
			m = cfg.Model
		}
		x := mixes[m]
		if x == nil {
			x = &mix{seen: map[uint64]struct{}{}}
			mixes[m] = x
		}
		x.n++
		x.prompt += float64(q.PromptTokens)
		x.output += float64(q.OutputTokens)
		// Blocks seen before in the window are cached; the rest, and the
		// partial block at the end, are computed.
		fresh := q.PromptTokens - len(q.BlockHashes)*tokens.BlockSize
		for _, h := range q.BlockHashes {
			if _, ok := x.seen[h]; !ok {
				x.seen[h] = struct{}{}
				fresh += tokens.BlockSize
			}
		}
		x.uncached += float64(max(fresh, 1))
	}
	names := make([]string, 0, len(mixes))
	for m := range mixes {
		names = append(names, m)
	}
	sort.Strings(names)
	bound := math.Inf(1)
	out := make([]ModelBound, 0, len(names))
	for _, m := range names {
		x := mixes[m]
		n := float64(x.n)
		mb := ModelBound{Model: m, DemandPerSec: n / span.Seconds()}
		for _, g := range cfg.GPUs {
			pm := g.Model
			if pm == "" {
				pm = cfg.Model
			}
			if pm != m {
				continue
			}
			rep, err := perf.NewReplica(cfg.Catalog, g.GPU, m, cfg.Dtype, max(g.TP, 1))
			if err != nil {
				return 0, nil, fmt.Errorf("sim: bound: %w", err)
			}
			mb.CapacityPerSec += float64(g.Count) * rooflineRate(&rep, cfg, x.prompt/n, x.uncached/n, x.output/n)
		}
		mb.Scale = mb.CapacityPerSec / mb.DemandPerSec
		bound = min(bound, mb.Scale)
		out = append(out, mb)
	}
	return roundScale(bound), out, nil
}

// rooflineRate is one replica's completions per second of requests of
// mean prompt tokens (uncached of them computed) and output tokens, at the
// steady state described in BoundScale.
func rooflineRate(rep *perf.Replica, cfg Config, prompt, uncached, output float64) float64 {
	output = math.Max(output, 1)
	ctx := prompt + output/2 // a sequence's mean context over its life
	batch := cfg.MaxBatch
	if batch <= 0 {
		batch = engine.DefaultMaxBatch
	}
	kv := cfg.KVBlocks * tokens.BlockSize
	if kv <= 0 {
		kv = rep.KVBlocks(1, perf.DefaultMemUtil)
	}
	if held := int(float64(kv) / math.Max(ctx, 1)); held >= 1 {
		batch = min(batch, held)
	}
	b := float64(batch)
	step := perf.Batch{DecodeSeqs: batch, DecodeContextTokens: int(b * ctx)}
	// batch/output sequences finish a step; their replacements' prompts
	// are prefilled over the prefix already cached.
	if starts := b / output; uncached > 0 {
		step.PrefillTokens = max(1, int(math.Round(starts*uncached)))
		step.PrefillSeqs = max(1, int(math.Ceil(starts)))
		step.PrefillContext = slicedContext(starts, prompt-uncached, uncached, step.PrefillTokens, step.PrefillSeqs)
	}
	s := rep.StepSeconds(step)
	if s <= 0 || math.IsInf(s, 1) {
		return 0
	}
	return b / s / output
}

// slicedContext is the PrefillContext that makes a step of pn new tokens
// over ps sequences carry the attention of starts whole prompts of
// uncached tokens over a cached prefix. The step model prices causal
// attention over the step's own tokens (perf.StepModel.Step: pn·pc/ps +
// pn²/(2·ps)), but a sliver of a prompt (starts < 1) attends to the whole
// prompt before it: priced as the sliver alone, a 12k-token prompt's
// attention shrank to a sixth and the bound on the prefill-heavy Mooncake
// synthetic trace read 3.9× where the fleet prefills out near 3×. Each
// prompt's attention is 4·nq·hd·(u·cached + u²/2), so the context that
// gives starts of them is ps·(cached + u/2) − pn/2: for whole prompts
// (starts = ps) that is ps·cached, the prefixes they sit on, and for a
// sliver the mean context a chunk of the prompt reads.
func slicedContext(starts, cached, uncached float64, pn, ps int) int {
	return max(0, int(math.Round(float64(ps)*(cached+uncached/2)-float64(pn)/2)))
}
