package placement

import (
	"math"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
)

// The seven axes of DESIGN.md, and the interference a placement causes
// (an eighth), declared as data. Each row says what the
// axis reads from the fleet and the request, and gives its hooks: the
// evaluator (evaluate) and the scan's per-request set-up loop over the
// rows instead of calling the axes in an order that only a comment kept.
// A new axis is one row here plus its axis_*.go file, whose header says
// why it exists, what it reads and what it trades.
//
// A row's hooks run in stages, and within a stage in table order; the
// stages are what let one axis read another's output without the two
// being called by name:
//
//	prepare  once per placement: the axis's per-request parameters,
//	         those the scan's lower bound reads included
//	measure  per worker, before any filter: the seconds and blocks that
//	         filters read (the KV axis's prefill and blocks)
//	filter   per worker, hard filters on what is measured; the first
//	         reason found rejects the worker, so cheap unresolvable
//	         filters come first
//	seconds  terms that add to completion_s, or the deadline it is held to
//	         (completion_s is summed after this stage)
//	check    filters on the completed prediction (the deadline)
//	price    the dollar terms and rates that total_usd multiplies by
//	surcharge dollar terms that only add to total_usd (the chances of
//	         missing the deadline and targets, the neighbours'): run only
//	         for a worker whose total without them could still enter the
//	         list (see evaluate)
//
// The load terms every policy sees (queue_s, decode_s, delay_s) are not
// an axis and run around the stages (see evaluate).
//
// The lower bound per worker (lowerBound, groupBound) stays one fused
// expression rather than a loop over rows, because it runs for every
// worker the scan reads and a call per axis there cost more than the
// bound saves; each row's prepare folds the axis's switches and
// parameters into what that expression reads (reqParams' bound fields),
// and its bound field says which part of the expression is the axis's.
type axis struct {
	name string // the Axis* constant, for Options.Disabled
	id   int    // its index into Placer.on
	// reads lists the fleet and request fields the axis reads, as
	// "Type.Field" of schemas.Heartbeat, schemas.KVEvent, fleet.Worker or
	// Request; a test checks each exists and moves the axis's outcome.
	reads []string
	// filters are the reasons it rejects with; terms the Terms fields (by
	// JSON name) that its hooks set or move. The test that perturbs each
	// read checks the outcome moves in one of these.
	filters []Reason
	terms   []string
	bound   string // its part of the scan's lower bound

	prepare func(p *Placer, f *fleet.Fleet, r *Request)
	measure func(p *Placer, c *cand, r *Request)
	filter  func(p *Placer, c *cand, r *Request, weight uint64) Reason
	seconds func(p *Placer, c *cand, r *Request)
	check   func(p *Placer, c *cand, r *Request) Reason
	price   func(p *Placer, c *cand, r *Request)
	// surcharge must leave every Terms field that total_usd sums no lower
	// than it found it, which evaluate's skip relies on.
	surcharge func(p *Placer, c *cand, r *Request)
}

