// Package sim owns Switchyard's discrete-event simulator: it replays a
// workload (loadgen/traces) against a simulated fleet in virtual time, far
// faster than real time, with no NATS, and measures what each placement
// policy does to SLO attainment, goodput and cost per successful task.
//
// It runs the shipped decision core, not a model of it. The router is a
// routing.Core — the live router's state machine — advanced by the same
// Inputs the live router journals (heartbeats, KV events, admitted
// requests, releases, ticks), and its Actions are carried out in virtual
// time: a dispatch reaches the worker after the dispatch latency, a fail
// resolves the request, a snapshot request is answered from the engine.
// Each simulated replica is an internal/core/engine stepped in virtual time
// exactly as the live worker steps it in real time, and its heartbeats are
// built by the same engine.FillHeartbeat. Admission's delay step is the
// admitter's: its Shedder and DeferPolicy over an admission.FleetView fed
// the same heartbeats, with the same roofline estimate. Breakers, the retry
// budget and the reaper act as they do live, and Config.Faults makes them
// act: a worker dies, slows or goes silent on a schedule.
//
// The GPU is simulated: every result comes from internal/core/perf's roofline
// model, whose constants cite their sources.
//
// A run is a deterministic function of (config, trace, policy): events are
// ordered by (virtual time, kind, insertion order), every random choice is
// seeded, and nothing reads the wall clock except the reported run time.
package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/breaker"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/internal/core/retry"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/internal/core/slo"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Epoch is virtual time zero. A fixed date keeps runs reproducible.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// GPUSpec is one pool of identical replicas.
type GPUSpec struct {
	GPU   string
	Count int // replicas
	TP    int // GPUs per replica (default 1)
	// Model is the catalog model the pool serves ("" = Config.Model).
	Model string
}

// ParseGPUs parses "h100:8,a100-80g:8" (optionally "h100:4:2" for TP 2,
// and "h100:4@llama-3.1-70b" for a pool serving another model than the
// run's).
func ParseGPUs(s string) ([]GPUSpec, error) {
	var out []GPUSpec
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		part, model, _ := strings.Cut(part, "@")
		f := strings.Split(part, ":")
		g := GPUSpec{GPU: f[0], Count: 1, TP: 1, Model: strings.TrimSpace(model)}
		var err error
		if len(f) > 1 {
			if g.Count, err = strconv.Atoi(f[1]); err != nil || g.Count < 1 {
				return nil, fmt.Errorf("sim: bad replica count in %q", part)
			}
		}
		if len(f) > 2 {
			if g.TP, err = strconv.Atoi(f[2]); err != nil || g.TP < 1 {
				return nil, fmt.Errorf("sim: bad tp in %q", part)
			}
		}
		if len(f) > 3 {
			return nil, fmt.Errorf("sim: %q: want gpu[:count[:tp]]", part)
		}
		out = append(out, g)
	}
	if len(out) == 0 {
		return nil, errors.New("sim: no GPUs")
	}
	return out, nil
}

