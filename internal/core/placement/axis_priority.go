package placement

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
// somewhere. Term: value_of_time_usd_per_s.
//
// Trade-offs: values of time and penalties are per class, set by
// configuration, not learned from tenants' outcomes; the ceilings trade a
// lower class's queueing at the router for headroom it may not need when
// no higher class arrives.
//
// Disabled: every request is valued as standard, every class's queue
// counts, and no ceiling applies.

func priorityFilter(p *Placer, c *cand, _ *Request, _ uint64) Reason {
	if p.on[axPriority] && (c.usedFrac > p.rp.ceiling || c.t.QueueSeconds > p.rp.queueCeiling) {
		return ReasonPriorityReserve
	}
	return ReasonNone
}

func priorityTerm(p *Placer, c *cand, _ *Request) {
	c.t.ValueOfTime = p.rp.valueOfTime
}
