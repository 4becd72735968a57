package placement

import "strings"

// Axis: GPU generation.
//
// Reads the worker's GPU, architecture and TP (heartbeat), the model's
// weight size (Options.WeightBytes), and the cost model's speed and $/hour
// for that GPU. Why: generations differ several-fold in both speed and
// price, so the same request is fast-and-dear on one and slow-and-cheap on
// another; and some cannot run it at all. The capability checks are hard,
// unresolvable filters. The speed shows up in every seconds term (they are
// all asked of the cost model for this GPU); the price is gpu_usd.
//
// Disabled: every worker is costed as Options.ReferenceGPU at its price,
// i.e. the router treats the fleet as uniform. The capability filters stay.

func gpuFilter(p *Placer, c *cand, r *Request, weight uint64) Reason {
	if p.rp.fp8 && c.h.flags&rowFP8 == 0 {
		return ReasonDtypeUnsupported
	}
	if weight > 0 && weight > c.row.hbmTotal && !weightsInHBM(c) {
		return ReasonModelTooLarge
	}
	if isInf(c.c.prefillFull) {
		return ReasonCannotRun
	}
	return ReasonNone
}

// gpuCostTerm prices the GPU-seconds this request occupies: its own
// loading and prefill, and its share of the batch's decode steps.
func gpuCostTerm(p *Placer, c *cand, _ *Request) {
	gpuSeconds := c.t.LoadSeconds + c.t.PrefillSeconds + c.t.DecodeSeconds/float64(c.batch)
	c.t.GPUUSD = gpuSeconds * pricePerHour(p, c) / 3600
}

// pricePerHour is the worker's $/hour: its own contract price when it
// gives one and the GPU axis is on, else its class's catalog price.
func pricePerHour(p *Placer, c *cand) float64 {
	if p.on[axGPU] && c.row.price > 0 {
		return c.row.price
	}
	return c.c.price
}

func isFP8(dtype string) bool { return strings.HasPrefix(strings.ToLower(dtype), "fp8") }

// weightsInHBM reports whether the model's weights are, or are being put,
// in this worker's memory, which proves they fit.
func weightsInHBM(c *cand) bool {
	if !c.res.resident {
		return false
	}
	switch c.res.state {
	case stateHot, stateSleeping, stateLoading:
		return true
	}
	return false
}
