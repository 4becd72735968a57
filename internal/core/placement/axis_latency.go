package placement

import "math"

// Axis: latency budget (row AxisLatency in axes.go).
//
// Why: work that will finish after its deadline is wasted GPU time, and
// thin slack is a risk worth paying to avoid.
//
// Reads: the request's deadline (or the tighter per-step deadline the
// workflow axis derives) and the predicted completion time.
//
// Filters: a worker whose predicted completion misses the deadline is
// rejected, as deadline_unreachable when even the bare prefill and decode
// at a batch of one miss (no amount of waiting helps there) and
// deadline_busy when queueing or loading is to blame. Term: among the
// rest, miss_usd is P(miss) times the class's miss penalty, with P(miss)
// from a normal prediction error of Options.PredictionError ×
// completion_s.
//
// Trade-offs: the error is one relative figure for every worker and
// request, not a per-GPU calibrated spread, and the normal tail is the
// Abramowitz–Stegun polynomial (error under 2.5e-4) rather than erfc, for
// speed. Because P(miss) only rises with completion and falls with the
// deadline, the scan can price it in its bounds (groupBound,
// refinedBound), which is what lets a batch request with a tight deadline
// skip the slow groups.
//
// Disabled: no deadline filter and no miss term.

func latencyFilter(p *Placer, c *cand, r *Request) Reason {
	t := &c.t
	t.SlackSeconds = math.Inf(1)
	if !p.on[axLatency] || math.IsInf(c.deadlineIn, 1) {
		return ReasonNone
	}
	remaining := c.deadlineIn
	t.SlackSeconds = remaining - t.CompletionSeconds
	if t.SlackSeconds < 0 {
		// Unreachable means even this worker alone could not make it: its
		// decode at batch 1, not at today's batch, which is load (busy-now)
		// and passes.
		if t.PrefillSeconds+decodeAlone(c.c) > remaining {
			return ReasonDeadlineUnreachable
		}
		return ReasonDeadlineBusy
	}
	t.PMiss = missProbability(p, t.SlackSeconds, t.CompletionSeconds)
	t.MissUSD = t.PMiss * p.rp.missPenalty
	return ReasonNone
}

// missProbability is P(miss) for a predicted completion with slack to
// spare (both seconds, slack >= 0). It rises with completion at a fixed
// deadline, which the scan's refined bound relies on.
func missProbability(p *Placer, slack, completion float64) float64 {
	sigma := p.opts.PredictionError * completion
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

// normalTail is P(Z > x) for a standard normal and x >= 0, by Abramowitz
// and Stegun 26.2.19 (error < 2.5e-4): a few multiplies instead of the exp
// that math.Erfc costs, which matters a thousand times per placement.
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
