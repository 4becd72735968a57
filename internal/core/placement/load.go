package placement

// The load terms every policy sees, around the axes: the queue ahead on
// a worker, the delay its bookings add, decode under its batch, and the
// totals the score sums.

// queueTerm predicts the wait behind work already on the worker: prompt
// tokens queued for prefill (its heartbeat) plus those booked since, net
// of their cached prefixes (Decision.Booking), of the request's class and
// higher only. The engine prefills in class order (internal/core/engine), so a
// lower class's queue is work the request overtakes; counting it made an
// interactive request behind a batch backlog look late, fail the deadline
// filter and wait in the router's class queue while batch requests with
// roomy deadlines passed (on the Mooncake trace at 12× load, interactive
// SLO attainment 0.09 against batch 0.996). With the priority axis off
// every class is counted, since a class-blind policy sees the whole queue.
// It is not one of the seven axes because every baseline sees load too.
//
// It deliberately does not drain the queue by the time since the
// heartbeat: under continuous batching the worker prefills far slower
// than the standalone prefill rate (decodes share every step, long
// contexts cost quadratically, a full KV cache holds prefills back), and
// in the simulator a drained queue underpredicted critical requests' TTFT
// by about 3× on the Mooncake trace.
//
// On an engine that shares its steps among the prompts it prefills
// (Switchyard's, whose chunks are cut to the decodes' targets: see
// sharedQueue), the queue is not served first come, first served, and for
// the classes in Options.SharedPrefill it is priced as shared.
func queueTerm(p *Placer, c *cand, r *Request) {
	cached := 0
	if p.rp.sharedPrefill {
		cached = cachedTokens(p, c.h, c.i, r)
	}
	c.t.QueueSeconds = queueFor(p.queuedAhead(c.row.queue[p.rp.rank], c.h, cached), c.c)
	c.batch = c.row.batch
}

// queuedAhead is the prompt tokens of q queued on row h that the request,
// holding cached tokens of its prompt there, waits for: all of them, or
// as the engine shares its steps (sharedQueue) where it does and the
// class is priced so.
func (p *Placer) queuedAhead(q int, h *hotRow, cached int) int {
	if p.rp.sharedPrefill && h.prefills != notShared {
		return sharedQueue(q, h.prefills, p.rp.promptTokens-cached)
	}
	return q
}

// sharedQueue is the queued prompt tokens a request of uncached tokens
// waits for on an engine that shares each step among the prompts it
// prefills: under the step cap the engine's chunk search gives every
// running prefill a sliver of each step (internal/core/engine, chunk), so
// prefills progress together, close to processor sharing, and the
// request is done after about each of the prefills tokens ahead of it has
// computed as many tokens as it has, or finished: at most prefills ×
// uncached, never more than the whole queue. Measured at engine level (one
// H100, a 500-token prompt behind a 60k-token one, 20 sequences decoding):
// its first token after 0.43 s where the whole queue predicted 1.78 s.
// It rises with the queue and with prefills, so a bound from the least of
// either is a bound.
func sharedQueue(queued int, prefills uint8, uncached int) int {
	return min(queued, int(prefills)*max(uncached, 1))
}

// queueSeconds is queue_s from the hot row, for the bounds: its queue is
// capped (hotRow.queue), so this is at most what queueTerm predicts;
// cached is the request's prompt tokens the worker holds.
func queueSeconds(p *Placer, h *hotRow, cl *class, cached int) float64 {
	return queueFor(p.queuedAhead(int(h.queue[p.rp.rank]), h, cached), cl)
}

func queueFor(q int, cl *class) float64 {
	if q > 0 {
		return float64(q) * cl.queueRate
	}
	return 0
}

