// Package placement owns the router's placement decision: given the fleet
// view (internal/core/fleet) and one admitted request, which worker should run
// it, and why. It is a pure function of (fleet, request, time): no
// goroutines, no I/O, no clock.
//
// The pipeline is Filter → Score → Pick, in the style of the Kubernetes
// scheduler framework and Nomad's feasibility-then-rank iterators. Each of
// the seven axes of DESIGN.md, and interference, lives in its own axis_*.go file with its hard
// filter (if any) and its cost term, and is declared as a row of the table
// in axes.go: the fleet and request fields it reads, its filters, terms
// and bound, and its hooks, which the evaluator runs stage by stage. Every
// term is a prediction in seconds
// or US dollars, never an arbitrary score, and they meet in one formula:
//
//	completion_s = queue_s + load_s + prefill_s + transfer_s + decode_s + preempt_s
//	total_usd    = completion_s × workflow_factor × value_of_time_usd_per_s
//	             + delay_s × min(value_of_time, value_of_time[interactive])
//	             + gpu_usd
//	             + miss_usd
//	             + reclaim_s × (value_of_time[next lower class] + gpu $/s)
//	             + interference_usd
//
//	queue_s     prefill work queued or booked on the worker, net of cached
//	            prefixes, of the request's class and higher only (rank ≤
//	            its rank: the engine prefills in class order, so lower
//	            classes' tokens are work it overtakes); every class with
//	            the priority axis off (always on: every baseline sees load)
//	delay_s     the seconds this request costs the sequences already there:
//	            (running + booked) × (prefill_s + load_s), since its prefill
//	            chunks share their steps under continuous batching
//	load_s      weight warmth: cold-start seconds for the model on that worker
//	prefill_s   prefill of the prompt tokens not already in that worker's KV cache
//	decode_s    decode of the expected output at the worker's batch size
//	preempt_s   memory headroom: expected seconds lost to preemption at the KV fill after placement
//	reclaim_s   memory headroom: prefill the engine recomputes for the lower-class sequences it
//	            preempts when the request fits only in their blocks (classes in Options.Reclaim)
//	value_of_time  tenant priority: what a second of this request's latency is worth
//	workflow_factor  workflow context: later steps of a workflow carry its sunk spend
//	gpu_usd     GPU generation: GPU-seconds used × that GPU's $/hour
//	miss_usd    latency budget: P(miss the deadline, the TTFT target or the TPOT target) × the
//	            class's miss penalty; ttft_s and tpot_s are the predictions the targets are
//	            held to (ttft_target, tpot_target filter them while any worker meets both)
//	interference_usd  interference: the rise in P(miss TPOT) of the sequences decoding on
//	            the worker that this request's prefill (and load) causes, × their miss penalty
//
//	transfer_s  phase: a decode leg's KV transfer from its prefill worker, in place of prefill_s
//
// The phase axis also splits: after the aggregated pass, when the fleet has
// workers for both legs (a role that takes the phase, and a link) and the
// request's uncached prompt is long enough, Place places a prefill leg
// (its prompt and first token) and a decode leg (the rest, its KV moved
// over the links) and keeps the split when its total_usd is lower at no
// higher P(miss) (split.go; Decision.Prefill).
//
// The router books the chosen worker with Decision.Booking: prompt tokens
// net of the cached prefix, so queue_s counts only work still to do.
//
// The worker with the lowest total_usd wins. Hard filters record why each
// rejected worker was rejected and whether the reason is unresolvable
// (waiting will not help: "no GPU here can hold this model") or busy-now.
// A Decision keeps the Options.Explain cheapest candidates with their
// breakdowns. A worker first gets a lower bound on its total_usd from its
// queue, load, prefill, decode, delay and GPU-price terms (scan.go);
// workers are then evaluated cheapest bound first, and one whose bound
// exceeds the Explain-th best total so far is skipped (Decision.Skipped),
// which cannot change the outcome because every other term only adds.
// Workers are taken a decode bucket of a cost class (GPU, TP; a bucket is
// an octave of batch sizes) at a time, cheapest bucket bound first across
// classes, and within a bucket a group at a time (a quarter of the
// octave), so a group too slow, too dear, too busy or too likely to miss
// the deadline to compete is skipped without its workers being read. A skipped
// worker's filters never ran, so it has no rejection reason; when fewer
// than Explain workers pass, none is skipped and every rejection has its
// reason.
//
// The placer reads a struct-of-arrays copy of the fleet (view.go) that it
// refreshes from fleet.Versions, re-reading only the workers that changed.
//
// Times and prices come from a CostModel (internal/core/perf's Predictor in
// production). Its answers are cached per worker class (GPU, TP) within a
// placement, so a 1,000-worker fleet costs a handful of model calls, not
// thousands.
//
// A Placer is not safe for concurrent use: it owns scratch buffers that the
// returned Decision points into, valid until the next Place.
package placement
