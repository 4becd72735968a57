package placement

import "github.com/switchyard-ai/switchyard/internal/core/fleet"

// Axis: interference (row AxisInterference in axes.go).
//
// Why: under continuous batching with chunked prefill, every chunk of a
// new prompt rides in the same steps as the decodes already running on
// the worker, so each of their tokens waits for it. A 50k-token prefill
// on a worker decoding tight-TPOT sequences breaks their TPOT targets
// while the placement that caused it looks cheap on its own terms;
// prefix affinity stacks long prefills on busy decoders exactly so.
// delay_s prices the seconds linearly for every class alike; this axis
// prices what they cost: each neighbour's chance of missing its own TPOT
// target.
//
// Reads: the sequences on the worker by class — its running sequences
// (heartbeat running) split by the KV blocks each class holds (heartbeat
// kv_blocks_by_class), plus the router's bookings split by their prompt
// tokens by class — and the request's prefill_s and load_s there.
//
// Term: itl_delta_s, the rise in each neighbour's mean time per token:
// the stall (prefill_s + load_s, all of which its steps wait through)
// spread over Options.NeighbourTokens of its output; interference_usd,
// for each class k with n_k sequences there, n_k × (P(miss TPOT_k) after
// − before) × the class's miss penalty, with P(miss) from their time per
// token before it — the step at the worker's batch (decode_s per token)
// plus the prefill already queued there, spread as the stall is, since
// their steps carry it too — against the class's TPOT target
// (Options.Targets) under the GPU's TPOT prediction error. It adds to
// total_usd and only adds, so it is not in the scan's bound. No filter: a
// neighbour pushed past its target is a cost, weighed against the
// request's own.
//
// Trade-offs: heartbeats say neither each sequence's target nor how far
// it has got, so neighbours are held to their class's default target and
// a fixed remaining output; the split by class follows KV held, which
// weighs long contexts more than short ones; the neighbours' step is the
// request's own at that batch, not each one's at its context.
//
// Disabled: no interference term (delay_s alone charges the stall).

// interferencePrepare fixes, once per placement, nothing the bound reads:
// the term depends on the worker alone.
func interferencePrepare(p *Placer, _ *fleet.Fleet, _ *Request) {
	p.rp.interference = p.on[axInterference]
}

func interferenceTerm(p *Placer, c *cand, r *Request) {
	t := &c.t
	stall := t.PrefillSeconds + t.LoadSeconds
	if !p.rp.interference || c.batch <= 1 || !(stall > 0) {
		return
	}
	// The neighbours' time per token before this request: the step at
	// the batch, plus the prefill queued on the worker, which their steps
	// will carry whatever this placement does.
	perToken := 1 / float64(p.opts.NeighbourTokens)
	step := t.DecodeSeconds/float64(r.OutputTokens) + queueFor(c.row.queue[fleet.NumClasses-1], c.c)*perToken
	delta := stall * perToken
	t.ITLDeltaSeconds = delta
	usd := 0.0
	relErr := c.c.errTPOT
	for k := range fleet.NumClasses {
		n := c.row.neighbours[k]
		if n <= 0 {
			continue
		}
		target := p.neighbourTPOT[k]
		after := missProbability(relErr, target-step-delta, step+delta)
		if after == 0 {
			continue // far from the target even after: no rise
		}
		if rise := after - missProbability(relErr, target-step, step); rise > 0 {
			usd += float64(n) * rise * p.neighbourPenalty[k]
		}
	}
	t.InterferenceUSD = usd
}

// neighbours estimates the sequences on w by class rank: its running
// sequences in proportion to the KV blocks each class holds (fleet.Worker
// attributes blocks a heartbeat leaves unattributed to critical), and its
// bookings in proportion to their prompt tokens by class.
func neighbours(w *fleet.Worker) (n [fleet.NumClasses]float32) {
	kv, booked := 0, 0
	for k := range fleet.NumClasses {
		kv += w.KVByClass[k]
		booked += w.BookedPromptByClass[k]
	}
	for k := range fleet.NumClasses {
		if kv > 0 {
			n[k] += float32(w.Running) * float32(w.KVByClass[k]) / float32(kv)
		}
		if booked > 0 {
			n[k] += float32(w.BookedRequests) * float32(w.BookedPromptByClass[k]) / float32(booked)
		}
	}
	if kv == 0 && w.Running > 0 {
		n[0] += float32(w.Running) // no blocks said whose: as fleet reads them, critical
	}
	if booked == 0 && w.BookedRequests > 0 {
		n[0] += float32(w.BookedRequests)
	}
	return n
}