// Config describes the simulated fleet.
type Config struct {
	GPUs    []GPUSpec
	Model   string // catalog model name
	Dtype   string // default bf16
	Catalog *catalog.Catalog
	// KVBlocks overrides each replica's KV capacity in 16-token blocks
	// (0 = what the roofline model leaves after weights).
	KVBlocks int
	// MaxBatch and TokenBudget are the engines' budgets (0 = vLLM's).
	MaxBatch, TokenBudget int
	// HeartbeatInterval is the workers' heartbeat period (default 1 s, the
	// live worker's).
	HeartbeatInterval time.Duration
	// DispatchLatency is router → worker delivery time (default 2 ms, a
	// JetStream publish and push-consumer delivery on one LAN).
	DispatchLatency time.Duration
	// Tick is the router's retry tick while requests wait (default 25 ms,
	// the live router's; services/router Config.Tick).
	Tick time.Duration
	// Drain is how long after the last arrival the run continues before
	// unfinished requests count as failed (default 5 min).
	Drain time.Duration
	// Seed seeds the engines' speculative-decoding draws.
	Seed int64
	// Breaker and Retry configure the router core's circuit breakers and
	// retry budget (zero values: their packages' defaults, as live).
	Breaker breaker.Config
	Retry   retry.Config
	// Faults happen to workers on a schedule (fault.go).
	Faults []Fault
	// Autoscale, when set, runs the control loop (internal/core/control) in
	// virtual time over the fleet, which GPUs only starts (autoscale.go).
	Autoscale *Autoscale
	// OnResolve, when set, sees every request's outcome as it resolves: a
	// diagnostics hook for finding where a class loses its SLO.
	OnResolve func(Outcome)
	// OnInput, when set, sees every Input the router core is given and the
	// Actions it answered with, in order: what the live router would have
	// journalled. The Input's pointers are reused after the call; copy what
	// must outlive it.
	OnInput func(in routing.Input, acts []routing.Action)
	// QueueLIFOAfter overrides queue.DefaultLIFOAfter for the Switchyard
	// policy, the wait after which a backlogged class serves newest first;
	// negative keeps every class in EDF order always, for comparisons.
	QueueLIFOAfter time.Duration
}

// Outcome is one request's fate, for Config.OnResolve.
type Outcome struct {
	Request *traces.Request
	// Status is "ok", "failed" or "shed"; SLOMet only for ok.
	Status string
	SLOMet bool
	// Code is the error code of a failed or shed request.
	Code   string
	Worker string // empty unless placed
	// Submitted, Placed and Done are virtual times (zero Placed when never
	// placed); TTFT and ITL are seconds, for finished requests.
	Submitted, Placed, Done time.Time
	TTFT, ITL               float64
	Preemptions             int
	Attempts                int
}

