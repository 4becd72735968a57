package placement

// Axis: weight warmth (row AxisWarmth in axes.go).
//
// Why: a cold start is tens of seconds against a sub-second request, so a
// warm slower GPU usually beats a cold fast one; no anchor router scores
// base-weight residency.
//
// Reads: the model's residency on the worker (heartbeat models: hot,
// sleeping, loading, cold or absent, with the worker's own load-time
// estimate) and the cost model's load time from that state.
//
// Filters: cannot_run when the load cannot happen (an unknown state, or a
// cost model with no figure). Term: load_s, seconds added before prefill
// can start.
//
// Trade-offs: the worker's own estimate, when it gives one, wins over the
// cost model's, so a worker misreporting its disk speed is believed; load_s
// counts the request's own wait, not the others' that a load on a busy
// worker also stalls (delay_s carries that). Groups bound as if hot, so
// cold workers in a competitive group are read one by one.
//
// Disabled: load_s is 0 everywhere (the router assumes every model is warm).

func warmthTerm(p *Placer, c *cand, r *Request, _ uint64) Reason {
	s := warmLoad(c.c, c.res)
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
//
// The class's table is filled for this request for every state its
// workers are in (see class.states), and with the axis disabled it holds
// zeros and residencies carry no estimate of their own, so this is one
// lookup.
func warmLoad(cl *class, res *residency) float64 {
	// The worker measures its own disk and link speed, and knows how far a
	// load in progress has got: its estimate, when it gives one, wins.
	return positiveOr(res.ownLoad, cl.load[res.state])
}
