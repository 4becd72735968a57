package placement

// Axis: tenant priority.
//
// Reads the request's effective priority class (the admitter applied the
// tenant's default). Why: a second of latency is worth far more to an
// interactive tenant than to a batch job, so the class sets value_of_time,
// the dollars per second that turn predicted completion time into cost:
// high classes buy speed (fast GPUs, warm weights), low classes buy price.
// The class also caps how full a worker's KV cache it may make
// (Options.KVCeiling) and how much predicted queueing it may join
// (Options.QueueCeiling): busy-now filters that keep headroom for higher
// classes. A lower-class request over the queue ceiling waits in the
// router's class queue, which higher classes overtake, rather than in the
// worker's first-come-first-served prefill queue, which they cannot; under
// overload that is what leaves critical work a short queue somewhere.
//
// Disabled: every request is valued as standard and no ceiling applies.

func priorityFilter(p *Placer, c *cand, _ *Request, _ uint64) Reason {
	if p.on[axPriority] && (c.usedFrac > p.rp.ceiling || c.t.QueueSeconds > p.rp.queueCeiling) {
		return ReasonPriorityReserve
	}
	return ReasonNone
}

func priorityTerm(p *Placer, c *cand, _ *Request) {
	c.t.ValueOfTime = p.rp.valueOfTime
}
