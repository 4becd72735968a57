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
	s, ok := warmLoad(p, c.c, r, c.res)
	if !ok {
		return ReasonCannotRun
	}
	c.t.LoadSeconds = s
	return ReasonNone
}

// warmLoad is load_s for a worker of class cl where the model's residency
// is res; ok is false when the cost model says the load cannot happen.
func warmLoad(p *Placer, cl *class, r *Request, res *residency) (float64, bool) {
	if !p.on[axWarmth] || res.state == stateHot {
		return 0, true
	}
	return coldLoad(p, cl, r, res)
}

// coldLoad is warmLoad for weights that are not hot.
func coldLoad(p *Placer, cl *class, r *Request, res *residency) (float64, bool) {
	state := res.state
	if res.resident && res.loadSeconds > 0 {
		// The worker measures its own disk and link speed, and knows how far
		// a load in progress has got.
		return res.loadSeconds, true
	}
	s := p.loadSeconds(cl, r, state)
	return s, !isInf(s)
}