// axes is the table, in evaluation order. Its order among filters is the
// order rejection reasons are found in: the GPU's capability filters (no
// cost), then warmth, headroom, priority, and last the deadline.
var axes = [numAxes]axis{
	{
		name: AxisKV, id: axKV,
		reads:   []string{"KVEvent.Hashes", "Heartbeat.BlockSize", "Request.BlockHashes", "Request.PromptTokens", "Request.OutputTokens"},
		terms:   []string{"prefill_s", "saved_s", "cached_tokens", "blocks"},
		bound:   "prefill_s at the cached prefix; the holders of a prefix are bounded one by one, before any group",
		prepare: kvPrepare, measure: kvMeasure,
	},
	{
		name: AxisGPU, id: axGPU,
		reads:   []string{"Heartbeat.GPU", "Heartbeat.Arch", "Heartbeat.TP", "Heartbeat.HBMTotalBytes", "Heartbeat.PricePerHour", "Request.Dtype", "Request.Model"},
		filters: []Reason{ReasonDtypeUnsupported, ReasonModelTooLarge, ReasonCannotRun},
		// The GPU's speed is in every seconds term too.
		terms:  []string{"gpu_usd", "prefill_s", "decode_s", "load_s"},
		bound:  "gpu_usd at the worker's price; the class (GPU, TP) every seconds term is asked of",
		filter: gpuFilter, price: gpuCostTerm,
	},
	{
		name: AxisWarmth, id: axWarmth,
		reads:   []string{"Heartbeat.Models"},
		filters: []Reason{ReasonCannotRun}, // a load that cannot happen
		terms:   []string{"load_s"},
		bound:   "load_s from the residency (groups assume hot)",
		filter:  warmthTerm,
	},
	{
		name: AxisHeadroom, id: axHeadroom,
		reads:   []string{"Heartbeat.KVBlocksTotal", "Heartbeat.KVBlocksFree", "Heartbeat.HBMFreeBytes", "Heartbeat.KVBlocksByClass", "Worker.BookedBlocks"},
		filters: []Reason{ReasonWouldPreempt, ReasonHBMBusy},
		terms:   []string{"preempt_s", "reclaim_blocks", "reclaim_s", "reclaim_usd"},
		bound:   "none (its terms only add)",
		filter:  headroomFilter, seconds: headroomTerm,
	},
	{
		name: AxisPriority, id: axPriority,
		reads:   []string{"Request.Priority", "Heartbeat.QueuedTokensByClass"},
		filters: []Reason{ReasonPriorityReserve}, // the KV and queue ceilings
		// The class also chooses which classes' queue counts in queue_s.
		terms:   []string{"value_of_time_usd_per_s", "queue_s"},
		bound:   "value of time; the queue ceiling (a worker over it bounds +Inf)",
		prepare: priorityPrepare, filter: priorityFilter, price: priorityTerm,
	},
	{
		name: AxisWorkflow, id: axWorkflow,
		reads: []string{"Request.Workflow", "Request.WorkflowDeadline"},
		// The per-step deadline moves the latency axis's slack and miss.
		terms:   []string{"workflow_factor", "slack_s", "p_miss", "miss_usd"},
		bound:   "workflow_factor in the value of time; the per-step deadline",
		prepare: workflowPrepare, seconds: workflowTerm,
	},
	{
		name: AxisLatency, id: axLatency,
		reads:   []string{"Request.Deadline", "Request.TTFTTarget", "Request.TPOTTarget", "Request.Submitted", "Request.HardDeadline", "Heartbeat.QueuedTokensByClass"},
		filters: []Reason{ReasonDeadlineUnreachable, ReasonDeadlineBusy, ReasonTTFTTarget, ReasonTPOTTarget},
		terms:   []string{"slack_s", "p_miss", "miss_usd", "ttft_s", "ttft_slack_s", "ttft_p_miss", "tpot_s", "tpot_p_miss"},
		bound: "the hard deadline, and (unless relaxed) the TTFT and TPOT targets: a worker that must miss one bounds +Inf; " +
			"miss_usd of the deadline at the bound's completion (groups, and refinedBound)",
		prepare: latencyPrepare, check: latencyFilter, surcharge: latencyMiss,
	},
	{
		name: AxisInterference, id: axInterference,
		reads:   []string{"Heartbeat.Running", "Heartbeat.KVBlocksByClass", "Heartbeat.QueuedTokensByClass", "Worker.BookedRequests", "Worker.BookedPromptByClass"},
		terms:   []string{"itl_delta_s", "interference_usd"},
		bound:   "none (its term only adds)",
		prepare: interferencePrepare, surcharge: interferenceTerm,
	},
	{
		name: AxisPhase, id: axPhase,
		reads:   []string{"Heartbeat.Role", "Heartbeat.Link", "Request.Phase", "Request.Source"},
		filters: []Reason{ReasonRoleMismatch},
		// A leg's phase also sets which of its output tokens are priced
		// (decode_s), and a decode leg's transfer its TPOT.
		terms: []string{"transfer_s", "prefill_s", "decode_s", "tpot_s", "completion_s"},
		bound: "a class whose workers cannot take the request's phase bounds +Inf and is never costed; " +
			"a decode leg bounds with prefill_s 0 (transfer_s only adds)",
		prepare: phasePrepare, measure: phaseMeasure, filter: phaseFilter,
	},
}

