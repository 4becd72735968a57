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
	if !p.on[axWarmth] {
		return ReasonNone
	}
	state := stateAbsent
	if c.res.resident {
		state = c.res.state
	}
	if state == stateHot {
		return ReasonNone
	}
	if c.res.resident && c.res.loadSeconds > 0 {
		// The worker measures its own disk and link speed, and knows how far
		// a load in progress has got.
		c.t.LoadSeconds = c.res.loadSeconds
		return ReasonNone
	}
	s := p.loadSeconds(c.c, r, state)
	if isInf(s) {
		return ReasonCannotRun
	}
	c.t.LoadSeconds = s
	return ReasonNone
}
