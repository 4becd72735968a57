package placement

import (
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/prefix"
	"github.com/switchyard-ai/switchyard/schemas"
)

// CostModel predicts times and prices; *perf.Predictor implements it.
type CostModel interface {
	PrefillSeconds(gpu, model, dtype string, tp, newTokens, cachedTokens int) float64
	DecodeSeconds(gpu, model, dtype string, tp, outputTokens, batch, ctx int) float64
	LoadSeconds(gpu, model, dtype string, tp int, fromState string) float64 // fromState: schemas.WeightCold/WeightSleeping/WeightAbsent/WeightLoading; 0 for hot
	PricePerHour(gpu string, tp int) float64
}

// Policy is anything that places requests: the Placer, or a baseline
// (round-robin, least-loaded, llm-d, Dynamo, SGLang) plugged into the same
// simulator and router shell.
type Policy interface {
	Name() string
	// Place chooses a worker for req among f's workers at now. The Decision
	// may point into the policy's scratch and is valid until the next call.
	Place(f *fleet.Fleet, req *Request, now time.Time) *Decision
}

// Default class parameters. Values of time are set so interactive latency
// dominates GPU price ($2–4/h ≈ $0.0006–0.0011/s) while batch work is
// price-led.
var (
	DefaultValueOfTime = map[string]float64{
		schemas.PriorityCritical: 0.05, schemas.PriorityInteractive: 0.01,
		schemas.PriorityStandard: 0.002, schemas.PriorityBatch: 0.0002,
	}
	DefaultMissPenalty = map[string]float64{
		schemas.PriorityCritical: 2, schemas.PriorityInteractive: 0.5,
		schemas.PriorityStandard: 0.1, schemas.PriorityBatch: 0.02,
	}
	// DefaultQueueCeiling keeps every class but critical off workers with
	// more than half a second of predicted queueing: half the critical
	// class's 1 s TTFT base, so a critical request arriving behind them can
	// still start in time.
	DefaultQueueCeiling = map[string]float64{
		schemas.PriorityInteractive: 0.5, schemas.PriorityStandard: 0.5, schemas.PriorityBatch: 0.5,
	}
	// DefaultQueueCeilingYields lets interactive workflow steps past the
	// queue ceiling wherever their first token is still predicted in time.
	// A step held at the router holds its whole chain up, and the engine's
	// waiting queue serves critical first (engine.PriorityOf, as vLLM's
	// priority policy), so a step queued there does not delay a critical
	// request arriving after it: on agentic-overload (2 H100, 1.834×, seed
	// 1) 425 of 1,277 interactive steps were held priority_reserve, wait p99
	// 3.3 s, 38 TTFT misses (0.970); yielding, 0.998, critical 1.000 both
	// ways. Requests outside a workflow keep the ceiling: yielding them too
	// cost the Mooncake slice at 12× (TestPriorityUnderOverload) its
	// adaptive LIFO's lead (interactive 0.13 against EDF's 0.21, critical
	// 0.92) and a repeating burst on one autoscaled H100 interactive 0.937 →
	// 0.903: where higher classes keep arriving they overtake a request in
	// the engine's queue after it was placed, which the queue it was
	// priced on does not show. A request that would miss its target anyway
	// is held too: under overload the router's adaptive LIFO can then serve
	// a fresher one in time. Standard and batch keep their ceilings: their
	// long prefills, once started, run ahead of higher classes' waiting
	// ones.
	DefaultQueueCeilingYields = map[string]bool{schemas.PriorityInteractive: true}
	// DefaultReclaim lets only critical requests reclaim lower classes'
	// KV. On the Mooncake slice (h100:16, 10 min) letting interactive
	// reclaim too cost interactive attainment at 10× (0.901 → 0.863): it
	// is half the traffic, and its preemptions of standard and batch work
	// cost more recompute than they saved.
	DefaultReclaim   = map[string]bool{schemas.PriorityCritical: true}
	DefaultKVCeiling = map[string]float64{
		schemas.PriorityCritical: 1, schemas.PriorityInteractive: 1,
		schemas.PriorityStandard: 0.95, schemas.PriorityBatch: 0.85,
	}
)

