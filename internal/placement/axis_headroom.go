package placement

// Axis: memory headroom.
//
// Reads the worker's KV blocks total/free and HBM free (heartbeat) net of
// the router's own bookings (fleet.Reserve). Why: a request that does not
// fit in free KV blocks makes the engine preempt running sequences, which
// then recompute their prefill; and a model that is not loaded needs free
// HBM for its weights. Those are busy-now filters. Among workers that fit,
// a fuller cache is likelier to preempt under the next burst: the term
// preempt_s is that probability times the seconds a preempted request
// loses (its prefill plus decode), with the risk rising quadratically from
// Options.HeadroomKnee to a full cache.
//
// Disabled: no KV or HBM filter and no preemption term (the router places
// as if memory were unlimited; the engine preempts).

func headroomFilter(p *Placer, c *cand, r *Request, weight uint64) Reason {
	w := c.row
	if w.kvTotal > 0 {
		c.usedFrac = 1 - float64(w.free-c.t.Blocks)/float64(w.kvTotal)
	}
	if !p.on[axHeadroom] {
		return ReasonNone
	}
	if w.kvTotal > 0 && c.t.Blocks > w.free {
		return ReasonWouldPreempt
	}
	if weight > 0 && needsHBMForWeights(c) && weight > w.hbmFree {
		return ReasonHBMBusy
	}
	return ReasonNone
}

func headroomTerm(p *Placer, c *cand, _ *Request) {
	if !p.on[axHeadroom] || c.usedFrac <= p.opts.HeadroomKnee {
		return
	}
	x := (c.usedFrac - p.opts.HeadroomKnee) / (1 - p.opts.HeadroomKnee)
	if x > 1 {
		x = 1
	}
	c.t.PreemptSeconds = x * x * (c.t.PrefillSeconds + c.t.DecodeSeconds)
}

// needsHBMForWeights: sleeping weights sit in host memory and need HBM to
// wake; cold and absent ones need it to load.
func needsHBMForWeights(c *cand) bool {
	if !c.res.resident {
		return true
	}
	switch c.res.state {
	case stateSleeping, stateCold, stateAbsent:
		return true
	}
	return false
}
