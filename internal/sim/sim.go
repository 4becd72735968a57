// Package sim owns Switchyard's discrete-event simulator: it replays a
// workload (loadgen/traces) against a simulated fleet in virtual time, far
// faster than real time, with no NATS, and measures what each placement
// policy does to SLO attainment, goodput and cost per successful task.
//
// It drives the same core as the live services, not a model of them: one
// internal/engine per simulated replica steps in virtual time exactly as
// the live worker steps in real time; the router's view is an
// internal/fleet fed by heartbeats built from engine.State and by KV events
// built from each step's stored and evicted block hashes, on the worker's
// heartbeat period; placement is a placement.Policy (the Switchyard Placer
// or a baseline from internal/baselines) called on that fleet; bookings go
// through fleet.Reserve/Unreserve like the router's.
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

	"github.com/switchyard-ai/switchyard/internal/admission"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/engine"
	"github.com/switchyard-ai/switchyard/internal/fleet"
	"github.com/switchyard-ai/switchyard/internal/perf"
	"github.com/switchyard-ai/switchyard/internal/placement"
	"github.com/switchyard-ai/switchyard/internal/queue"
	"github.com/switchyard-ai/switchyard/internal/tokens"
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
}

// ParseGPUs parses "h100:8,a100-80g:8" (optionally "h100:4:2" for TP 2).
func ParseGPUs(s string) ([]GPUSpec, error) {
	var out []GPUSpec
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, ":")
		g := GPUSpec{GPU: f[0], Count: 1, TP: 1}
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
	// Drain is how long after the last arrival the run continues before
	// unfinished requests count as failed (default 5 min).
	Drain time.Duration
	// Seed seeds the engines' speculative-decoding draws.
	Seed int64
	// OnPlace, when set, sees every placement with the fleet and request it
	// was made on (tests use it to check the live path decides the same).
	OnPlace func(f *fleet.Fleet, req *placement.Request, now time.Time, d *placement.Decision)
	// Autoscale, when set, runs the control loop (internal/control) in
	// virtual time over the fleet, which GPUs only starts (autoscale.go).
	Autoscale *Autoscale
	// OnResolve, when set, sees every request's outcome as it resolves: a
	// diagnostics hook for finding where a class loses its SLO.
	OnResolve func(Outcome)
	// QueueLIFOAfter overrides queue.DefaultLIFOAfter, the wait after which
	// a backlogged class serves newest first; negative keeps every class in
	// EDF order always, for comparisons.
	QueueLIFOAfter time.Duration
}

// Outcome is one request's fate, for Config.OnResolve.
type Outcome struct {
	Request *traces.Request
	// Status is "ok", "failed" or "shed"; SLOMet only for ok.
	Status string
	SLOMet bool
	Worker string // empty unless placed
	// Submitted, Placed and Done are virtual times (zero Placed when never
	// placed); TTFT and ITL are seconds, for finished requests.
	Submitted, Placed, Done time.Time
	TTFT, ITL               float64
	Preemptions             int
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
	if c.Drain <= 0 {
		c.Drain = 5 * time.Minute
	}
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
	worker   int32
	submitAt int64
	placeAt  int64
	doneAt   int64
	preempt  int32
	ttft     float64 // seconds
	itl      float64 // seconds, mean per output token after the first
	cached   int
	gpuSec   float64
}

type simWorker struct {
	id       string
	idx      int32
	pool     string
	eng      *engine.Engine
	rep      perf.Replica
	busy     bool
	last     engine.Step
	kvSeq    uint64
	hbSeq    uint64
	done     uint64
	carryGPU float64 // GPU-seconds of steps that emitted nothing yet
	busyGPU  float64
	hb       schemas.Heartbeat
	byClass  map[string]int // hb.QueuedTokensByClass, reused
	kvClass  map[string]int // hb.KVBlocksByClass, reused
	models   [1]schemas.ModelState
	kv       schemas.KVEvent
}

