package placement

import (
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/tokens"
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

// Request is what placement needs to know about one admitted request.
type Request struct {
	ID       string
	Tenant   string
	Model    string
	Dtype    string // "" means Options.DefaultDtype
	Priority string // one of schemas.Priorities; "" means standard
	// PromptTokens and OutputTokens size the work; OutputTokens is the
	// expected (or max) completion length.
	PromptTokens, OutputTokens int
	// BlockHashes are the prompt's chained KV block hashes.
	BlockHashes []uint64
	// Deadline is the request's absolute deadline; zero means none.
	Deadline time.Time
	// Workflow places the request in a multi-step workflow; nil if none.
	Workflow *schemas.Workflow
	// WorkflowDeadline is the workflow's absolute deadline (its first
	// step's submission plus Workflow.DeadlineMs); zero means none.
	WorkflowDeadline time.Time
	// Exclude lists workers a retry must avoid.
	Exclude []string
}

// FromAdmitted builds a Request from the admitter's envelope. The expected
// output length is the request's max_tokens; workflowStart is when the
// workflow's first step was submitted (zero if unknown).
func FromAdmitted(a *schemas.Admitted, dtype string, workflowStart time.Time) Request {
	r := Request{
		ID: a.Request.ID, Tenant: a.Tenant, Model: a.Model, Dtype: dtype,
		Priority: a.Priority, PromptTokens: a.PromptTokens, OutputTokens: a.Request.MaxTokens,
		BlockHashes: a.BlockHashes, Deadline: a.Deadline, Workflow: a.Request.Workflow,
		Exclude: a.ExcludeWorkers,
	}
	if w := a.Request.Workflow; w != nil && w.DeadlineMs > 0 && !workflowStart.IsZero() {
		r.WorkflowDeadline = workflowStart.Add(time.Duration(w.DeadlineMs) * time.Millisecond)
	}
	return r
}

// Terms is one candidate's cost breakdown; see the package doc for the
// formula. Seconds are predictions for this request on this worker.
type Terms struct {
	QueueSeconds float64 `json:"queue_s"`
	// DelaySeconds is the delay this request imposes on the work already
	// on the worker (others' seconds, summed): see queueTerm.
	DelaySeconds   float64 `json:"delay_s"`
	LoadSeconds    float64 `json:"load_s"`
	PrefillSeconds float64 `json:"prefill_s"`
	// SavedSeconds is the prefill time the cached prefix saves; it is
	// already left out of PrefillSeconds and is reported to explain it.
	SavedSeconds      float64 `json:"saved_s"`
	DecodeSeconds     float64 `json:"decode_s"`
	PreemptSeconds    float64 `json:"preempt_s"`
	CompletionSeconds float64 `json:"completion_s"`
	// SlackSeconds is the time left before the effective deadline after
	// the predicted completion; +Inf without a deadline.
	SlackSeconds float64 `json:"slack_s"`
	ValueOfTime  float64 `json:"value_of_time_usd_per_s"`
	// DelayValue is what a second of delay_s is worth: the request's own
	// value of time, capped at the interactive class's (see delayTerm).
	DelayValue     float64 `json:"delay_value_usd_per_s"`
	WorkflowFactor float64 `json:"workflow_factor"`
	PMiss          float64 `json:"p_miss"`
	TimeUSD        float64 `json:"time_usd"`
	GPUUSD         float64 `json:"gpu_usd"`
	MissUSD        float64 `json:"miss_usd"`
	TotalUSD       float64 `json:"total_usd"`
	CachedTokens   int     `json:"cached_tokens"`
	// Blocks is the KV blocks the request needs beyond its cached prefix.
	Blocks int `json:"blocks"`
	// ReclaimBlocks is how many of Blocks the worker has free only by
	// preempting strictly lower classes (see the headroom axis);
	// ReclaimSeconds is the prefill those victims will recompute, and
	// ReclaimUSD what that costs them and the GPU. All zero when the
	// request fits in free blocks.
	ReclaimBlocks  int     `json:"reclaim_blocks,omitempty"`
	ReclaimSeconds float64 `json:"reclaim_s,omitempty"`
	ReclaimUSD     float64 `json:"reclaim_usd,omitempty"`
}

// Candidate is a worker that passed every filter, with its breakdown.
type Candidate struct {
	Worker *fleet.Worker
	Terms  Terms
}

// Rejection records why a worker was filtered out.
type Rejection struct {
	Worker *fleet.Worker
	Reason Reason
}

// Decision is the outcome of one placement. Candidates and Rejections live
// in the Placer's scratch: copy them to keep them past the next Place.
type Decision struct {
	Policy    string
	RequestID string
	// Worker is the chosen worker, nil when none passed the filters.
	Worker *fleet.Worker
	// Terms is the chosen worker's breakdown.
	Terms Terms
	// Unresolvable is set when no worker was chosen and every rejection
	// was unresolvable: waiting will not help, so the router should fail
	// the request rather than queue it.
	Unresolvable bool
	// Candidates are the best Options.Explain workers that passed every
	// filter, cheapest first, each with its breakdown; Considered is how
	// many passed in all. Keeping only the best few is what lets a
	// thousand-worker placement stay inside its latency budget: a full
	// breakdown per worker is ~200 bytes written a thousand times.
	Candidates []Candidate
	Considered int
	// Skipped counts workers not fully evaluated because a lower bound on
	// their cost could not beat the Explain-th best candidate; they might
	// also have failed a filter, so they are not in Rejections.
	Skipped    int
	Rejections []Rejection
	// Counts is the number of rejections per Reason.
	Counts [NumReasons]int
}

// OK reports whether a worker was chosen.
func (d *Decision) OK() bool { return d.Worker != nil }

// Options configures a Placer. Zero values take the documented defaults.
type Options struct {
	// Disabled turns axes off by name (the Axis* constants) for ablations.
	// A disabled axis contributes no filter and a neutral term: the placer
	// behaves as if it could not see that information. The GPU axis's
	// capability filters (dtype support, model fits) stay on, since
	// without them requests would be sent where they cannot run at all.
	Disabled map[string]bool
	// DefaultDtype is used when a request names none (default "bf16").
	DefaultDtype string
	// WeightBytes returns the model's weight size in bytes at dtype, 0 when
	// unknown (the fits-in-HBM and HBM-headroom checks are then skipped).
	WeightBytes func(model, dtype string) uint64
	// ReferenceGPU is the GPU every worker is assumed to be when the GPU
	// axis is disabled (default "h100").
	ReferenceGPU string
	// FP8Arches are the architectures with FP8 tensor cores that placement
	// trusts for FP8 weights (default hopper, blackwell, cdna3).
	FP8Arches []string
	// ValueOfTime is USD per second of predicted completion time, per
	// priority class.
	ValueOfTime map[string]float64
	// MissPenalty is the USD lost when a request misses its deadline, per
	// priority class.
	MissPenalty map[string]float64
	// KVCeiling is the highest KV-cache fill (0..1] a class may push a
	// worker to, keeping headroom for higher classes.
	KVCeiling map[string]float64
	// QueueCeiling is the most predicted queueing, in seconds, a class may
	// find on a worker and still be placed there; a class without an entry
	// has no ceiling. Work over it waits in the router's class queue, where
	// higher classes overtake it, instead of in the worker's first-come
	// first-served prefill queue, where they cannot.
	QueueCeiling map[string]float64
	// Reclaim lists the classes whose requests may count KV blocks held by
	// strictly lower classes as theirs to take, as the engine lets them
	// (see the headroom axis); default critical only. A nil map means the
	// default; an empty one, no class.
	Reclaim map[string]bool
	// HeadroomKnee is the KV fill above which preemption risk starts
	// (default 0.8).
	HeadroomKnee float64
	// PredictionError is the relative standard error of completion-time
	// predictions, used for P(miss) (default 0.25).
	PredictionError float64
	// Explain is how many of the cheapest candidates a Decision keeps with
	// their breakdowns (default 8).
	Explain int
	// FinishWeight scales how much a workflow's completed fraction raises
	// the value of its next step's time (default 3).
	FinishWeight float64
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

func (o *Options) fill() {
	if o.DefaultDtype == "" {
		o.DefaultDtype = "bf16"
	}
	if o.ReferenceGPU == "" {
		o.ReferenceGPU = "h100"
	}
	if o.FP8Arches == nil {
		o.FP8Arches = []string{"hopper", "blackwell", "cdna3"}
	}
	if o.ValueOfTime == nil {
		o.ValueOfTime = DefaultValueOfTime
	}
	if o.MissPenalty == nil {
		o.MissPenalty = DefaultMissPenalty
	}
	if o.KVCeiling == nil {
		o.KVCeiling = DefaultKVCeiling
	}
	if o.QueueCeiling == nil {
		o.QueueCeiling = DefaultQueueCeiling
	}
	if o.Reclaim == nil {
		o.Reclaim = DefaultReclaim
	}
	if o.HeadroomKnee <= 0 || o.HeadroomKnee >= 1 {
		o.HeadroomKnee = 0.8
	}
	if o.PredictionError <= 0 {
		o.PredictionError = 0.25
	}
	if o.Explain <= 0 {
		o.Explain = 8
	}
	if o.FinishWeight <= 0 {
		o.FinishWeight = 3
	}
}

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
	epoch    uint64
	view     view
	modelIdx map[modelKey]int32
	resCols  [][]residency // by modelIdx, then worker Idx
	res      []residency   // this placement's column

	lens     []int32 // prefix match lengths by worker Idx
	touched  []int32
	order    []bounded // every worker that passed the scan's first checks, by Idx
	cheapest []bounded // the cheapestFirst of them by bound, ascending
	rest     []bounded
	// touchedIn counts, by group, the live workers holding a cached prefix
	// (bounded before any group); bucketOrder is the buckets by bound.
	touchedIn   []int32
	bucketOrder []int32
	done        []bool  // by worker Idx: already evaluated this placement
	bar         float64 // the Explain-th best total so far; +Inf until there are Explain
	excludedIdx []int32 // the request's Exclude, as Idx
	cached      []cachedPrefill

	req        Request // the request being placed, defaults filled in
	rp         reqParams
	byPriority []reqParams // params of each of schemas.Priorities, by rank
	cand       cand

	dec   Decision
	cands []Candidate
	rejs  []Rejection
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
	for _, prio := range schemas.Priorities {
		p.byPriority = append(p.byPriority, p.params(prio))
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
	// rank is the highest class rank whose queued and booked prompt
	// tokens are ahead of the request: its own (schemas.PriorityRank),
	// or the lowest class when the priority axis is off.
	rank       int
	delayValue float64 // USD per second of delay_s
	// reclaim is set when the class may count lower classes' KV blocks
	// as free (Options.Reclaim); reclaimValue is USD per second of
	// reclaim_s: the next lower class's value of time, the most any
	// victim's second is worth.
	reclaim        bool
	reclaimValue   float64
	workflowFactor float64 // as workflowTerm computes it
	fp8            bool
	// Deadlines as seconds from now (+Inf for none), so the per-worker
	// loop does float arithmetic instead of time.Time arithmetic.
	deadlineIn, workflowDeadlineIn float64
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
}

func (p *Placer) params(prio string) reqParams {
	if !p.on[axPriority] {
		prio = schemas.PriorityStandard
	}
	rp := reqParams{valueOfTime: p.opts.ValueOfTime[prio], missPenalty: p.opts.MissPenalty[prio], ceiling: 1}
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
	}
	rp.rank = fleet.NumClasses - 1
	if r := schemas.PriorityRank(prio); p.on[axPriority] && r >= 0 && r < fleet.NumClasses {
		rp.rank = r
	}
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

// Place implements Policy.
func (p *Placer) Place(f *fleet.Fleet, req *Request, now time.Time) *Decision {
	p.epoch++
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
		if !better(w, t, &p.cands[k-1]) {
			return
		}
		k--
		p.cands = p.cands[:k]
	}
	i := k
	for i > 0 && better(w, t, &p.cands[i-1]) {
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
func better(w *fleet.Worker, t *Terms, c *Candidate) bool {
	return t.TotalUSD < c.Terms.TotalUSD || (t.TotalUSD == c.Terms.TotalUSD && less(w, c.Worker))
}

func secondsUntil(t, now time.Time) float64 {
	if t.IsZero() {
		return math.Inf(1)
	}
	return t.Sub(now).Seconds()
}

// less breaks exact cost ties toward the less loaded worker, then the lower
// id, so decisions are deterministic.
func less(a, b *fleet.Worker) bool {
	la, lb := a.Running+a.BookedRequests, b.Running+b.BookedRequests
	if la != lb {
		return la < lb
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
func queueTerm(p *Placer, c *cand, _ *Request) {
	c.t.QueueSeconds = queueSeconds(p, c.h, c.c)
	c.batch = c.row.batch
}

func queueSeconds(p *Placer, h *hotRow, cl *class) float64 {
	if q := h.queue[p.rp.rank]; q > 0 {
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
// step is slower by the extra KV it reads, and that is added. It is never
// subtracted, so the table stays the scan's lower bound.
func decodeTerm(p *Placer, c *cand, r *Request) {
	d := decodeInterp(c.c, c.h.decodeLo, c.h.decodeFrac)
	if cl := c.c; cl.perCtxToken > 0 && c.row.kvTotal > 0 {
		held := float64(max(0, c.row.kvTotal-c.row.free) * max(1, c.row.blockSize))
		if extra := held + float64(cl.ctx) - float64(c.row.batch*cl.ctx); extra > 0 {
			d += float64(r.OutputTokens) * cl.perCtxToken * extra
		}
	}
	c.t.DecodeSeconds = d
}

func completion(c *cand) {
	t := &c.t
	t.CompletionSeconds = t.QueueSeconds + t.LoadSeconds + t.PrefillSeconds + t.DecodeSeconds + t.PreemptSeconds
}

// total applies the package formula.
func total(c *cand) {
	t := &c.t
	t.TimeUSD = t.CompletionSeconds*t.WorkflowFactor*t.ValueOfTime + t.DelaySeconds*t.DelayValue
	t.TotalUSD = t.TimeUSD + t.GPUUSD + t.MissUSD + t.ReclaimUSD
}

// Booking is what the caller should fleet.Reserve on the chosen worker for
// a request of promptTokens and outputTokens: the prompt tokens the worker
// still has to prefill (its cached prefix is not queued work, and counting
// it would make the worker that holds a popular prefix look busiest), the
// output tokens, and the KV blocks beyond the cached prefix. The live
// router and the simulator both book through it.
func (d *Decision) Booking(promptTokens, outputTokens int) (prefill, output, blocks int) {
	prefill = promptTokens - d.Terms.CachedTokens
	if prefill < 1 {
		prefill = 1
	}
	blocks = d.Terms.Blocks
	if blocks <= 0 {
		blocks = (promptTokens + outputTokens + tokens.BlockSize - 1) / tokens.BlockSize
	}
	return prefill, outputTokens, blocks
}
