package placement

import "math"

// Axis: tenant priority (row AxisPriority in axes.go).
//
// Why: a second of latency is worth far more to an interactive tenant than
// to a batch job, so the class sets value_of_time, the dollars per second
// that turn predicted completion time into cost: high classes buy speed
// (fast GPUs, warm weights), low classes buy price.
//
// Reads: the request's effective priority class (the admitter applied the
// tenant's default), and the worker's queued prompt tokens by class
// (heartbeat queued_tokens_by_class, plus bookings by class): the class
// chooses which of them are ahead of the request in queue_s.
//
// Filters: priority_reserve, busy-now: the class caps how full a worker's
// KV cache it may make (Options.KVCeiling) and how much predicted
// queueing it may join (Options.QueueCeiling), keeping headroom for
// higher classes. A lower-class request over the queue ceiling waits in
// the router's class queue, which higher classes overtake, rather than in
// the worker's first-come-first-served prefill queue, which they cannot;
// under overload that is what leaves critical work a short queue
// somewhere. For a workflow step of a class in Options.QueueCeilingYields
// (interactive) the queue ceiling yields to the step's own TTFT target:
// over it, the worker is still taken while queue_s + load_s + prefill_s is
// within the time left to the target (the latency axis then judges the
// target with the interference too), since a held step holds its chain
// up and the engine's own queue serves higher classes first; a step that
// would miss its target there waits in the router, where adaptive LIFO
// can serve a fresher one in time. With Options.QueueCeilingYieldsUnder
// a short prompt outside a workflow yields the same way, where the
// worker's batch keeps slots for higher classes. Term:
// value_of_time_usd_per_s.
//
// Trade-offs: values of time and penalties are per class, set by
// configuration, not learned from tenants' outcomes; the ceilings trade a
// lower class's queueing at the router for headroom it may not need when
// no higher class arrives.
//
// Disabled: every request is valued as standard, every class's queue
// counts, and no ceiling applies.

func priorityFilter(p *Placer, c *cand, r *Request, _ uint64) Reason {
	if !p.on[axPriority] {
		return ReasonNone
	}
	if c.usedFrac > p.rp.ceiling || (c.t.QueueSeconds > p.rp.queueCeiling && !firstTokenInTime(p, c, r)) {
		return ReasonPriorityReserve
	}
	return ReasonNone
}

// firstTokenInTime: r is a workflow step whose class's queue ceiling
// yields to its TTFT target, or a prompt outside a workflow short enough
// for its class's Options.QueueCeilingYieldsUnder on a worker with batch
// slots to spare (slotsToSpare), and c's worker is predicted to start it
// in time for it. A target already past (or none, the latency axis off)
// yields nothing.
func firstTokenInTime(p *Placer, c *cand, r *Request) bool {
	step := p.rp.ceilingYields && r.Workflow != nil
	short := p.rp.shortYields && slotsToSpare(c)
	return (step || short) && !math.IsInf(p.rp.ttftIn, 1) &&
		c.t.QueueSeconds+c.t.LoadSeconds+c.t.PrefillSeconds <= p.rp.ttftIn
}

// shortYieldSlotShare is the share of a worker's batch slots a short
// prompt may fill past the queue ceiling, counting the batch it joins and
// the requests waiting there. The engine does preempt a lower class for a
// higher one's slot, but a batch full of decodes makes every step long,
// and while a critical sequence decodes the step cap
// (engine.Config.CriticalStepTime) leaves a prefill only what those
// decodes do not use, one block a step once they fill it. On
// mixed-fleet-conversation (6.169×, seed 2) short prompts filling the L40S
// and A100 batches left critical at 0.796 (50 expired unplaced, 62 late);
// up to a full batch 0.917, up to half 0.980 (overall 0.281 → 0.563, the
// default's 0.586), while Mooncake synthetic at 2.828× keeps its gain
// (0.723 → 0.818, seed 1).
const shortYieldSlotShare = 0.5

// slotsToSpare: c's worker, with r in its batch and its waiting requests,
// fills at most shortYieldSlotShare of its batch slots (a worker that
// gives no max_batch is not judged by it).
func slotsToSpare(c *cand) bool {
	w := c.row.w
	return w.MaxBatch <= 0 || float64(c.row.batch+w.Waiting) <= shortYieldSlotShare*float64(w.MaxBatch)
}

func priorityTerm(p *Placer, c *cand, _ *Request) {
	c.t.ValueOfTime = p.rp.valueOfTime
}