func (c *Config) fill() {
	if c.Dtype == "" {
		c.Dtype = catalog.DtypeBF16
	}
	if c.Catalog == nil {
		c.Catalog = catalog.Default()
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.DispatchLatency <= 0 {
		c.DispatchLatency = 2 * time.Millisecond
	}
	if c.Tick <= 0 {
		c.Tick = 25 * time.Millisecond
	}
	if c.Drain <= 0 {
		c.Drain = 5 * time.Minute
	}
}

// RouterConfig is the router core's configuration for a run of policy p:
// what the live router is built with (services/router), with the
// simulator's breaker, retry and queue overrides. A bare routing.Core built
// from it and fed a run's Inputs (Config.OnInput) answers the same Actions.
func (c Config) RouterConfig(p placement.Policy, cost placement.CostModel) routing.Config {
	return routing.Config{Policy: p, Cost: cost, Breaker: c.Breaker, Retry: c.Retry,
		Queue: queue.Discipline{LIFOAfter: c.QueueLIFOAfter}}
}

// Replicas is the number of replicas the config describes.
func (c *Config) Replicas() int {
	n := 0
	for _, g := range c.GPUs {
		n += g.Count
	}
	return n
}

// Request outcomes.
const (
	stPending uint8 = iota
	stQueued
	stPlaced
	stOK
	stFailed
	stShed
	stSkipped // a workflow step never issued because an earlier one failed
)

type reqState struct {
	status   uint8
	sloMet   bool
	worker   int32 // where the current attempt was dispatched, -1 for none
	attempt  int32
	submitAt int64
	placeAt  int64
	doneAt   int64
	preempt  int32
	ttft     float64 // seconds
	itl      float64 // seconds, mean per output token after the first
	cached   int
	gpuSec   float64
	code     string
}

type simWorker struct {
	id      string
	idx     int32
	pool    string
	eng     *engine.Engine
	rep     perf.Replica
	busy    bool
	last    engine.Step
	kvSeq   uint64
	hbSeq   uint64
	done    uint64
	busyGPU float64
	hb      schemas.Heartbeat
	kv      schemas.KVEvent
	fault   workerFault
	// running maps a request on this engine to its attempt, so a late
	// finish of an attempt the router re-placed is told apart.
	running map[int32]int32
	// deliveredAt is when each running request reached the engine.
	deliveredAt map[int32]int64
}

// runner is one simulation in progress.
type runner struct {
	cfg    Config
	tr     *traces.Trace
	pol    Policy
	core   *routing.Core
	view   admission.FleetView
	pred   *perf.Predictor
	ws     []*simWorker
	byWID  map[string]int32
	reqs   []reqState
	adm    []schemas.Admitted
	byID   map[string]int32
	next   []int32 // next workflow step of each request, -1 if none
	wfFail map[string]bool
	h      eventHeap
	now    int64
	// tickAt is when the next queued-work tick fires (0: none armed).
	tickAt  int64
	pending map[string]int
	kinds   []admission.ReplicaKind
	open    int // requests not yet resolved
	steps   uint64
	as      *autoscaler // nil for a fixed fleet
	rel     Reliability
}

func at(ns int64) time.Time { return Epoch.Add(time.Duration(ns)) }

// Run simulates tr on cfg's fleet under pol and returns its metrics. pol
// must be fresh: policies keep routing state between calls.
func Run(cfg Config, tr *traces.Trace, pol Policy) (*Result, error) {
	cfg.fill()
	if len(tr.Requests) == 0 {
		return nil, errors.New("sim: empty trace")
	}
	if err := cfg.checkFaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	pred := perf.NewPredictor(cfg.Catalog)
	r := &runner{
		cfg: cfg, tr: tr, pol: pol, pred: pred,
		core:    routing.New(cfg.RouterConfig(pol.Policy, pred)),
		byWID:   make(map[string]int32),
		reqs:    make([]reqState, len(tr.Requests)),
		adm:     make([]schemas.Admitted, len(tr.Requests)),
		byID:    make(map[string]int32, len(tr.Requests)),
		next:    make([]int32, len(tr.Requests)),
		wfFail:  make(map[string]bool),
		pending: make(map[string]int, len(schemas.Priorities)),
	}
	if err := r.buildFleet(); err != nil {
		return nil, err
	}
	if cfg.Autoscale != nil {
		if err := r.startAutoscale(); err != nil {
			return nil, err
		}
	}
	if err := r.scheduleFaults(); err != nil {
		return nil, err
	}
	r.buildRequests()
	r.h.push(int64(sweepEvery), evSweep, 0)
	r.loop()
	res := r.result(pol.Name)
	res.Reliability = r.rel
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

// sweepEvery is how often the router ticks with nothing queued, so its
// breakers, reaper and forgetting run (the live router's idle tick).
const sweepEvery = 500 * time.Millisecond

// newWorker builds one replica's engine.
func (r *runner) newWorker(gpu, model string, tp int, id string) (*simWorker, error) {
	if model == "" {
		model = r.cfg.Model
	}
	rep, err := perf.NewReplica(r.cfg.Catalog, gpu, model, r.cfg.Dtype, max(tp, 1))
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	eng, err := engine.New(engine.Config{
		Replica: rep, MaxBatch: r.cfg.MaxBatch, TokenBudget: r.cfg.TokenBudget,
		KVBlocks: r.cfg.KVBlocks, Spec: engine.SpecConfig{Seed: uint64(r.cfg.Seed) + uint64(len(r.ws))},
	})
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	w := &simWorker{id: id, idx: int32(len(r.ws)), pool: gpu, eng: eng, rep: rep,
		running: map[int32]int32{}, deliveredAt: map[int32]int64{}}
	r.ws = append(r.ws, w)
	r.byWID[w.id] = w.idx
	return w, nil
}

func (r *runner) buildFleet() error {
	seen := map[string]int{}
	for _, g := range r.cfg.GPUs {
		for i := 0; i < g.Count; i++ {
			// Pools of one GPU serving different models share a numbering.
			n := seen[g.GPU]
			seen[g.GPU]++
			if _, err := r.newWorker(g.GPU, g.Model, g.TP, fmt.Sprintf("%s-%02d", g.GPU, n)); err != nil {
				return err
			}
		}
	}
	// Heartbeats are staggered over one period, as independent workers'
	// tickers are; all workers announce themselves at t=0.
	period := int64(r.cfg.HeartbeatInterval)
	for i, w := range r.ws {
		r.heartbeat(w)
		r.h.push(period+period*int64(i)/int64(len(r.ws)), evHeartbeat, w.idx)
	}
	return nil
}

func (r *runner) buildRequests() {
	for i := range r.tr.Requests {
		q := &r.tr.Requests[i]
		r.byID[q.ID] = int32(i)
		r.next[i] = -1
		r.reqs[i].worker = -1
		if w := q.Workflow; w != nil && w.Prev >= 0 {
			r.next[w.Prev] = int32(i)
		}
		r.open++
		if q.Workflow == nil || q.Workflow.Prev < 0 {
			r.h.push(int64(q.Arrival), evArrive, int32(i))
		}
	}
}

func (r *runner) loop() {
	last := int64(r.tr.Requests[len(r.tr.Requests)-1].Arrival)
	stop := last + int64(r.cfg.Drain)
	for r.h.len() > 0 && r.open > 0 {
		ev := r.h.pop()
		if ev.at > stop {
			break
		}
		r.now = ev.at
		switch ev.kind {
		case evStepEnd:
			r.stepEnd(r.ws[ev.a])
		case evHeartbeat:
			w := r.ws[ev.a]
			if r.as != nil && !r.as.beat(r, w) {
				break // retired
			}
			if w.fault.dead {
				break // a dead worker beats no more
			}
			r.heartbeat(w)
			r.h.push(r.now+int64(r.cfg.HeartbeatInterval), evHeartbeat, w.idx)
		case evDeliver:
			r.deliver(ev.a, ev.b)
		case evArrive:
			r.arrive(ev.a)
		case evAdmit:
			r.apply(routing.Input{Kind: routing.InAdmitted, Admitted: &r.adm[ev.a]})
		case evTick:
			if r.tickAt == ev.at {
				r.tickAt = 0
				r.apply(routing.Input{Kind: routing.InTick})
			}
		case evSweep:
			r.apply(routing.Input{Kind: routing.InTick})
			r.h.push(r.now+int64(sweepEvery), evSweep, 0)
		case evFault:
			r.fault(ev.a)
		case evReady, evControl:
			r.as.event(r, ev)
		}
	}
	// Whatever is still open at the cut-off failed.
	for i := range r.reqs {
		switch r.reqs[i].status {
		case stPending:
			if q := r.tr.Requests[i].Workflow; q != nil && q.Prev >= 0 {
				r.reqs[i].status = stSkipped
				continue
			}
		case stQueued, stPlaced:
		default:
			continue
		}
		r.reqs[i].status = stFailed
		r.reqs[i].code = "cut_off"
		if r.reqs[i].doneAt == 0 {
			r.reqs[i].doneAt = r.now
		}
		if r.cfg.OnResolve != nil {
			r.outcome(int32(i), stFailed)
		}
	}
}

// apply gives the router core one input at the current virtual time and
// carries out what it answers.
func (r *runner) apply(in routing.Input) {
	in.At = at(r.now)
	acts := r.core.Apply(in, nil)
	if r.cfg.OnInput != nil {
		r.cfg.OnInput(in, acts)
	}
	for k := range acts {
		r.act(&acts[k])
	}
	if (r.core.Queued() > 0 || r.core.Warming()) && r.tickAt == 0 {
		r.tickAt = r.now + int64(r.cfg.Tick)
		r.h.push(r.tickAt, evTick, 0)
	}
}

// act carries out one of the core's actions, as the router shell does.
func (r *runner) act(a *routing.Action) {
	switch a.Kind {
	case routing.ActDispatch:
		i, ok := r.byID[a.ID]
		if !ok {
			return
		}
		st := &r.reqs[i]
		wi, ok := r.byWID[a.Worker]
		if !ok {
			return
		}
		st.status, st.worker, st.placeAt = stPlaced, wi, r.now
		st.attempt = int32(a.Held.Adm.Attempt)
		r.h.pushAB(r.now+int64(r.cfg.DispatchLatency), evDeliver, i, st.attempt)
	case routing.ActFail:
		i, ok := r.byID[a.ID]
		if !ok || r.resolved(i) {
			return
		}
		status := stFailed
		if a.Err != nil {
			r.reqs[i].code = a.Err.Code
			if a.Err.Code == schemas.CodeShed {
				status = stShed
			}
		}
		r.resolve(i, status)
	case routing.ActSnapshot:
		// The router saw a gap in a worker's KV events and asks for its
		// whole cache, as the live worker answers over request/reply.
		if wi, ok := r.byWID[a.Worker]; ok && !r.ws[wi].fault.dead {
			w := r.ws[wi]
			w.kv = schemas.KVEvent{WorkerID: w.id, Seq: w.kvSeq, Kind: schemas.KVSnapshot, Hashes: w.eng.CachedHashes(), At: at(r.now)}
			r.apply(routing.Input{Kind: routing.InKV, KV: &w.kv})
		}
	case routing.ActEvent:
		r.rel.count(a.Event)
	}
}

func (r *runner) resolved(i int32) bool {
	switch r.reqs[i].status {
	case stOK, stFailed, stShed, stSkipped:
		return true
	}
	return false
}

// arrive is a request reaching the admitter: it becomes the admitter's
// envelope, passes the admitter's delay step (shed or defer, for policies
// behind Switchyard's admitter), and goes to the router core.
func (r *runner) arrive(i int32) {
	q := &r.tr.Requests[i]
	st := &r.reqs[i]
	st.submitAt = r.now
	adm := &r.adm[i]
	model := q.Model
	if model == "" {
		model = r.cfg.Model
	}
	*adm = schemas.Admitted{
		Request: schemas.Request{ID: q.ID, Model: model, MaxTokens: q.OutputTokens, Priority: q.Priority},
		Tenant:  q.Tenant, Priority: q.Priority, Model: model, SubmittedAt: at(r.now),
		PromptTokens: q.PromptTokens, BlockHashes: q.BlockHashes,
		TTFTTargetMs: float64(q.TTFTTarget) / float64(time.Millisecond),
		TPOTTargetMs: float64(q.TPOTTarget) / float64(time.Millisecond),
	}
	if q.Deadline > 0 {
		adm.Deadline = at(r.now + int64(q.Deadline))
	}
	if w := q.Workflow; w != nil {
		adm.Request.Workflow = &schemas.Workflow{ID: w.ID, Step: w.Step, Of: w.Of, DeadlineMs: w.Deadline.Milliseconds()}
		first := i
		for r.tr.Requests[first].Workflow.Prev >= 0 {
			first = int32(r.tr.Requests[first].Workflow.Prev)
		}
		adm.WorkflowStartedAt = at(r.reqs[first].submitAt)
	}
	st.status = stQueued
	if r.pol.Admission {
		switch until, shed := r.delay(adm); {
		case shed != nil:
			st.code = shed.Code
			r.resolve(i, stShed)
			return
		case !until.IsZero():
			// Deferred: the admitter publishes it scheduled for later.
			r.h.push(until.Sub(Epoch).Nanoseconds(), evAdmit, i)
			return
		}
	}
	r.apply(routing.Input{Kind: routing.InAdmitted, Admitted: adm})
}

// delay is the admitter's delay step (admission.Decide, step 7) over the
// admitter's fleet view: shed what would miss its deadline behind the
// queue, defer batch work while the fleet is busy.
func (r *runner) delay(a *schemas.Admitted) (until time.Time, shed *schemas.Error) {
	now := at(r.now)
	for _, p := range schemas.Priorities {
		r.pending[p] = r.core.QueuedClass(p)
	}
	load := r.view.Load(r.pending, now)
	r.kinds = r.view.Kinds(now, a.Model, r.kinds)
	es, ok := admission.RooflineEstimate(r.pred, r.kinds, a.Model, a.PromptTokens, a.Request.MaxTokens)
	if !ok {
		return time.Time{}, nil
	}
	sh := admission.Shedder{Margin: r.shedMargins()}
	if v := sh.Check(a.Priority, now, a.Deadline, es.Latency, load); v.Shed {
		return time.Time{}, v.Error
	}
	wait, _ := sh.Wait(a.Priority, load)
	if t, ok, _ := (admission.DeferPolicy{}).Defer(a.Priority, now, a.Deadline, es.Latency, wait, load); ok {
		return t, nil
	}
	return time.Time{}, nil
}

// deliver is a dispatch reaching its worker.
func (r *runner) deliver(i, attempt int32) {
	st := &r.reqs[i]
	if r.resolved(i) || st.attempt != attempt || st.worker < 0 {
		return
	}
	w := r.ws[st.worker]
	if w.fault.dead {
		return // lost with the worker; its breaker will notice
	}
	q := &r.tr.Requests[i]
	adm := &r.adm[i]
	if e := w.eng.RefuseModel(adm.Model, w.id); e != nil {
		r.finishError(w, i, e)
		return
	}
	if e := engine.RefuseLate(adm, at(r.now), w.id); e != nil {
		r.finishError(w, i, e)
		return
	}
	err := w.eng.Add(engine.Sequence{
		ID: q.ID, PromptTokens: q.PromptTokens, BlockHashes: q.BlockHashes,
		MaxTokens: q.OutputTokens, Arrival: at(r.now),
		Priority: engine.PriorityOf(adm.Priority), Critical: adm.Priority == schemas.PriorityCritical,
	})
	if err != nil {
		r.finishError(w, i, schemas.Errf(schemas.CodeUnplaceable, "", "worker %s cannot run it: %v", w.id, err))
		return
	}
	w.running[i] = attempt
	w.deliveredAt[i] = r.now
	r.kick(w)
}

// finishError is a worker's error result: it resolves the request and
// releases it in the router, whose breaker learns from its code.
func (r *runner) finishError(w *simWorker, i int32, e *schemas.Error) {
	r.reqs[i].code = e.Code
	r.resolve(i, stFailed)
	r.apply(routing.Input{Kind: routing.InReleased, ID: r.tr.Requests[i].ID,
		Result: &routing.ResultSummary{Status: schemas.StatusFailed, Code: e.Code, WorkerID: w.id}})
}

// kick starts w's next step if it is idle and has work.
func (r *runner) kick(w *simWorker) {
	if w.busy || w.fault.dead || !w.eng.HasWork() {
		return
	}
	st := w.eng.Step(at(r.now))
	r.steps++
	if st.Duration <= 0 && len(st.Finished) == 0 && len(st.Emitted) == 0 {
		return // nothing fits until something changes
	}
	w.busy = true
	w.last = st
	r.h.push(r.now+w.fault.stretch(st.Duration), evStepEnd, w.idx)
}

func (r *runner) stepEnd(w *simWorker) {
	w.busy = false
	if w.fault.dead {
		return
	}
	st := &w.last
	if len(st.Stored) > 0 {
		r.kvEvent(w, schemas.KVStored, st.Stored)
	}
	if len(st.Evicted) > 0 {
		r.kvEvent(w, schemas.KVEvicted, st.Evicted)
	}
	w.busyGPU += st.GPUSeconds
	for _, f := range st.Finished {
		r.finish(w, f)
	}
	r.kick(w)
}

func (r *runner) kvEvent(w *simWorker, kind string, hashes []uint64) {
	w.kvSeq++
	w.kv = schemas.KVEvent{WorkerID: w.id, Seq: w.kvSeq, Kind: kind, Hashes: hashes, At: at(r.now)}
	r.apply(routing.Input{Kind: routing.InKV, KV: &w.kv})
}

// finish is a worker's ok result for request f.ID. The first final result
// wins, as the live result ledger makes it: a finish of an attempt the
// router already re-placed or answered is dropped.
func (r *runner) finish(w *simWorker, f engine.Finished) {
	i, ok := r.byID[f.ID]
	if !ok {
		return
	}
	attempt := w.running[i]
	delivered := w.deliveredAt[i]
	delete(w.running, i)
	delete(w.deliveredAt, i)
	st := &r.reqs[i]
	st.gpuSec += f.GPUSeconds
	if r.resolved(i) || st.attempt != attempt || st.worker != w.idx {
		return
	}
	w.done++
	st.cached = f.CachedTokens
	st.preempt = int32(f.Preemptions)
	ttft := f.FirstTokenAt.Sub(at(st.submitAt))
	var itl time.Duration
	if f.OutputTokens > 1 {
		itl = f.FinishedAt.Sub(f.FirstTokenAt) / time.Duration(f.OutputTokens-1)
	}
	st.ttft, st.itl = ttft.Seconds(), itl.Seconds()
	st.sloMet = slo.Met(slo.Observed{OK: true, TTFT: ttft, ITL: itl, Finished: f.FinishedAt}, slo.TargetOf(&r.adm[i]))
	r.resolve(i, stOK)
	r.apply(routing.Input{Kind: routing.InReleased, ID: f.ID, Result: &routing.ResultSummary{
		Status: schemas.StatusOK, WorkerID: w.id, WorkMs: float64(r.now-delivered) / 1e6}})
}

// resolve records i's final status and releases or skips the rest of its
// workflow.
func (r *runner) resolve(i int32, status uint8) {
	st := &r.reqs[i]
	st.status = status
	st.doneAt = r.now
	r.open--
	if r.as != nil {
		r.as.resolved(r, i, status)
	}
	q := &r.tr.Requests[i]
	if r.cfg.OnResolve != nil {
		r.outcome(i, status)
	}
	if q.Workflow == nil {
		return
	}
	if status != stOK {
		r.wfFail[q.Workflow.ID] = true
	}
	nx := r.next[i]
	if nx < 0 {
		return
	}
	if status != stOK {
		// The workflow cannot succeed: its later steps are never sent.
		for ; nx >= 0; nx = r.next[nx] {
			r.reqs[nx].status = stSkipped
			r.open--
		}
		return
	}
	r.h.push(r.now+int64(r.tr.Requests[nx].Workflow.ToolGap), evArrive, nx)
}

// heartbeat publishes w's state to the router core and the admitter's
// fleet view, built as the live worker builds it (engine.FillHeartbeat).
func (r *runner) heartbeat(w *simWorker) {
	if w.fault.silent {
		return
	}
	w.hbSeq++
	hb := &w.hb
	hb.WorkerID, hb.Pool, hb.Backend = w.id, w.pool, "sim"
	hb.KVSeq, hb.Seq, hb.SentAt, hb.CompletedTotal = w.kvSeq, w.hbSeq, at(r.now), w.done
	hb.Draining = r.as != nil && r.as.draining(w.idx)
	w.eng.FillHeartbeat(hb)
	r.view.Observe(*hb, at(r.now))
	r.apply(routing.Input{Kind: routing.InHeartbeat, Heartbeat: hb})
}

func (r *runner) outcome(i int32, status uint8) {
	st := &r.reqs[i]
	o := Outcome{
		Request: &r.tr.Requests[i], SLOMet: st.sloMet, Submitted: at(st.submitAt), Done: at(st.doneAt),
		TTFT: st.ttft, ITL: st.itl, Preemptions: int(st.preempt), Code: st.code, Attempts: int(st.attempt) + 1,
	}
	switch status {
	case stOK:
		o.Status = "ok"
	case stShed:
		o.Status = "shed"
	default:
		o.Status = "failed"
	}
	if st.worker >= 0 {
		o.Placed = at(st.placeAt)
		o.Worker = r.ws[st.worker].id
	}
	r.cfg.OnResolve(o)
}
