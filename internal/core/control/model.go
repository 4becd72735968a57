package control

import (
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// The controller sizes the fleet with the same roofline model the engine
// runs on (internal/core/perf), so that its notion of a replica's capacity is
// the one the workers actually have.

// TargetBatch is the largest concurrent batch whose mean step — the
// decodes, with the prefill that replaces finishing sequences run as the
// engine runs it (steadyStep) — stays within itl, capped by KV capacity and
// engine.DefaultMaxBatch; at least 1.
func TargetBatch(rep perf.Replica, mix Mix, itl time.Duration) int {
	in, out := int(math.Round(mix.PromptTokens)), max(1, int(math.Round(mix.OutputTokens)))
	lo, hi := 1, engine.DefaultMaxBatch
	// A sequence holds its prompt and, on average over its life, half its
	// output in KV: sizing the batch by the full in+out would halve it for
	// long answers.
	if kvCap := rep.KVBlocks(1, perf.DefaultMemUtil) / max(in+out/2, 1); kvCap >= 1 {
		hi = min(hi, kvCap)
	}
	// Step time grows with the batch: binary search the crossing.
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if steadyStep(rep, mix, mid) <= itl.Seconds() {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// Capacity is one replica's modelled requests per second for the mix at
// its target batch (before the planning utilisation is applied).
func Capacity(rep perf.Replica, mix Mix, itl time.Duration) float64 {
	b := TargetBatch(rep, mix, itl)
	step := steadyStep(rep, mix, b)
	if step <= 0 || math.IsInf(step, 1) {
		return 0
	}
	return float64(b) / step / math.Max(mix.OutputTokens, 1)
}

// RequestSeconds is a request's modelled time decoding in the batch: its
// output tokens at the mean step of the target batch.
func RequestSeconds(rep perf.Replica, mix Mix, itl time.Duration) float64 {
	return steadyStep(rep, mix, TargetBatch(rep, mix, itl)) * math.Max(mix.OutputTokens, 1)
}

// steadyStep is the mean engine step of a replica that keeps batch
// sequences of the mix decoding and prefills the prompts that replace the
// ones finishing: batch·prompt/output prompt tokens a step on average, which
// the engine does not spread thinly over every step (a steady state in
// which each step carries a sliver of prefill, as perf.SteadyState
// assumes, lets that compute hide under the decodes' memory reads: for
// 12k-token prompts it said 2.1 requests/s per H100 where the engine
// completes 1.2, capacity_test.go) but runs in chunks beside the decodes
// (engine.planPrefills) — the budget the decodes leave, or one prompt
// where prompts are shorter — so a share of the steps carry a chunk and
// the rest decode alone. A
// chunk's attention reads the prompt's earlier chunks: over a whole prompt
// of L tokens it costs L²/2 token-pairs however it is chunked, so the
// chunk is costed at the mix's size-biased prompt length E[L²]/E[L] (the
// length the average prefill token belongs to), not the mean: a tail of
// 100k-token prompts in a 12k-token mean is where the prefill time goes.
// +Inf when the batch leaves no room for a chunk in the token budget.
func steadyStep(rep perf.Replica, mix Mix, batch int) float64 {
	in, out := math.Max(mix.PromptTokens, 1), math.Max(mix.OutputTokens, 1)
	ctx := int(in + out/2)
	dec := perf.Batch{DecodeSeqs: batch, DecodeContextTokens: batch * ctx}
	perStep := float64(batch) * in / out
	room := engine.DefaultTokenBudget - batch
	if room < tokens.BlockSize {
		return math.Inf(1)
	}
	chunkTok := math.Min(float64(room), sizeBiasedPrompt(mix))
	share := perStep / chunkTok
	if share >= 1 {
		// More prompt tokens to take in per step than the budget leaves:
		// every step prefills, as much as the decodes need replaced.
		chunkTok, share = perStep, 1
	}
	chunk := dec
	chunk.PrefillTokens = int(math.Round(chunkTok))
	chunk.PrefillSeqs, chunk.PrefillContext = prefillShape(mix, chunkTok)
	return share*rep.StepSeconds(chunk) + (1-share)*rep.StepSeconds(dec)
}

// prefillShape is how a prefill chunk of chunkTok tokens falls over the
// mix's prompts: prompts longer than the chunk are taken in one chunk a
// step, each chunk after the earlier ones (the chunk's mean context makes
// its attention cost its share of the prompt's L²/2); shorter ones share
// the chunk, several prompts a step, with no earlier context.
func prefillShape(mix Mix, chunkTok float64) (seqs, context int) {
	long := sizeBiasedPrompt(mix)
	if long >= chunkTok {
		return 1, int(math.Round((long - chunkTok) / 2))
	}
	return max(1, int(math.Round(chunkTok/long))), 0
}

// sizeBiasedPrompt is E[L²]/E[L] of the mix's prompt lengths L: the mean
// length of the prompt a prefill token belongs to. Without a second moment
// (or with one below the mean's square, which no real mix has) it is the
// mean.
func sizeBiasedPrompt(mix Mix) float64 {
	in := math.Max(mix.PromptTokens, 1)
	return math.Max(mix.PromptTokensSquared, in*in) / in
}

// BurstCapacity is one replica's modelled request starts per second while
// it runs its target batch of decodes: prefill chunks of the engine's
// default token budget share each step with the decodes, so the prompts of
// a burst are taken in at budget ÷ step time ÷ prompt tokens. It is what a
// replica keeps up with through a burst shorter than the requests it
// admits; Capacity, the steady-state completion rate, bounds the mean.
func BurstCapacity(rep perf.Replica, mix Mix, itl time.Duration) float64 {
	in, out := math.Max(mix.PromptTokens, 1), math.Max(mix.OutputTokens, 1)
	b := TargetBatch(rep, mix, itl)
	ctx := int(in + out/2)
	chunk := min(engine.DefaultTokenBudget, int(math.Ceil(in)))
	seqs, pctx := prefillShape(mix, float64(chunk))
	step := rep.StepSeconds(perf.Batch{DecodeSeqs: b, DecodeContextTokens: b * ctx, PrefillTokens: chunk, PrefillSeqs: seqs, PrefillContext: pctx})
	if step <= 0 {
		return 0
	}
	return float64(chunk) / step / in
}

// SpecGain is the modelled ratio of output tokens per second with
// speculative decoding to without, for a decode step of batch sequences at
// mean context ctx. Spec verifies K draft tokens per sequence (plus K draft
// forwards of DraftLayers target-layer units each) and yields
// (1 − α^{K+1})/(1 − α) tokens per sequence per step on average. At small
// batches the step is memory-bound and the extra tokens ride along almost
// free; at large batches it turns compute-bound and they cost their full
// FLOPs, which is where vLLM measured 1.4–1.8× slowdowns. Prefill chunks
// sharing the step are left out: spec does not change their cost.
func SpecGain(rep perf.Replica, sc engine.SpecConfig, batch, ctx int) float64 {
	if batch <= 0 {
		return 1
	}
	a := sc.Acceptance
	yield := (1 - math.Pow(a, float64(sc.K+1))) / (1 - a)
	b := perf.Batch{DecodeSeqs: batch, DecodeContextTokens: batch * ctx}
	plain := rep.StepSeconds(b)
	b.SpecTokens, b.DraftLayers = sc.K, math.Max(sc.DraftLayers, 0)
	spec := rep.StepSeconds(b)
	if plain <= 0 || spec <= 0 {
		return 1
	}
	return yield * plain / spec
}

// budgetFor picks the latency-mode budgets for a replica: the batch the
// ITL target allows for pure decoding, and the largest power-of-two token
// budget (512..8192) whose chunked-prefill step alongside that batch still
// stays within twice the ITL target (a prefill chunk is an occasional
// stall, not every step).
func budgetFor(rep perf.Replica, mix Mix, itl time.Duration) (maxBatch, tokenBudget int) {
	ctx := int(mix.PromptTokens + mix.OutputTokens/2)
	lo, hi := 1, engine.DefaultMaxBatch
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if rep.DecodeStepSeconds(mid, ctx) <= itl.Seconds() {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	maxBatch = max(lo, 8)
	tokenBudget = 512
	for tb := 8192; tb >= 512; tb /= 2 {
		b := perf.Batch{DecodeSeqs: maxBatch, DecodeContextTokens: maxBatch * ctx, PrefillTokens: tb, PrefillSeqs: 1}
		if rep.StepSeconds(b) <= 2*itl.Seconds() {
			tokenBudget = tb
			break
		}
	}
	return maxBatch, tokenBudget
}

// holt is Holt's linear exponential smoothing: a level and a per-interval
// trend, so a ramp is extrapolated rather than chased.
type holt struct {
	level, trend float64
	init         bool
}

func (h *holt) observe(x, alpha, beta float64) {
	if !h.init {
		h.level, h.trend, h.init = x, 0, true
		return
	}
	prev := h.level
	h.level = alpha*x + (1-alpha)*(h.level+h.trend)
	h.trend = beta*(h.level-prev) + (1-beta)*h.trend
}

// criticalTrendGain is the trend gain at which Holt's recursion with level
// gain alpha is critically damped. Written over the state (level, trend),
// one interval without new information is the matrix
//
//	[1−α      1−α ]
//	[−αβ    1−αβ ]
//
// with trace 2 − α − αβ and determinant 1 − α, so its roots are real
// when (2 − α − αβ)² ≥ 4(1 − α), that is αβ ≤ (1 − √(1−α))², and they
// meet, both at r = √(1−α), at β = (1 − r)/(1 + r). Above it the roots are
// complex and the forecast rings: the default 0.2 at α = 0.064 swung with
// a period of about 57 intervals, and after a steep fall the trend carried
// the level below zero while a fifth of the peak still arrived (issue 30).
// At the critical gain the estimate settles as fast as it can without
// ringing (for α = 0.064, β ≈ 0.0165); a smaller β is overdamped, slower
// to take up a ramp and no steadier.
func criticalTrendGain(alpha float64) float64 {
	if alpha <= 0 {
		return 0
	}
	r := math.Sqrt(max(0, 1-alpha))
	return (1 - r) / (1 + r)
}

// at forecasts steps intervals ahead, never below zero.
func (h *holt) at(steps float64) float64 { return math.Max(0, h.level+h.trend*steps) }

// damped forecasts steps intervals ahead with the trend damped by phi per
// step (Gardner and McKenzie): the trend's contribution converges to
// trend·phi/(1−phi) however far ahead, so a short burst's slope is not
// extrapolated over a long lead time. phi ≥ 1 is the undamped forecast.
func (h *holt) damped(steps, phi float64) float64 {
	if phi >= 1 {
		return h.at(steps)
	}
	return math.Max(0, h.level+h.trend*phi*(1-math.Pow(phi, steps))/(1-phi))
}

// poissonRate is the z-quantile of the arrival rate over a window of w
// seconds when arrivals are Poisson at mean rate: the count's standard
// deviation is √(rate·w), so the rate's is √(rate/w). z ≤ 0 or w ≤ 0
// leave the mean.
func poissonRate(rate, w, z float64) float64 {
	if rate <= 0 || w <= 0 || z <= 0 {
		return math.Max(rate, 0)
	}
	return rate + z*math.Sqrt(rate/w)
}

// arrival is the count of requests that arrived in one decision interval
// of dt seconds.
type arrival struct{ n, dt float64 }

// trimArrivals keeps the newest intervals that together span at most
// span seconds.
func trimArrivals(as []arrival, span float64) []arrival {
	sum, i := 0.0, len(as)
	for i > 0 && sum+as[i-1].dt <= span+1e-9 {
		i--
		sum += as[i].dt
	}
	return append(as[:0], as[i:]...)
}

// burstRate is the least service rate that finishes every arrival of the
// recent intervals within budget seconds of the end of its interval, on a
// fluid queue that was empty before them: for each suffix of the
// intervals, its arrivals over its duration plus the budget; the largest.
// A burst shorter than the budget is absorbed by queueing; a long one asks
// for its own rate.
func burstRate(as []arrival, budget float64) float64 {
	best, n, span := 0.0, 0.0, 0.0
	for i := len(as) - 1; i >= 0; i-- {
		n += as[i].n
		span += as[i].dt
		if span+budget > 0 {
			best = math.Max(best, n/(span+budget))
		}
	}
	return best
}