// Placer is the Switchyard placement policy. It keeps scratch space so a
// placement allocates nothing.
type Placer struct {
	cost CostModel
	opts Options
	on   [numAxes]bool
	// stages are the axes' hooks (axes.go), by stage.
	stages stages

	classes  []class
	classIdx map[classKey]int32
	// learnedErr is the prediction error learned from results, by
	// PhaseKey (SetLearnedPhaseError).
	learnedErr map[string]float64
	epoch      uint64
	view       view
	// anchor is the time the hot rows' seen offsets count from, taken
	// from the first heard worker copied; anchorMono is whether it carries
	// a monotonic reading (see stale in view.go). cutoffOffset is this
	// placement's freshness cutoff as such an offset, and cutoffFast
	// whether comparing offsets with it is exact.
	anchor       time.Time
	anchorMono   bool
	anchored     bool
	cutoffOffset int64
	cutoffFast   bool
	modelIdx     map[modelKey]int32
	resCols      [][]residency // by modelIdx, then worker Idx
	res          []residency   // this placement's column

	lens     []int32 // prefix match lengths by worker Idx
	touched  []int32
	order    []bounded // every worker that passed the scan's first checks, by Idx
	cheapest []bounded // the cheapestFirst of them by bound, ascending
	rest     []bounded
	doomed   []bounded // bounded at +Inf while the bar was too (settleDoomed)
	// touchedIn counts, by group, the live workers holding a cached prefix
	// (bounded before any group); bucketOrder is the buckets by bound.
	touchedIn       []int32
	touchedInBucket []int32 // touchedIn summed by bucket
	bucketOrder     []int32
	done            []bool  // by worker Idx: already evaluated this placement
	bar             float64 // the Explain-th best total so far; +Inf until there are Explain
	excludedIdx     []int32 // the request's Exclude, as Idx
	cached          []cachedPrefill

	// now is the time of the placement under way; relaxed is set while
	// it places again with the TTFT and TPOT targets priced rather than
	// filtered, every worker having missed one (Decision.Relaxed).
	now     time.Time
	relaxed bool
	// neighbourTPOT and neighbourPenalty are each class's default TPOT
	// target (seconds) and miss penalty, by rank, for the interference
	// axis.
	neighbourTPOT, neighbourPenalty [fleet.NumClasses]float64

	req        Request // the request being placed, defaults filled in
	rp         reqParams
	byPriority []reqParams // params of each of schemas.Priorities, by rank
	cand       cand

	dec   Decision
	cands []Candidate
	rejs  []Rejection
	// index is the fleet's prefix index during a pass, for the tie-break
	// (less).
	index *prefix.Index

	// The phase axis (axis_phase.go, split.go): tc is the cost model's
	// TransferCost, nil if it has none; splits whether Place weighs a
	// split at all. legs is the placer the split's two legs are placed
	// with (built on the first split, so the aggregated Decision's
	// scratch survives them), legReq and legExclude the scratch its
	// requests are built in; leg is set on a legs placer while it places
	// a split's decode leg; transfers caches a decode leg's transfer
	// prices within a placement.
	tc         TransferCost
	splits     bool
	legs       *Placer
	legReq     Request
	legExclude []string
	leg        legSource
	transfers  []transferEntry
}

// New returns a Placer using cost for predictions. It reads the class
// tables in opts (ValueOfTime and the rest) once, here: changing those
// maps afterwards does not reach the placer.
func New(cost CostModel, opts Options) *Placer {
	opts.fill()
	p := &Placer{cost: cost, opts: opts, classIdx: make(map[classKey]int32), modelIdx: make(map[modelKey]int32), stages: newStages()}
	for i := range p.on {
		p.on[i] = !opts.Disabled[axisNames[i]]
	}
	p.tc, _ = cost.(TransferCost)
	p.splits = p.tc != nil && p.on[axPhase] && opts.Split != SplitOff
	for _, prio := range schemas.Priorities {
		p.byPriority = append(p.byPriority, p.params(prio))
	}
	for k := range fleet.NumClasses {
		p.neighbourTPOT[k], p.neighbourPenalty[k] = math.Inf(1), 0
		if k < len(schemas.Priorities) {
			prio := schemas.Priorities[k]
			if tg := opts.Targets[prio]; tg.TPOT > 0 {
				p.neighbourTPOT[k] = tg.TPOT.Seconds()
			}
			p.neighbourPenalty[k] = opts.MissPenalty[prio]
		}
	}
	return p
}

// Name implements Policy.
func (p *Placer) Name() string {
	for _, on := range p.on {
		if !on {
			return "switchyard-ablated"
		}
	}
	return "switchyard"
}

// Options returns the Placer's options with defaults filled in.
func (p *Placer) Options() Options { return p.opts }

