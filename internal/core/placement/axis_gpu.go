package placement

import "strings"

// Axis: GPU generation (row AxisGPU in axes.go).
//
// Why: generations differ several-fold in both speed and price, so the
// same request is fast-and-dear on one and slow-and-cheap on another; and
// some cannot run it at all.
//
// Reads: the worker's GPU, architecture and TP and its own $/hour
// (heartbeat), its total HBM against the model's weight size
// (Options.WeightBytes), the request's model and dtype, and the cost
// model's speed and catalog price for that GPU.
//
// Filters: dtype_unsupported (FP8 weights on an architecture without FP8
// tensor cores), model_too_large (the weights exceed total HBM and are not
// already there), cannot_run (the cost model has no figure for this
// GPU): hard and unresolvable. Term: gpu_usd, the GPU-seconds the request
// occupies (its load and prefill, its share of the batch's decode) at the
// worker's own price or its class's; the speed shows up in every seconds
// term, since each is asked of the cost model for this GPU.
//
// Trade-offs: costing by class (GPU, TP) rather than by worker is what
// keeps a placement to a handful of cost-model calls, so two workers of
// one class differ only by what they report (queue, batch, cache,
// residency, own price), not by a per-worker speed; a worker slower than
// its catalog entry is seen only through its queue. The price is the
// marginal GPU-seconds, not the idle cost of a worker left empty.
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
