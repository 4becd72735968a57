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
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/admission"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/loadgen/traces"
	"github.com/switchyard-ai/switchyard/schemas"
)

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
	// HeldReason is why the router first held the request unplaced (a
	// placement reason such as ttft_target or deadline_busy, or the queue's
	// own), empty when it was placed on arrival: the first thing to read when
	// a class's queue wait is long.
	HeldReason string
	// PredictedTTFT, PredictedTPOT and PredictedQueue are what the
	// placement of its last whole attempt predicted (seconds; 0 when never
	// placed whole, or by a policy that predicts none): TTFT from placement,
	// TPOT, and the queue_s term of the TTFT, to read each prediction's
	// error against TTFT and ITL.
	PredictedTTFT, PredictedTPOT, PredictedQueue float64
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
	// A split request's legs: phase is the leg dispatched to worker
	// (schemas.PhasePrefill, PhaseDecode; "" for a whole request), source
	// the prefill worker holding its KV, firstTokenAt when that worker
	// produced the first token, prefillCached the prompt tokens it found
	// cached, transfer the KV transfer time the decode leg waits.
	phase         string
	source        int32
	firstTokenAt  int64
	prefillCached int
	transfer      int64
	// predTTFT, predTPOT and predQueue are the placement's TTFT, TPOT and
	// queue_s predictions for the attempt last dispatched whole (seconds;
	// Outcome.Predicted*).
	predTTFT, predTPOT, predQueue float32
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
	// heldReason is each held request's first delay reason, by index:
	// only requests that waited get an entry.
	heldReason map[int32]string
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
	if _, takes := pol.Policy.(routing.PhaseErrorSetter); takes {
		res.LearnedError = r.core.LearnedError()
	}
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

// sweepEvery is how often the router ticks with nothing queued, so its
// breakers, reaper and forgetting run (the live router's idle tick).
const sweepEvery = 500 * time.Millisecond

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
		case evHandoff:
			r.handoff(ev.a, ev.b)
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
		st.attempt = int32(a.Attempt)
		st.worker, st.phase = wi, a.Phase
		delay := int64(r.cfg.DispatchLatency)
		if a.Phase == schemas.PhaseDecode {
			// The decode leg pulls the KV before it starts: the transfer
			// the placement priced is waited on the way in.
			st.transfer = int64(a.TransferSeconds * 1e9)
			delay += st.transfer
		} else {
			st.status, st.placeAt = stPlaced, r.now
		}
		if a.Phase == "" {
			st.predTTFT, st.predTPOT, st.predQueue = float32(a.Terms.TTFTSeconds), float32(a.Terms.TPOTSeconds), float32(a.Terms.QueueSeconds)
		}
		r.h.pushAB(r.now+delay, evDeliver, i, st.attempt)
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
	case routing.ActDelayed:
		if i, ok := r.byID[a.ID]; ok {
			if _, seen := r.heldReason[i]; !seen {
				if r.heldReason == nil {
					r.heldReason = map[int32]string{}
				}
				r.heldReason[i] = a.Reason
			}
		}
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

func (r *runner) outcome(i int32, status uint8) {
	st := &r.reqs[i]
	o := Outcome{
		Request: &r.tr.Requests[i], SLOMet: st.sloMet, Submitted: at(st.submitAt), Done: at(st.doneAt),
		TTFT: st.ttft, ITL: st.itl, Preemptions: int(st.preempt), Code: st.code, Attempts: int(st.attempt) + 1,
		HeldReason:    r.heldReason[i],
		PredictedTTFT: float64(st.predTTFT), PredictedTPOT: float64(st.predTPOT), PredictedQueue: float64(st.predQueue),
	}
	delete(r.heldReason, i)
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