// reqParams are the request's class parameters, looked up once per
// placement rather than once per worker.
type reqParams struct {
	valueOfTime, missPenalty, ceiling float64
	queueCeiling                      float64 // +Inf for none
	// ceilingYields: the queue ceiling yields to the TTFT target
	// (Options.QueueCeilingYields).
	ceilingYields bool
	// shortYields: the request is outside a workflow and its prompt
	// within its class's Options.QueueCeilingYieldsUnder, so the queue
	// ceiling yields to its TTFT target where the worker has batch slots
	// to spare (firstTokenInTime).
	shortYields bool
	// rank is the highest class rank whose queued and booked prompt
	// tokens are ahead of the request: its own (schemas.PriorityRank),
	// or the lowest class when the priority axis is off.
	rank int
	// heldKVDecode: the request's decode is priced at the KV the batch
	// holds on every worker, not only where its prompt is mostly cached:
	// the top class's (see decodeTerm).
	heldKVDecode bool
	delayValue   float64 // USD per second of delay_s
	// reclaim is set when the class may count lower classes' KV blocks
	// as free (Options.Reclaim); reclaimValue is USD per second of
	// reclaim_s: the next lower class's value of time, the most any
	// victim's second is worth.
	reclaim      bool
	reclaimValue float64
	// sharedPrefill: the class's queue is priced as a step-sharing engine
	// runs it (Options.SharedPrefill); promptTokens is the request's
	// prompt, the uncached tokens of a worker holding none of it.
	sharedPrefill  bool
	promptTokens   int
	workflowFactor float64 // as workflowTerm computes it
	fp8            bool
	// phase is the request's phase (takesWhole, takesPrefill,
	// takesDecode), which the scan holds each class's takes to; srcLink
	// and srcPrefill are a decode leg's source link and the prefill
	// seconds its transfer overlaps (the phase axis).
	phase      uint8
	srcLink    string
	srcPrefill float64
	// Deadlines as seconds from now (+Inf for none), so the per-worker
	// loop does float arithmetic instead of time.Time arithmetic.
	deadlineIn, workflowDeadlineIn float64
	// hardIn is the deadline a worker is refused for missing: the sooner
	// of the request's and (when split) its workflow's; see the latency
	// axis.
	hardIn float64
	// stepped is set when the workflow axis splits a workflow deadline
	// across the steps left after this one, stepsLeft (see
	// effectiveDeadline).
	stepped   bool
	stepsLeft float64
	// For the scan's lower bound: the queue ceiling and whether deadlines
	// are filtered, with the axes' switches folded in.
	boundQueueCeiling float64
	boundDeadlines    bool
	timeValue         float64 // workflowFactor × valueOfTime
	// The latency axis's targets, as seconds: ttftIn from now until the
	// first token is due, tpotTarget per output token (+Inf for none);
	// targets whether either is set, boundTargets whether the bounds and
	// filters hold workers to them (not while relaxed); invOutput is
	// 1/OutputTokens.
	ttftIn, tpotTarget    float64
	targets, boundTargets bool
	invOutput             float64
	interference          bool    // the interference axis is on
	chunks                float64 // the prompt's prefill chunks with nothing cached (Options.ChunkTokens)
	// The class's default targets (Options.Targets), in seconds: TTFT is
	// defTTFTBase + defTTFTPerToken × prompt tokens; 0 for none. They are
	// the request's own class's even with the priority axis off.
	defTTFTBase, defTTFTPerToken, defTPOT float64
}

func (p *Placer) params(prio string) reqParams {
	tg := p.opts.Targets[prio]
	if !p.on[axPriority] {
		prio = schemas.PriorityStandard
	}
	rp := reqParams{valueOfTime: p.opts.ValueOfTime[prio], missPenalty: p.opts.MissPenalty[prio], ceiling: 1}
	rp.defTTFTBase, rp.defTTFTPerToken, rp.defTPOT = tg.TTFTBase.Seconds(), tg.PerPromptToken.Seconds(), tg.TPOT.Seconds()
	if c, ok := p.opts.KVCeiling[prio]; ok && c > 0 {
		rp.ceiling = c
	}
	rp.delayValue = rp.valueOfTime
	if v, ok := p.opts.ValueOfTime[schemas.PriorityInteractive]; ok && v < rp.delayValue {
		rp.delayValue = v
	}
	rp.queueCeiling = math.Inf(1)
	if c, ok := p.opts.QueueCeiling[prio]; ok && c >= 0 {
		rp.queueCeiling = c
		rp.ceilingYields = p.opts.QueueCeilingYields[prio]
	}
	rp.rank = fleet.NumClasses - 1
	if r := schemas.PriorityRank(prio); p.on[axPriority] && r >= 0 && r < fleet.NumClasses {
		rp.rank = r
	}
	rp.heldKVDecode = p.on[axPriority] && rp.rank == 0
	rp.sharedPrefill = p.opts.SharedPrefill[prio]
	if p.on[axPriority] && p.opts.Reclaim[prio] && rp.rank+1 < len(schemas.Priorities) {
		rp.reclaim = true
		rp.reclaimValue = p.opts.ValueOfTime[schemas.Priorities[rp.rank+1]]
	}
	return rp
}