// stages is the table's hooks by stage, built once by New so the
// per-worker loops skip axes without a hook at no cost.
type stages struct {
	prepare   []func(p *Placer, f *fleet.Fleet, r *Request)
	measure   []func(p *Placer, c *cand, r *Request)
	filter    []func(p *Placer, c *cand, r *Request, weight uint64) Reason
	seconds   []func(p *Placer, c *cand, r *Request)
	check     []func(p *Placer, c *cand, r *Request) Reason
	price     []func(p *Placer, c *cand, r *Request)
	surcharge []func(p *Placer, c *cand, r *Request)
}

func newStages() stages {
	var s stages
	for i := range axes {
		a := &axes[i]
		if a.prepare != nil {
			s.prepare = append(s.prepare, a.prepare)
		}
		if a.measure != nil {
			s.measure = append(s.measure, a.measure)
		}
		if a.filter != nil {
			s.filter = append(s.filter, a.filter)
		}
		if a.seconds != nil {
			s.seconds = append(s.seconds, a.seconds)
		}
		if a.check != nil {
			s.check = append(s.check, a.check)
		}
		if a.price != nil {
			s.price = append(s.price, a.price)
		}
		if a.surcharge != nil {
			s.surcharge = append(s.surcharge, a.surcharge)
		}
	}
	return s
}

// evaluate runs every filter and every term for the worker at Idx i: the
// load terms, then the axes' hooks stage by stage (see axes). It reads
// the placer's copy of the fleet (view), not the fleet.Worker; scan has
// already passed the worker's exclusion, draining and freshness checks
// and prepared its class.
//
// Once the list is full, a worker that passes every filter but whose
// total before the surcharges is already over the bar cannot be kept,
// whatever they add: its surcharges are not computed, and its Terms are
// left with that partial total (consider's keep turns it down). They are
// the normal tails of P(miss) for the deadline, TTFT and TPOT and each
// neighbour class's TPOT before and after — up to eleven a worker, which
// issue 27 added to every evaluation: with the roofline predictor, where
// a placement evaluates some 110 workers to keep 8, they were a tenth of
// its time. total_usd sums its terms in a fixed order, and a
// floating-point sum never falls when a term rises, so the full total is
// at least the partial one and the skip is exact, for the non-negative
// miss penalties that every bound of the scan assumes.
func (p *Placer) evaluate(c *cand, i int32, r *Request, weight uint64) Reason {
	h := &p.view.hot[i]
	*c = cand{i: i, h: h, row: &p.view.cold[i], c: &p.classes[h.class]}
	if c.c.evalEpoch != p.epoch {
		p.prepareEval(c.c, r)
	}
	queueTerm(p, c, r)
	decodeTerm(p, c, r)
	c.res = p.residencyAt(i, r)
	st := &p.stages
	for _, measure := range st.measure {
		measure(p, c, r)
	}
	for _, filter := range st.filter {
		if reason := filter(p, c, r, weight); reason != ReasonNone {
			return reason
		}
	}
	for _, seconds := range st.seconds {
		seconds(p, c, r)
	}
	completion(c)
	for _, check := range st.check {
		if reason := check(p, c, r); reason != ReasonNone {
			return reason
		}
	}
	for _, price := range st.price {
		price(p, c, r)
	}
	delayTerm(p, c, r)
	total(c)
	if c.t.TotalUSD > p.bar {
		return ReasonNone
	}
	for _, surcharge := range st.surcharge {
		surcharge(p, c, r)
	}
	total(c)
	return ReasonNone
}

// priorityPrepare folds the queue ceiling into the lower bound: a worker
// whose queue alone is over it will be rejected. Where the ceiling yields
// to the TTFT target, only a queue over both is: latencyPrepare, which
// knows the target, raises the bound.
func priorityPrepare(p *Placer, _ *fleet.Fleet, _ *Request) {
	p.rp.boundQueueCeiling = math.Inf(1)
	if p.on[axPriority] {
		p.rp.boundQueueCeiling = p.rp.queueCeiling
	}
}
