package placement

// Axis: weight warmth.
//
// Reads the model's residency on the worker (heartbeat: hot, sleeping,
// loading, cold or absent, with the worker's own load-time estimate) and
// the cost model's load time from that state. Why: a cold start is tens of
// seconds against a sub-second request, so a warm slower GPU usually beats
// a cold fast one; no anchor router scores base-weight residency. The term
// is load_s, seconds added before prefill can start.
//
// Disabled: load_s is 0 everywhere (the router assumes every model is warm).

func warmthTerm(p *Placer, c *cand, r *Request) Reason {
	s := warmLoad(p, c.c, r, c.res)
	if isInf(s) {
		return ReasonCannotRun
	}
	c.t.LoadSeconds = s
	return ReasonNone
}

// warmLoad is load_s for a worker of class cl where the model's residency
// is res: +Inf (or NaN) when the cost model says the load cannot happen.
// It has no data-dependent branch, since the scan calls it for every
// worker and hot and cold workers come in no order.
func warmLoad(p *Placer, cl *class, r *Request, res *residency) float64 {
	if !p.on[axWarmth] {
		return 0
	}
	s := cl.load[res.state]
	if cl.loadEpoch[res.state] != p.epoch {
		s = p.fillLoad(cl, r, res.state)
	}
	// The worker measures its own disk and link speed, and knows how far a
	// load in progress has got: its estimate, when it gives one, wins.
	return positiveOr(res.ownLoad, s)
}