// cand is the working state for one worker during a placement.
type cand struct {
	i          int32 // the worker's Idx
	h          *hotRow
	row        *coldRow
	c          *class
	res        *residency
	t          Terms
	deadlineIn float64 // effective deadline (workflow-propagated), seconds from now; +Inf for none
	batch      int
	usedFrac   float64 // KV fill after placement, 0 when unknown; 1 when it reclaims
	reclaim    int     // Terms.ReclaimBlocks
}

// Place implements Policy. It places req aggregated (or as the one leg
// its Phase asks for) and then, when the fleet has workers for both legs
// and the request is worth it, weighs splitting it (split.go).
func (p *Placer) Place(f *fleet.Fleet, req *Request, now time.Time) *Decision {
	d := p.place(f, req, now)
	if p.splits && req.Phase == schemas.PhaseBoth && p.view.prefillers > 0 && p.view.decoders > 0 {
		p.split(f, req, now, d)
	}
	return d
}

// place is one placement pass: req on one worker.
func (p *Placer) place(f *fleet.Fleet, req *Request, now time.Time) *Decision {
	p.epoch++
	p.index = f.Prefix()
	p.now, p.relaxed = now, false
	// The request with its defaults filled in, kept in the placer so that
	// handing it to the axes' hooks (calls through function values, which
	// escape analysis cannot see into) does not put it on the heap.
	p.req = *req
	r := &p.req
	if r.Dtype == "" {
		r.Dtype = p.opts.DefaultDtype
	}
	r.Model, r.Dtype = f.Canonical(r.Model), f.Canonical(r.Dtype)
	if r.Priority == "" {
		r.Priority = schemas.PriorityStandard
	}
	if r.OutputTokens < 1 {
		r.OutputTokens = 1
	}
	if r.PromptTokens < 1 {
		r.PromptTokens = 1
	}
	// A leg is priced for its share of the output (see Request.Phase):
	// a prefill leg its first token, a decode leg the rest.
	switch r.Phase {
	case schemas.PhasePrefill:
		r.OutputTokens = 1
	case schemas.PhaseDecode:
		r.OutputTokens = max(r.OutputTokens-1, 1)
	}

	p.refresh(f)
	hot := p.view.hot
	p.res = p.residencies(r.Model, r.Dtype)
	p.grow(len(hot), f.Prefix().MaxWorker())
	p.cached = p.cached[:0]
	if rank := schemas.PriorityRank(r.Priority); rank >= 0 {
		p.rp = p.byPriority[rank]
	} else {
		p.rp = p.params(r.Priority)
	}
	p.rp.fp8 = isFP8(r.Dtype)
	p.rp.promptTokens = r.PromptTokens
	p.rp.deadlineIn, p.rp.workflowDeadlineIn = secondsUntil(r.Deadline, now), secondsUntil(r.WorkflowDeadline, now)
	p.touched = p.touched[:0]
	for _, prepare := range p.stages.prepare {
		prepare(p, f, r)
	}
	p.rp.timeValue = p.rp.workflowFactor * p.rp.valueOfTime
	// Per-request marks live in the rows' flags, which the scan reads
	// anyway, rather than in arrays of their own: one cache line fewer per
	// worker when another process has emptied the caches.
	p.mark(p.touched, rowTouched, true)
	p.excludedIdx = p.excludedIdx[:0]
	for _, id := range r.Exclude {
		if w := f.Get(id); w != nil {
			p.excludedIdx = append(p.excludedIdx, w.Idx)
		}
	}
	p.mark(p.excludedIdx, rowExcluded, true)
	var weight uint64
	if p.opts.WeightBytes != nil {
		weight = p.opts.WeightBytes(r.Model, r.Dtype)
	}

	d := &p.dec
	*d = Decision{Policy: p.Name(), RequestID: r.ID}
	p.cands, p.rejs = p.cands[:0], p.rejs[:0]
	// A worker is fresh when heard from at or after cutoff: one time
	// comparison per worker instead of a subtraction.
	cutoff := now.Add(-f.Staleness())
	p.scan(d, r, weight, cutoff)
	if len(p.cands) == 0 && d.Counts[ReasonTTFTTarget]+d.Counts[ReasonTPOTTarget] > 0 {
		// Every worker that got as far as the targets missed one: place
		// on the best of them, the misses priced (see the latency axis).
		p.relaxed, p.rp.boundTargets = true, false
		*d = Decision{Policy: p.Name(), RequestID: r.ID, Relaxed: true}
		p.rejs = p.rejs[:0]
		p.scan(d, r, weight, cutoff)
	}
	for _, w := range p.touched {
		p.lens[w] = 0
	}
	p.mark(p.touched, rowTouched, false)
	p.mark(p.excludedIdx, rowExcluded, false)

	d.Candidates, d.Rejections = p.cands, p.rejs
	if len(p.cands) > 0 {
		d.Worker = p.cands[0].Worker
		d.Terms = p.cands[0].Terms
	} else {
		d.Unresolvable = len(p.rejs) > 0
		for _, rj := range p.rejs {
			if !rj.Reason.Unresolvable() {
				d.Unresolvable = false
				break
			}
		}
	}
	return d
}