// delayTerm predicts the seconds this request costs the sequences already
// on the worker (running, and booked but not yet in a heartbeat). Under
// continuous batching with chunked prefill, the request's prefill chunks
// ride in the same steps as their decodes, so each of them is held up by
// about the request's own prefill time, and a cold load stalls them all.
// So joining a busy worker costs far less than its whole queue, but an
// uncached prefix on a busy worker costs every sequence there: that is
// what makes sending a group's prompts to the worker holding the group's
// prefix right even when that worker is the busier one.
//
// The decode it joins also makes each step a little slower for the
// others; that term is left out on purpose: the own decode_s already
// prices the batch size, and with bookings counted in the batch until a
// heartbeat absorbs them, adding it double-charged popular workers (in the
// simulator it cut the llm-d-shape prefix hit rate from 0.92 to 0.87).
//
// The others' seconds are valued at the request's own value of time but
// at most the interactive class's: a worker's batch is mostly interactive
// and lower work, and a critical request's urgency must not price its
// neighbours' seconds at its own rate. Priced that way (measured on the
// Mooncake trace at 6× load), critical requests traded their own TTFT for
// others' seconds, choosing long queues on workers with few sequences, and
// critical SLO attainment fell from 0.73 to 0.66.
func delayTerm(p *Placer, c *cand, r *Request) {
	others := c.batch - 1
	if others <= 0 {
		return
	}
	t := &c.t
	// Its decode makes every step read its KV too: each other sequence's
	// tokens come slower by that much for as long as it decodes. (Measured
	// with decodeTerm's context correction on Mooncake conversation, 10
	// min, 2 × H100 + 2 × A100: inter-token p99 196 -> 131 ms at 1x with
	// SLO attainment unchanged, 0.929; 0.798 -> 0.804 at 1.5x.)
	drag := float64(c.c.ctx) * c.c.perCtxToken * float64(r.OutputTokens)
	t.DelaySeconds = float64(others) * (t.PrefillSeconds + t.LoadSeconds + drag)
	t.DelayValue = p.rp.delayValue
}

// decodeTerm predicts the decode time at the batch the request would join.
// The class's decode table prices a batch whose sequences all have this
// request's context; the worker's KV cache says what the batch holds, and
// a decode step reads all of it. When the others' contexts are longer — a
// short turn joining long conversations, the shape of chat traffic — each
// step is slower by the extra KV it reads, and that is added.
//
// When they are shorter the table overstates the decode now, but not
// necessarily over the request's life: the batch fills, and for a class
// below the top with sequences it cannot preempt (the engine admits and
// preempts by class). The table is then the pessimistic forecast, and the
// least of it and the class's floor (the batch's size, the request's
// context alone) plus the KV the cache holds is the expected one. The
// expected one is taken in two cases:
//
//   - The worker mostly holds the request's prompt cached (mostlyCached):
//     an agentic step or a conversation's next turn, whose long context is
//     its own history. On agentic-overload at 1.83× a critical step of
//     15,616 prompt tokens (14,432 cached), 251 out, joining 62 sequences
//     on an H100 was predicted at 73 ms a token (63 × 15.7k tokens of KV,
//     more than the cache holds) where critical steps there decoded at
//     34 ms a token on the mean, so both workers read deadline_busy until
//     its deadline passed and it was refused unplaceable.
//   - The request is of the top class (reqParams.heldKVDecode). The
//     pessimistic forecast is a reservation: a lower class held on it
//     leaves the room to the classes above it, but the top class has none
//     above it, and holding it only made it late. On Mooncake conversation
//     on 8 H100 at 4×, 29 of 34 critical misses were prompts of 26k–113k
//     tokens held deadline_busy on every H100 until their deadlines passed,
//     which every baseline served: taking the expected decode for critical
//     moved the high bar 2.828× → 3.084× (and on 2 H100 + 2 A100 0.4585× →
//     0.7071×). Taking it for every class moved it as far but let long
//     interactive, standard and batch prompts take the prefill hundreds of
//     short requests had (the 0.90 bar 5.188× → 4.0×; for critical only,
//     4.757×): docs/benchmarks.md, "Long critical prompts".
//
// The scan bounds each worker with this same prediction (Placer.decode).
func decodeTerm(p *Placer, c *cand, r *Request) {
	c.t.DecodeSeconds = p.decode(c.c, r, c.h, p.view.held[c.i], cachedTokens(p, c.h, c.i, r))
}

// mostlyCached reports whether a worker holding cached tokens of r's
// prompt holds at least half of it.
func mostlyCached(cached int, r *Request) bool { return cached > 0 && 2*cached >= r.PromptTokens }

func completion(c *cand) {
	t := &c.t
	// transfer_s is a decode leg's in place of its prefill_s (0 otherwise).
	t.CompletionSeconds = t.QueueSeconds + t.LoadSeconds + t.PrefillSeconds + t.TransferSeconds + t.DecodeSeconds + t.PreemptSeconds
}

// total applies the package formula.
func total(c *cand) {
	t := &c.t
	t.TimeUSD = t.CompletionSeconds*t.WorkflowFactor*t.ValueOfTime + t.DelaySeconds*t.DelayValue
	t.TotalUSD = t.TimeUSD + t.GPUUSD + t.MissUSD + t.ReclaimUSD + t.InterferenceUSD
}