// runner is one simulation in progress.
type runner struct {
	cfg    Config
	tr     *traces.Trace
	pol    Policy
	fleet  *fleet.Fleet
	pred   *perf.Predictor
	ws     []*simWorker
	byWID  map[string]int32
	reqs   []reqState
	preq   []placement.Request
	byID   map[string]int32
	next   []int32 // next workflow step of each request, -1 if none
	wfFail map[string]bool
	h      eventHeap
	now    int64
	queue  []int32 // FIFO hand-off for gateway-style policies
	cq     *queue.Queue[int32]
	expBuf []queue.Item[int32]
	// recent holds completion times of the last throughputWindow, the
	// fleet throughput the admitter's shedder divides queue depth by.
	recent  []int64
	pending map[string]int
	open    int // requests not yet resolved
	steps   uint64
	doneFn  func(requestID, workerID string)
	as      *autoscaler // nil for a fixed fleet
}

func at(ns int64) time.Time { return Epoch.Add(time.Duration(ns)) }

// Run simulates tr on cfg's fleet under pol and returns its metrics. pol
// must be fresh: policies keep routing state between calls.
func Run(cfg Config, tr *traces.Trace, pol Policy) (*Result, error) {
	cfg.fill()
	if len(tr.Requests) == 0 {
		return nil, errors.New("sim: empty trace")
	}
	start := time.Now()
	r := &runner{
		cfg: cfg, tr: tr, pol: pol,
		fleet:  fleet.New(fleet.Options{}),
		pred:   perf.NewPredictor(cfg.Catalog),
		byWID:  make(map[string]int32),
		reqs:   make([]reqState, len(tr.Requests)),
		preq:   make([]placement.Request, len(tr.Requests)),
		byID:   make(map[string]int32, len(tr.Requests)),
		next:   make([]int32, len(tr.Requests)),
		wfFail: make(map[string]bool),
	}
	if o, ok := pol.Policy.(interface {
		Done(requestID, workerID string)
	}); ok {
		r.doneFn = o.Done
	}
	if pol.ClassQueue {
		r.cq = queue.New[int32](nil)
		if cfg.QueueLIFOAfter != 0 {
			r.cq.SetLIFOAfter(cfg.QueueLIFOAfter)
		}
	}
	if err := r.buildFleet(); err != nil {
		return nil, err
	}
	if cfg.Autoscale != nil {
		if err := r.startAutoscale(); err != nil {
			return nil, err
		}
	}
	r.buildRequests()
	r.loop()
	res := r.result(pol.Name)
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

func (r *runner) buildFleet() error {
	n := 0
	for _, g := range r.cfg.GPUs {
		tp := max(g.TP, 1)
		rep, err := perf.NewReplica(r.cfg.Catalog, g.GPU, r.cfg.Model, r.cfg.Dtype, tp)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		for i := 0; i < g.Count; i++ {
			eng, err := engine.New(engine.Config{
				Replica: rep, MaxBatch: r.cfg.MaxBatch, TokenBudget: r.cfg.TokenBudget,
				KVBlocks: r.cfg.KVBlocks, Spec: engine.SpecConfig{Seed: uint64(r.cfg.Seed) + uint64(n)},
			})
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			w := &simWorker{id: fmt.Sprintf("%s-%02d", g.GPU, i), idx: int32(n), pool: g.GPU, eng: eng, rep: rep}
			r.ws = append(r.ws, w)
			r.byWID[w.id] = w.idx
			n++
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
			r.heartbeat(w)
			r.h.push(r.now+int64(r.cfg.HeartbeatInterval), evHeartbeat, w.idx)
			r.tryPlace()
		case evDeliver:
			r.deliver(ev.a)
		case evArrive:
			r.arrive(ev.a)
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
		if r.reqs[i].doneAt == 0 {
			r.reqs[i].doneAt = r.now
		}
		if r.cfg.OnResolve != nil {
			r.outcome(int32(i), stFailed)
		}
	}
}

func (r *runner) arrive(i int32) {
	q := &r.tr.Requests[i]
	st := &r.reqs[i]
	st.submitAt = r.now
	// The request reaches placement the way it reaches the live router: as
	// the admitter's envelope, converted by placement.FromAdmitted.
	adm := schemas.Admitted{
		Request: schemas.Request{ID: q.ID, Model: r.cfg.Model, MaxTokens: q.OutputTokens, Priority: q.Priority},
		Tenant:  q.Tenant, Priority: q.Priority, Model: r.cfg.Model, SubmittedAt: at(r.now),
		PromptTokens: q.PromptTokens, BlockHashes: q.BlockHashes,
	}
	if q.Deadline > 0 {
		adm.Deadline = at(r.now + int64(q.Deadline))
	}
	var wfStart time.Time
	if w := q.Workflow; w != nil {
		adm.Request.Workflow = &schemas.Workflow{ID: w.ID, Step: w.Step, Of: w.Of, DeadlineMs: w.Deadline.Milliseconds()}
		first := i
		for r.tr.Requests[first].Workflow.Prev >= 0 {
			first = int32(r.tr.Requests[first].Workflow.Prev)
		}
		wfStart = at(r.reqs[first].submitAt)
	}
	r.preq[i] = placement.FromAdmitted(&adm, r.cfg.Dtype, wfStart)
	p := &r.preq[i]
	if r.pol.ClassQueue {
		if v := r.shed(q, p.Deadline); v.Shed {
			r.resolve(i, stShed)
			return
		}
	}
	st.status = stQueued
	if r.cq != nil {
		_ = r.cq.Push(queue.Item[int32]{
			ID: q.ID, Priority: q.Priority, Deadline: p.Deadline,
			MinService: r.minService(q), Enqueued: at(r.now), Payload: i,
		})
	} else {
		r.queue = append(r.queue, i)
	}
	r.tryPlace()
}

// maxTries bounds how many queued requests one retry pass offers to the
// policy, so an overloaded run does not go quadratic in the queue length.
const maxTries = 64

func (r *runner) tryPlace() {
	if r.cq != nil {
		r.tryPlaceClassQueue()
		return
	}
	if len(r.queue) == 0 {
		return
	}
	now := at(r.now)
	kept := r.queue[:0]
	tries := 0
	for k, i := range r.queue {
		if tries >= maxTries {
			kept = append(kept, r.queue[k:]...)
			break
		}
		tries++
		d := r.place(i, now)
		switch {
		case d.OK():
			r.dispatch(i, d)
		case d.Unresolvable:
			r.resolve(i, stFailed)
		default:
			kept = append(kept, i)
		}
	}
	r.queue = kept
}

func (r *runner) dispatch(i int32, d *placement.Decision) {
	q := &r.tr.Requests[i]
	st := &r.reqs[i]
	w := r.ws[r.byWID[d.Worker.ID]]
	st.status = stPlaced
	st.worker = w.idx
	st.placeAt = r.now
	// Booked through placement's Decision.Booking, which the live router
	// uses too: the prompt tokens net of the cached prefix.
	prefill, output, blocks := d.Booking(q.PromptTokens, q.OutputTokens)
	_ = r.fleet.Reserve(w.id, q.ID, q.Priority, prefill, output, blocks, at(r.now))
	r.h.push(r.now+int64(r.cfg.DispatchLatency), evDeliver, i)
}

func (r *runner) deliver(i int32) {
	q := &r.tr.Requests[i]
	st := &r.reqs[i]
	w := r.ws[st.worker]
	err := w.eng.Add(engine.Sequence{
		ID: q.ID, PromptTokens: q.PromptTokens, BlockHashes: q.BlockHashes,
		MaxTokens: q.OutputTokens, Arrival: at(st.submitAt),
		// As the live worker does: the engine's waiting queue is ordered by class.
		Priority: max(0, schemas.PriorityRank(q.Priority)),
		Critical: q.Priority == schemas.PriorityCritical,
	})
	if err != nil {
		r.fleet.Unreserve(q.ID)
		r.resolve(i, stFailed)
		return
	}
	r.kick(w)
}

// kick starts w's next step if it is idle and has work.
func (r *runner) kick(w *simWorker) {
	if w.busy || !w.eng.HasWork() {
		return
	}
	st := w.eng.Step(at(r.now))
	r.steps++
	if st.Duration <= 0 && len(st.Finished) == 0 && len(st.Emitted) == 0 {
		return // nothing fits until something changes
	}
	w.busy = true
	w.last = st
	r.h.push(r.now+int64(st.Duration), evStepEnd, w.idx)
}

func (r *runner) stepEnd(w *simWorker) {
	st := &w.last
	w.busy = false
	if len(st.Stored) > 0 {
		r.kvEvent(w, schemas.KVStored, st.Stored)
	}
	if len(st.Evicted) > 0 {
		r.kvEvent(w, schemas.KVEvicted, st.Evicted)
	}
	// GPU time is attributed like the live worker does, split over the
	// sequences that emitted; a prefill-only step's time is carried to the
	// step that emits the first token of those prefills.
	w.busyGPU += st.GPUSeconds
	if n := len(st.Emitted); n > 0 {
		share := (st.GPUSeconds + w.carryGPU) / float64(n)
		w.carryGPU = 0
		for _, e := range st.Emitted {
			if i, ok := r.byID[e.ID]; ok {
				r.reqs[i].gpuSec += share
			}
		}
	} else {
		w.carryGPU += st.GPUSeconds
	}
	fin := len(st.Finished) > 0
	for _, f := range st.Finished {
		r.finish(w, f)
	}
	r.kick(w)
	if fin {
		r.tryPlace()
	}
}

func (r *runner) kvEvent(w *simWorker, kind string, hashes []uint64) {
	w.kvSeq++
	w.kv = schemas.KVEvent{WorkerID: w.id, Seq: w.kvSeq, Kind: kind, Hashes: hashes, At: at(r.now)}
	r.fleet.ApplyKV(&w.kv, at(r.now))
}

func (r *runner) finish(w *simWorker, f engine.Finished) {
	i, ok := r.byID[f.ID]
	if !ok {
		return
	}
	q := &r.tr.Requests[i]
	st := &r.reqs[i]
	w.done++
	r.fleet.Unreserve(q.ID)
	if r.doneFn != nil {
		r.doneFn(q.ID, w.id)
	}
	st.cached = f.CachedTokens
	st.preempt = int32(f.Preemptions)
	st.ttft = f.FirstTokenAt.Sub(at(st.submitAt)).Seconds()
	if f.OutputTokens > 1 {
		st.itl = f.FinishedAt.Sub(f.FirstTokenAt).Seconds() / float64(f.OutputTokens-1)
	}
	st.sloMet = st.ttft <= q.TTFTTarget.Seconds() && st.itl <= q.TPOTTarget.Seconds()
	r.recent = append(r.recent, r.now)
	r.resolve(i, stOK)
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

// heartbeat publishes w's state into the fleet the way the live worker's
// heartbeat does (services/worker builds the same fields from the same
// engine.State).
func (r *runner) heartbeat(w *simWorker) {
	s := w.eng.State()
	w.hbSeq++
	g := w.rep.GPU
	total := uint64(g.HBMBytes()) * uint64(w.rep.TP)
	used := uint64(float64(total)*perf.DefaultMemUtil*(1-float64(s.KVBlocksFree)/float64(max(1, s.KVBlocksTotal)))) + uint64(w.rep.WeightBytes())
	w.models[0] = schemas.ModelState{Name: w.rep.Model.Name, Dtype: w.rep.Dtype, State: s.Weights, LoadSeconds: w.rep.LoadSeconds(schemas.WeightCold)}
	// One map per worker, refilled each heartbeat: the fleet copies it.
	w.byClass = s.ClassMap(w.byClass)
	w.kvClass = s.KVClassMap(w.kvClass)
	w.hb = schemas.Heartbeat{
		WorkerID: w.id, Pool: w.pool, GPU: g.Name, Arch: g.Arch, Simulated: true, Backend: "sim", TP: w.rep.TP,
		HBMTotalBytes: total, HBMFreeBytes: total - min(total, used),
		KVBlocksTotal: s.KVBlocksTotal, KVBlocksFree: s.KVBlocksFree, BlockSize: tokens.BlockSize,
		Utilization: s.Utilization, Models: w.models[:],
		Running: s.Running, Waiting: s.Waiting, QueuedTokens: s.QueuedTokens, MaxBatch: s.MaxBatch, QueuedTokensByClass: w.byClass,
		KVBlocksByClass: w.kvClass, TokensPerSec: s.TokensPerSec, SpecDecode: s.SpecDecode,
		KVSeq: w.kvSeq, Seq: w.hbSeq, SentAt: at(r.now), PricePerHour: w.rep.PricePerHour(),
		CompletedTotal: w.done,
		Draining:       r.as != nil && r.as.draining(w.idx),
	}
	r.fleet.ApplyHeartbeat(&w.hb, at(r.now))
}

// tryPlaceClassQueue offers queued requests to the policy in the class
// queue's order (weighted classes, EDF inside a class). Requests no worker
// can take now go back in; expired ones fail with deadline exceeded rather
// than burn GPU time on an answer nobody can use.
func (r *runner) tryPlaceClassQueue() {
	now := at(r.now)
	r.expBuf = r.cq.Pass(now, maxBlocked, r.expBuf[:0], func(it queue.Item[int32]) queue.Outcome {
		i := it.Payload
		d := r.place(i, now)
		switch {
		case d.OK():
			r.dispatch(i, d)
			return queue.Placed
		case d.Unresolvable:
			r.resolve(i, stFailed)
			return queue.Answered
		}
		return queue.Blocked
	})
	for _, e := range r.expBuf {
		r.resolve(e.Payload, stFailed)
	}
}

// maxBlocked is how many requests a pass may find unplaceable before it
// stops, as in the live router (routing.Config.MaxBlocked's default).
const maxBlocked = 16

// place asks the policy and reports the decision to Config.OnPlace.
func (r *runner) place(i int32, now time.Time) *placement.Decision {
	d := r.pol.Place(r.fleet, &r.preq[i], now)
	if r.cfg.OnPlace != nil {
		r.cfg.OnPlace(r.fleet, &r.preq[i], now, d)
	}
	return d
}

// minService is the request's fastest possible service on the fleet's
// fastest replica class, alone and fully cached: the queue's expiry bar,
// which must not expire a request some worker could still serve in time.
func (r *runner) minService(q *traces.Request) time.Duration {
	best := 0.0
	for k, g := range r.cfg.GPUs {
		// Best case: the whole prompt but its last token is cached.
		s := r.pred.PrefillSeconds(g.GPU, r.cfg.Model, r.cfg.Dtype, max(g.TP, 1), 1, q.PromptTokens-1) +
			r.pred.DecodeSeconds(g.GPU, r.cfg.Model, r.cfg.Dtype, max(g.TP, 1), q.OutputTokens, 1, q.PromptTokens)
		if k == 0 || s < best {
			best = s
		}
	}
	return time.Duration(best * float64(time.Second))
}

// throughputWindow is how far back completions count as recent throughput.
const throughputWindow = int64(30 * time.Second)

// shed asks the admitter's shedder (internal/admission) whether q would
// miss its deadline behind the work queued in the router: the same check
// the live admitter makes, with the router queue's per-class depth and the
// fleet's recent completion rate as its Load.
func (r *runner) shed(q *traces.Request, deadline time.Time) admission.ShedVerdict {
	if deadline.IsZero() {
		return admission.ShedVerdict{}
	}
	cut := r.now - throughputWindow
	k := 0
	for k < len(r.recent) && r.recent[k] < cut {
		k++
	}
	r.recent = r.recent[k:]
	if r.pending == nil {
		r.pending = make(map[string]int, len(schemas.Priorities))
	}
	for _, p := range schemas.Priorities {
		r.pending[p] = r.cq.LenClass(p)
	}
	span := float64(min(r.now, throughputWindow)) / 1e9
	l := admission.Load{Pending: r.pending}
	if span > 0 {
		l.RequestsPerSec = float64(len(r.recent)) / span
	}
	return admission.Shedder{Margin: r.shedMargins()}.Check(q.Priority, at(r.now), deadline, r.service(q), l)
}

// service is the request's predicted service time alone and uncached on
// the fleet's fastest replica class (the admitter's estimate of it).
func (r *runner) service(q *traces.Request) time.Duration {
	best := 0.0
	for k, g := range r.cfg.GPUs {
		s := r.pred.PrefillSeconds(g.GPU, r.cfg.Model, r.cfg.Dtype, max(g.TP, 1), q.PromptTokens, 0) +
			r.pred.DecodeSeconds(g.GPU, r.cfg.Model, r.cfg.Dtype, max(g.TP, 1), q.OutputTokens, 1, q.PromptTokens)
		if k == 0 || s < best {
			best = s
		}
	}
	return time.Duration(best * float64(time.Second))
}

func (r *runner) outcome(i int32, status uint8) {
	st := &r.reqs[i]
	o := Outcome{
		Request: &r.tr.Requests[i], SLOMet: st.sloMet, Submitted: at(st.submitAt), Done: at(st.doneAt),
		TTFT: st.ttft, ITL: st.itl, Preemptions: int(st.preempt),
	}
	switch status {
	case stOK:
		o.Status = "ok"
	case stShed:
		o.Status = "shed"
	default:
		o.Status = "failed"
	}
	if st.placeAt > 0 {
		o.Placed = at(st.placeAt)
		o.Worker = r.ws[st.worker].id
	}
	r.cfg.OnResolve(o)
}
