package placement

import (
	"math"
	"time"
)

// Axis: latency budget.
//
// Reads the request's deadline (or the tighter per-step deadline the
// workflow axis derives) and the predicted completion time. Why: work that
// will finish after its deadline is wasted GPU time, so a worker whose
// predicted completion misses it is filtered, as unresolvable when even
// the bare prefill and decode miss (no amount of waiting helps there) and
// busy-now when queueing or loading is to blame. Among the rest, thin slack
// is a risk: the term miss_usd is P(miss) times the class's miss penalty,
// with P(miss) from a logistic approximation of a normal prediction error
// of Options.PredictionError × completion_s.
//
// Disabled: no deadline filter and no miss term.

func latencyFilter(p *Placer, c *cand, _ *Request, now time.Time) Reason {
	t := &c.t
	t.SlackSeconds = math.Inf(1)
	if !p.on[axLatency] || c.deadline.IsZero() {
		return ReasonNone
	}
	remaining := c.deadline.Sub(now).Seconds()
	t.SlackSeconds = remaining - t.CompletionSeconds
	if t.SlackSeconds < 0 {
		if t.PrefillSeconds+t.DecodeSeconds > remaining {
			return ReasonDeadlineUnreachable
		}
		return ReasonDeadlineBusy
	}
	sigma := p.opts.PredictionError * t.CompletionSeconds
	if sigma < 1e-3 {
		sigma = 1e-3
	}
	// 1.702 makes the logistic match the normal CDF to within 0.01.
	t.PMiss = 1 / (1 + math.Exp(1.702*t.SlackSeconds/sigma))
	t.MissUSD = t.PMiss * p.rp.missPenalty
	return ReasonNone
}

func isInf(x float64) bool { return math.IsInf(x, 1) || math.IsNaN(x) }