// mark sets (or clears) flag on the live rows at idx.
func (p *Placer) mark(idx []int32, flag rowFlags, on bool) {
	hot := p.view.hot
	for _, i := range idx {
		if int(i) >= len(hot) || hot[i].flags&rowLive == 0 {
			continue
		}
		if on {
			hot[i].flags |= flag
		} else {
			hot[i].flags &^= flag
		}
	}
}

// consider fully evaluates the worker at Idx i and records the outcome in
// d.
func (p *Placer) consider(d *Decision, i int32, r *Request, weight uint64) {
	c := &p.cand
	reason := p.evaluate(c, i, r, weight)
	if reason == ReasonNone {
		d.Considered++
		p.keep(c.row.w, &c.t)
		return
	}
	p.reject(d, i, reason)
}

func (p *Placer) reject(d *Decision, i int32, reason Reason) {
	p.rejs = append(p.rejs, Rejection{Worker: p.view.cold[i].w, Reason: reason})
	d.Counts[reason]++
}

// keep inserts w into the cheapest-first list of the best Options.Explain
// candidates. Costs that are not finite are never picked.
func (p *Placer) keep(w *fleet.Worker, t *Terms) {
	if !(t.TotalUSD < math.Inf(1)) {
		return
	}
	k := len(p.cands)
	if k == p.opts.Explain {
		if !p.better(w, t, &p.cands[k-1]) {
			return
		}
		k--
		p.cands = p.cands[:k]
	}
	i := k
	for i > 0 && p.better(w, t, &p.cands[i-1]) {
		i--
	}
	p.cands = append(p.cands, Candidate{})
	copy(p.cands[i+1:], p.cands[i:k])
	p.cands[i] = Candidate{Worker: w, Terms: *t}
	if len(p.cands) == p.opts.Explain {
		p.bar = p.cands[len(p.cands)-1].Terms.TotalUSD
	}
}

// better orders candidates by cost, exact ties by less.
func (p *Placer) better(w *fleet.Worker, t *Terms, c *Candidate) bool {
	return t.TotalUSD < c.Terms.TotalUSD || (t.TotalUSD == c.Terms.TotalUSD && p.less(w, c.Worker))
}

func secondsUntil(t, now time.Time) float64 {
	if t.IsZero() {
		return math.Inf(1)
	}
	return t.Sub(now).Seconds()
}

// less breaks exact cost ties toward the less loaded worker, then the one
// whose cache holds fewer blocks, then the lower id, so decisions are
// deterministic. The cache term is for a prefix no worker holds: placed
// on the lower id every time, every new prefix went to one worker of
// equal idle ones, which then held them all and, with an engine cache of
// a few prompts (Ollama's slots), evicted each for the next while the
// others stayed empty (bench engine --prefix: all 4 system prompts on one
// of 2 engines, 15 % more prompt tokens evaluated than round-robin). The
// emptier cache spreads new prefixes and keeps each where it went, as
// SGLang's cache-aware router sends an unmatched request to its smallest
// tree.
func (p *Placer) less(a, b *fleet.Worker) bool {
	la, lb := a.Running+a.BookedRequests, b.Running+b.BookedRequests
	if la != lb {
		return la < lb
	}
	if p.index != nil {
		if ba, bb := p.index.WorkerBlocks(a.Idx), p.index.WorkerBlocks(b.Idx); ba != bb {
			return ba < bb
		}
	}
	return a.Idx < b.Idx
}

func (p *Placer) grow(nWorkers, nIndex int) {
	n := nWorkers
	if nIndex > n {
		n = nIndex
	}
	for len(p.lens) < n {
		p.lens = append(p.lens, 0)
	}
	for len(p.done) < n {
		p.done = append(p.done, false)
	}
}
