package placement

import (
	"math"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Axis: latency budget (row AxisLatency in axes.go).
//
// Why: work that will finish after its deadline is wasted GPU time, and
// thin slack is a risk worth paying to avoid; and a request is promised
// more than its deadline: its first token within its TTFT target and its
// tokens after that at its TPOT target (internal/core/slo judges all
// three). A fast start on a slow decoder, or a slow start on a fast one,
// can meet the whole deadline and still miss the SLO.
//
// Reads: the request's deadline (or the tighter per-step deadline the
// workflow axis derives), its TTFT and TPOT targets (its own, else its
// class's, Options.Targets) and when it was submitted, which TTFT counts
// from; and the predicted completion, first token and time per token.
//
// Predictions: ttft_s is queue_s + load_s + prefill_s plus, for each
// prefill chunk (Options.ChunkTokens) of the uncached prompt, the part of
// a step the decodes already on the worker add: chunked prefill shares
// every step with them. tpot_s is the decode step at the batch the request
// joins (decode_s per output token) plus the prefill queued there for
// lower classes, spread over its output: the engine prefills those in the
// steps it decodes in, after the request's own prefill.
//
// Filters: against the hard deadline (the request's own; for a workflow
// step whose deadline admission narrowed to its share of the workflow's,
// Request.HardDeadline), a worker whose
// predicted completion misses it is rejected, as deadline_unreachable when
// even the bare prefill (with the prefix the KV axis finds cached there)
// and decode at a batch of one miss (no amount of waiting helps there) and
// deadline_busy when queueing or loading is to blame. A workflow step that
// would miss only its share of the workflow's deadline, or the workflow's
// deadline itself, is not rejected: it is priced (its P(miss) against the
// split), since the chain may still finish, the step's own answer is still
// on time, and every baseline serves it (on agentic-overload at 0.59×,
// 13 steps refused so, 7 of them interactive, broke the high bar). ttft_target and tpot_target reject
// a worker predicted to miss the request's TTFT or TPOT target, busy-now;
// when every worker misses one, the placer places again with them priced
// instead of filtered (Decision.Relaxed): a late first token is still an
// answer, and holding the request only makes it later. A TTFT target
// already past when the request is placed is neither filtered nor priced:
// no worker can change it.
//
// Term: miss_usd is the class's miss penalty times P(miss any), from the
// deadline's, the TTFT's and the TPOT's P(miss) taken as independent, each
// from a normal prediction error: Options.PredictionError × the
// prediction, or the GPU kind's own figure per phase
// (Options.PhaseError); the TPOT's spread adds the largest stall pending
// on the worker (its queued prefill, at most one chunk) over the output's
// tokens after the first, since a short output's mean time per token is
// one prefill chunk away from its target (on the mixed fleet at 6.2× load,
// interactive requests of 5–40 tokens placed on L40S with prefill queued
// missed TPOT by that: 133 misses, 0 with the spread).
//
// Trade-offs: the three misses are correlated (the deadline is usually
// the TTFT target plus the TPOT budget), so P(miss any) is overstated
// where they overlap; lower classes' queue is all counted against TPOT,
// though some of it may wait for KV; the future arrivals that will
// prefill beside the request are not seen. The normal tail is the
// Abramowitz–Stegun polynomial (error under 2.5e-4) rather than erfc, for
// speed. Because P(miss) only rises with completion and falls with the
// deadline, the scan can price the deadline's in its bounds (groupBound,
// refinedBound), and the targets bound a worker that must miss them at
// +Inf, which is what lets a batch request with a tight deadline skip the
// slow groups and an interactive one skip the busy ones.
//
// Disabled: no deadline or target filter and no miss term.

// latencyPrepare sets the request's targets as seconds, and lets the
// lower bound treat a worker that misses the deadline, or must miss a
// target, as +Inf, and price miss_usd, only with the axis on.
func latencyPrepare(p *Placer, _ *fleet.Fleet, r *Request) {
	rp := &p.rp
	rp.boundDeadlines = p.on[axLatency]
	// The hard deadline is the request's own: neither the split of its
	// workflow's over the steps left nor the workflow's itself, which a
	// step is priced against (its slo_met is its own deadline's, and
	// refusing it killed steps every baseline serves).
	rp.hardIn = rp.deadlineIn
	if !r.HardDeadline.IsZero() {
		rp.hardIn = max(rp.hardIn, r.HardDeadline.Sub(p.now).Seconds())
	}
	rp.ttftIn, rp.tpotTarget = math.Inf(1), math.Inf(1)
	rp.targets = false
	if !p.on[axLatency] {
		return
	}
	// The class's defaults are in rp (params), looked up once per class.
	ttft, tpot := r.TTFTTarget.Seconds(), r.TPOTTarget.Seconds()
	if ttft <= 0 {
		ttft = rp.defTTFTBase + float64(r.PromptTokens)*rp.defTTFTPerToken
	}
	if tpot <= 0 {
		tpot = rp.defTPOT
	}
	// A decode leg's first token is the prefill worker's (see the phase
	// axis): no TTFT target here. Its TPOT target holds from one token
	// on, since its OutputTokens are those after the first.
	if r.Phase == schemas.PhaseDecode {
		ttft = 0
	}
	if ttft > 0 {
		if !r.Submitted.IsZero() {
			ttft -= p.now.Sub(r.Submitted).Seconds()
		}
		// Past already: no worker can change it (see the axis comment).
		if ttft > 0 {
			rp.ttftIn = ttft
		}
	}
	if tpot > 0 && (r.OutputTokens > 1 || r.Phase == schemas.PhaseDecode) {
		rp.tpotTarget = tpot
	}
	n := p.opts.QueueCeilingYieldsUnder[r.Priority]
	rp.shortYields = n > 0 && r.PromptTokens <= n && r.Workflow == nil && r.HigherWaiting == 0 && !math.IsInf(rp.queueCeiling, 1)
	if (rp.ceilingYields || rp.shortYields) && !math.IsInf(rp.ttftIn, 1) {
		// The priority axis's ceiling yields to the target (firstTokenInTime):
		// a queue alone over both still rejects.
		rp.boundQueueCeiling = max(rp.boundQueueCeiling, rp.ttftIn)
	}
	rp.targets = !math.IsInf(rp.ttftIn, 1) || !math.IsInf(rp.tpotTarget, 1)
	rp.invOutput = 1 / float64(r.OutputTokens)
	rp.chunks = float64((r.PromptTokens + p.opts.ChunkTokens - 1) / p.opts.ChunkTokens)
	rp.boundTargets = rp.targets && !p.relaxed
}

func latencyFilter(p *Placer, c *cand, r *Request) Reason {
	t := &c.t
	t.SlackSeconds = math.Inf(1)
	if !p.on[axLatency] {
		return ReasonNone
	}
	if !math.IsInf(c.deadlineIn, 1) {
		if hard := p.rp.hardIn; t.CompletionSeconds > hard {
			// Unreachable means even this worker alone could not make it:
			// its decode at batch 1, not at today's batch, which is load
			// (busy-now) and passes.
			if t.PrefillSeconds+t.TransferSeconds+decodeAlone(c.c) > hard {
				return ReasonDeadlineUnreachable
			}
			return ReasonDeadlineBusy
		}
		// Against the effective deadline: a step's share of its workflow's
		// may already be behind it (slack < 0), which is priced, not
		// refused.
		t.SlackSeconds = c.deadlineIn - t.CompletionSeconds
	}
	if p.rp.targets {
		targetTerms(p, c, r)
		if !p.relaxed {
			if t.TTFTSlackSeconds < 0 {
				return ReasonTTFTTarget
			}
			if t.TPOTSeconds > p.rp.tpotTarget {
				return ReasonTPOTTarget
			}
		}
	}
	return ReasonNone
}

// latencyMiss prices what latencyFilter measured: P(miss) of the
// deadline and of each target, and miss_usd for either (a surcharge: see
// evaluate).
func latencyMiss(p *Placer, c *cand, r *Request) {
	if !p.on[axLatency] {
		return
	}
	t := &c.t
	pd := 0.0
	if !math.IsInf(c.deadlineIn, 1) {
		pd = missProbability(p.opts.PredictionError, t.SlackSeconds, t.CompletionSeconds)
	}
	t.PMiss = pd
	miss := pd
	if p.rp.targets {
		targetMiss(p, c, r)
		miss = orMiss(orMiss(miss, t.TTFTPMiss), t.TPOTPMiss)
	}
	t.MissUSD = miss * p.rp.missPenalty
}

// orMiss is P(a or b) for independent misses of P(a) and P(b), written so
// that it is exactly a when b is 0 (the scan's bounds compare it with the
// deadline's term alone).
func orMiss(a, b float64) float64 { return a + (1-a)*b }

// targetTerms predicts the first token and the time per token on c's
// worker and how far each is from its target (see the axis comment);
// targetMiss prices them.
func targetTerms(p *Placer, c *cand, r *Request) {
	t := &c.t
	inv := p.rp.invOutput
	step := t.DecodeSeconds * inv
	t.TTFTSlackSeconds = math.Inf(1)
	tpot := step
	if p.rp.phase == takesDecode {
		// A decode leg's first token came from the prefill worker; what
		// this worker adds before its second is the gap: the transfer,
		// its queue and any load, which the SLO's (finish − first token)
		// ÷ (n − 1) spreads over the tokens decoded here.
		tpot += (t.TransferSeconds + t.QueueSeconds + t.LoadSeconds) * inv
	} else {
		ttft := t.QueueSeconds + t.LoadSeconds + t.PrefillSeconds
		if c.batch > 1 {
			ttft += chunkShare(p, c.c, r, t.CachedTokens, t.DecodeSeconds)
		}
		t.TTFTSeconds = ttft
		if in := p.rp.ttftIn; !math.IsInf(in, 1) {
			t.TTFTSlackSeconds = in - ttft
		}
		if p.rp.phase == takesPrefill {
			return // its one token has no time per token
		}
	}
	if lower := c.row.queue[fleet.NumClasses-1] - c.row.queue[p.rp.rank]; lower > 0 {
		tpot += queueFor(lower, c.c) * inv
	}
	t.TPOTSeconds = tpot
}

// targetMiss is P(miss) of each target targetTerms measured.
func targetMiss(p *Placer, c *cand, r *Request) {
	t := &c.t
	if p.rp.phase != takesDecode && !math.IsInf(p.rp.ttftIn, 1) {
		t.TTFTPMiss = missProbability(c.c.errTTFT, t.TTFTSlackSeconds, t.TTFTSeconds)
	}
	if p.rp.phase == takesPrefill {
		return
	}
	if target := p.rp.tpotTarget; !math.IsInf(target, 1) {
		// A short output's mean is one stall away from its target: a
		// prefill chunk landing in one of its few steps. The spread adds
		// the largest stall pending on the worker (its queued prefill, at
		// most one chunk) over the tokens after the first.
		tpot := t.TPOTSeconds
		stall := min(queueFor(c.row.queue[fleet.NumClasses-1], c.c), float64(p.opts.ChunkTokens)*c.c.queueRate)
		after := r.OutputTokens - 1 // the tokens after the first: a decode leg's OutputTokens are all of them
		if p.rp.phase == takesDecode {
			after = r.OutputTokens
		}
		sigma := c.c.errTPOT*tpot + stall/float64(max(after, 1))
		t.TPOTPMiss = tailProbability(target-tpot, sigma)
	}
}

// chunkShare is what the decodes of a batch add to the request's prefill:
// for each chunk of its uncached prompt, the part of a step at that batch
// beyond the request's own step alone, from decode (its decode_s there).
// r nil means nothing cached (a group's bound), whose chunks are in rp.
func chunkShare(p *Placer, cl *class, r *Request, cached int, decode float64) float64 {
	others := decode*p.rp.invOutput - cl.stepAlone
	if !(others > 0) {
		return 0
	}
	chunks := p.rp.chunks
	if r != nil && cached > 0 {
		chunks = float64((max(r.PromptTokens-cached, 1) + p.opts.ChunkTokens - 1) / p.opts.ChunkTokens)
	}
	return chunks * others
}

// missProbability is P(miss) for a prediction with slack seconds to spare
// (negative when it is predicted late) under a normal error of relErr ×
// the prediction. It rises with the prediction at a fixed target, which
// the scan's refined bound relies on.
func missProbability(relErr, slack, predicted float64) float64 {
	return tailProbability(slack, relErr*predicted)
}

// tailProbability is P(miss) for slack seconds to spare under a normal
// error of sigma seconds (at least a millisecond).
func tailProbability(slack, sigma float64) float64 {
	if sigma < 1e-3 {
		sigma = 1e-3
	}
	// Past 7 sigma P(miss) is below 1e-12: skip the polynomial, which
	// most workers with roomy deadlines hit.
	if x := slack / sigma; x < 7 {
		return normalTail(x)
	}
	return 0
}

// normalTail is P(Z > x) for a standard normal, by Abramowitz and Stegun
// 26.2.19 (error < 2.5e-4): a few multiplies instead of the exp that
// math.Erfc costs, which matters a thousand times per placement.
func normalTail(x float64) float64 {
	if x < 0 {
		return 1 - normalTail(-x)
	}
	d := 1 + x*(0.0498673470+x*(0.0211410061+x*(0.0032776263+x*(0.0000380036+x*(0.0000488906+x*0.0000053830)))))
	d *= d
	d *= d
	d *= d
	d *= d
	return 0.5 / d
}

func isInf(x float64) bool { return math.IsInf(x, 1) || math.IsNaN(x) }
