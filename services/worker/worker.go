// Package worker is the GPU worker service shell: it consumes its own
// dispatch subject, feeds the requests to its backend (the simulated GPU
// engine, driven in real time), publishes heartbeats, KV events, token
// chunks and one final result per request, and aborts work on a cancel.
// The engine decides everything about batching and timing; this package
// moves bytes and keeps time.
package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/nvml"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Config configures one worker.
type Config struct {
	ID    string
	Pool  string
	GPU   string
	Model string
	Dtype string
	TP    int
	// SpeedUp runs the simulated GPU faster than real time (tests, demos);
	// reported timings stay in simulated GPU time.
	SpeedUp           float64
	HeartbeatInterval time.Duration
	MaxBatch          int
	Catalog           *catalog.Catalog
	// InitialWeights is the weight state at start (hot by default); a
	// scaled-from-zero worker starts cold and pays the load time.
	InitialWeights string
	// Instant answers every request at once without the engine: a
	// zero-time backend that isolates the control plane's own cost in
	// `switchyard bench bus`.
	Instant bool
	// Fault injects misbehaviour for fault tests (fault.go); zero is healthy.
	Fault Fault
	// Backend is "sim" (default: the simulated GPU engine) or "openai"
	// (forward to a real OpenAI-compatible server at OpenAIURL).
	Backend       string
	OpenAIURL     string
	OpenAIModel   string // served model name; default Model
	MaxConcurrent int    // openai backend: requests in flight (default 64)
	// EngineStallAfter is how long generations may wait at the engine with
	// no byte from it before the worker takes the engine out of rotation
	// (stall.go); zero means DefaultEngineStallAfter, negative turns the
	// watchdog off.
	EngineStallAfter time.Duration
	// VLLMKV follows a vLLM engine's KV events (openai backend; vllmkv.go).
	VLLMKV VLLMKVConfig
	// AckWait is the dispatch consumer's ack wait (DefaultAckWait when 0):
	// how long a dead worker's unacked dispatch waits before JetStream may
	// deliver it again. Work that runs longer is kept alive with in-progress
	// acks (keepalive.go), so it is never redelivered while it runs.
	AckWait time.Duration
	// DrainTimeout bounds how long a stopping worker waits for the work it
	// holds, simulated or at a real engine (DefaultDrainTimeout when 0);
	// what is still running then is handed back unacked and re-placed.
	DrainTimeout time.Duration
	// Role is which legs of a disaggregated request this worker takes
	// (schemas.RolePrefill, RoleDecode, RoleBoth; "" is both), Link its
	// network link for KV transfers (a catalog link name; "" takes no split
	// leg). Both go into the heartbeat for placement.
	Role, Link string
	// KVHold is how long a finished prefill's KV is held for its decode
	// worker's pull (DefaultKVHold when 0).
	KVHold time.Duration
}

// DefaultAckWait is the dispatch consumer's ack wait.
const DefaultAckWait = 30 * time.Second

// DefaultDrainTimeout is how long a stopping worker waits for its work.
const DefaultDrainTimeout = 30 * time.Second

// Worker is one simulated GPU worker.
type Worker struct {
	sh      *svc.Shell
	cfg     Config
	replica perf.Replica

	mu       sync.Mutex
	eng      *engine.Engine
	inflight map[string]*job
	wake     chan struct{}
	clock    simClock
	kvSeq    uint64
	hbSeq    uint64
	done     uint64
	errs     uint64
	draining bool
	// pending is a sleep waiting for the engine's sequences (tiers.go).
	pending pendingSleep
	// roles is the live role (role.go): Config.Role until the controller
	// changes it.
	roles roleState
	// shift is the models parked here and a switch under way (switch.go).
	shift shiftState
	// remote is set for the openai backend.
	remote *remote
	// vkv relays a vLLM engine's KV events (vllmkv.go); guarded by mu.
	vkv *vllmRelay
	// tombstones are cancels that arrived before their dispatch.
	tombstones map[string]tombstone
	// held are finished prefill legs whose KV waits for a pull (legs.go).
	held map[string]heldKV
	// instant bounds and tracks the zero-time backend's answers in flight.
	instant   chan struct{}
	instantWG sync.WaitGroup
}

// instantConcurrency is how many answers the zero-time backend publishes
// at once. Each waits for its stored ack (the result's compare-and-set);
// one at a time, the benchmark would measure this worker's round trips
// rather than the control plane.
const instantConcurrency = 64

type job struct {
	d   schemas.Dispatch
	msg jetstream.Msg
	// tokens is the streamed request's outgoing stream, nil when the
	// request is not streamed.
	tokens *tokenStream
	// words produces the simulated answer's words in order.
	words simWords
	// resumed is what earlier attempts streamed, when this one continues it
	// (for a decode leg: at least the prefill's first token).
	resumed streamed
	// addedAt is when a decode leg's sequence entered the engine, after
	// its KV transfer.
	addedAt time.Time
}

// New builds a worker. The replica must fit the GPU.
func New(sh *svc.Shell, cfg Config) (*Worker, error) {
	if cfg.Catalog == nil {
		cfg.Catalog = catalog.Default()
	}
	if cfg.Pool == "" {
		cfg.Pool = strings.ToLower(cfg.GPU)
	}
	if cfg.Dtype == "" {
		cfg.Dtype = "bf16"
	}
	if cfg.TP == 0 {
		cfg.TP = 1
	}
	if cfg.SpeedUp <= 0 {
		cfg.SpeedUp = 1
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 500 * time.Millisecond
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.KVHold <= 0 {
		cfg.KVHold = DefaultKVHold
	}
	if !schemas.ValidRole(cfg.Role) {
		return nil, fmt.Errorf("worker %s: unknown role %q (prefill, decode or both)", cfg.ID, cfg.Role)
	}
	if !subjects.ValidToken(cfg.ID) || !subjects.ValidToken(cfg.Pool) {
		return nil, fmt.Errorf("worker id %q and pool %q must be subject tokens", cfg.ID, cfg.Pool)
	}
	rep, err := perf.NewReplica(cfg.Catalog, cfg.GPU, cfg.Model, cfg.Dtype, cfg.TP)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	eng, err := engine.New(engine.Config{Replica: rep, MaxBatch: cfg.MaxBatch, InitialWeights: cfg.InitialWeights, TargetStepCap: true})
	if err != nil {
		return nil, fmt.Errorf("worker %s engine: %w", cfg.ID, err)
	}
	w := &Worker{sh: sh, cfg: cfg, replica: rep, eng: eng, inflight: map[string]*job{}, held: map[string]heldKV{}, wake: make(chan struct{}, 1),
		instant: make(chan struct{}, instantConcurrency), roles: roleState{role: cfg.Role}}
	w.clock = simClock{real0: sh.Now(), sim0: sh.Now(), speed: cfg.SpeedUp}
	simulated := 1.0
	switch cfg.Backend {
	case "", "sim":
	case "openai":
		if cfg.OpenAIURL == "" {
			return nil, fmt.Errorf("worker %s: the openai backend needs its server's URL", cfg.ID)
		}
		if cfg.EngineStallAfter == 0 {
			w.cfg.EngineStallAfter = DefaultEngineStallAfter
		}
		if cfg.MaxConcurrent == 0 {
			w.cfg.MaxConcurrent = 64
		}
		w.remote = newRemote(w.cfg)
		warnRemoteHold(sh, w.cfg)
		simulated = 0
	default:
		return nil, fmt.Errorf("worker %s: unknown backend %q (sim or openai)", cfg.ID, cfg.Backend)
	}
	sh.Metrics.NewGauge(fmt.Sprintf(`switchyard_worker_simulated{worker=%q,gpu=%q}`, cfg.ID, rep.GPU.Name), func() float64 { return simulated })
	return w, nil
}

// Run serves until ctx ends, then drains: it stops taking dispatches and
// finishes what it holds before returning.
func (w *Worker) Run(ctx context.Context) error {
	// Events held for a batch go out before the connection closes.
	defer w.sh.FlushEvents()
	if w.remote != nil {
		w.sh.Log.Info("worker starting", "gpu", w.replica.GPU.Name, "model", w.cfg.Model, "simulated", false,
			"backend", "openai", "server", w.cfg.OpenAIURL, "nvml", w.remote.haveGPU, "gpu_name", w.remote.gpu.Name)
		if w.remote.haveGPU {
			if why := gpuMismatch(w.replica.GPU.Name, w.remote.gpu.Name); why != "" {
				w.sh.Log.Warn("configured GPU differs from the device", "reason", why)
			}
		}
	} else {
		w.sh.Log.Info("worker starting", "gpu", w.replica.GPU.Name, "model", w.cfg.Model, "simulated", true,
			"note", "simulated GPU: timings come from the roofline model in internal/core/perf, not a real device")
	}
	maxAck := w.cfg.MaxBatch * 2
	if maxAck <= 0 {
		maxAck = 512
	}
	cons, err := w.sh.JS.CreateOrUpdateConsumer(ctx, subjects.StreamDispatch, jetstream.ConsumerConfig{
		Durable:       subjects.WorkerConsumer(w.cfg.ID), // survives a restart: a worker that comes back finds what it held
		FilterSubject: subjects.Dispatch(w.cfg.ID),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		MaxAckPending: maxAck,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		// A worker that is gone for good leaves nothing behind.
		InactiveThreshold: time.Hour,
	})
	if err != nil {
		return fmt.Errorf("worker consumer: %w", err)
	}
	cancelSub, err := w.sh.NC.Subscribe(subjects.CancelAll, w.onCancel)
	if err != nil {
		return fmt.Errorf("cancel subscription: %w", err)
	}
	defer cancelSub.Unsubscribe()
	snapSub, err := w.sh.NC.Subscribe(subjects.KVSnapshotRequest(w.cfg.ID), w.onSnapshot)
	if err != nil {
		return fmt.Errorf("snapshot subscription: %w", err)
	}
	defer snapSub.Unsubscribe()
	pullSub, err := w.sh.NC.Subscribe(subjects.KVPullRequest(w.cfg.ID), w.onKVPull)
	if err != nil {
		return fmt.Errorf("KV pull subscription: %w", err)
	}
	defer pullSub.Unsubscribe()
	stopControl, err := w.subscribeControl()
	if err != nil {
		return err
	}
	defer stopControl()
	// After the subscription, so a command sent meanwhile is not missed;
	// before the consumer, so no dispatch is judged by a stale role.
	w.restoreRole(ctx)
	stopKV, err := w.startVLLMKV(ctx)
	if err != nil {
		return err
	}
	defer stopKV()

	runCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); w.loop(runCtx) }()
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); w.heartbeats(runCtx) }()
	kaDone := make(chan struct{})
	go func() { defer close(kaDone); w.keepAlive(runCtx) }()
	w.heartbeat()

	cc, err := cons.Consume(func(m jetstream.Msg) { w.onDispatch(ctx, m) }, jetstream.PullMaxMessages(maxAck), svc.PullExpiry)
	if err != nil {
		stopLoop()
		return fmt.Errorf("worker consume: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	w.instantWG.Wait()
	w.mu.Lock()
	w.draining = true
	w.mu.Unlock()
	w.heartbeat()
	// Drain: finish what is held (bounded), so a scale-down loses nothing:
	// the simulated engine's sequences and the generations at a real
	// engine alike (counting only the first let a real-engine worker return
	// with generations running, and its streamed answers fail).
	drainUntil := time.Now().Add(w.cfg.DrainTimeout)
	n := w.holding()
	if n > 0 {
		w.sh.Log.Info("draining: waiting for the work held", "requests", n, "timeout", w.cfg.DrainTimeout)
	}
	for n > 0 && time.Now().Before(drainUntil) {
		time.Sleep(20 * time.Millisecond)
		n = w.holding()
	}
	if n > 0 {
		w.handBackAll()
	}
	stopLoop()
	<-loopDone
	<-hbDone
	<-kaDone
	w.sh.Log.Info("worker stopped", "completed", w.done, "handed_back", n)
	return nil
}

// gpuMismatch says why the catalog GPU a real-engine worker was given
// (--gpu) is not the device NVML reports, "" when they agree or the device
// is not in the catalog: placement, the controller and cost all read the
// configured profile, so a wrong --gpu misprices every request this worker
// takes.
func gpuMismatch(configured, nvmlName string) string {
	device := nvml.CatalogName(nvmlName)
	if device == "" || device == configured {
		return ""
	}
	return fmt.Sprintf("--gpu is %s but NVML reports %q, the catalog's %s: placement and cost use %s's profile", configured, nvmlName, device, configured)
}

// onDispatch takes one dispatch: it drops one that already has its final
// result, answers one refused before it starts, and hands the rest to the
// backend this worker runs (instant, a real engine, or the simulated one).
func (w *Worker) onDispatch(ctx context.Context, m jetstream.Msg) {
	var d schemas.Dispatch
	if err := svc.Decode(m.Headers(), m.Data(), &d); err != nil {
		// The router only publishes what it encoded; keep the evidence.
		w.sh.DeadLetter(ctx, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, "undecodable dispatch: "+err.Error())
		m.Term()
		return
	}
	if w.skipFinished(ctx, d, m) {
		return
	}
	if res, refused := w.refuseBeforeStart(d, m); refused {
		w.finish(ctx, d, m, res)
		return
	}
	switch {
	case w.cfg.Instant:
		w.runInstant(ctx, d, m)
	case w.remote != nil:
		w.runRemote(ctx, d, m)
	default:
		w.runSimulated(ctx, d, m)
	}
}

// skipFinished acks a redelivery (this worker restarted) or a retry whose
// request already has its final result elsewhere: never compute an answer
// nobody can use.
func (w *Worker) skipFinished(ctx context.Context, d schemas.Dispatch, m jetstream.Msg) bool {
	if w.sh.Ledger == nil {
		return false
	}
	md, err := m.Metadata()
	if err != nil || (md.NumDelivered <= 1 && d.Admitted.Attempt == 0) {
		return false
	}
	id := d.Admitted.Request.ID
	if done, err := w.sh.Ledger.Done(ctx, d.Admitted.Tenant, id); err != nil || !done {
		return false
	}
	w.sh.Emit(schemas.Event{Kind: "skipped_finished", RequestID: id, Tenant: d.Admitted.Tenant, WorkerID: w.cfg.ID,
		Reason: "already has a final result (re-placed while this worker was away)"})
	m.Ack()
	return true
}

// refuseBeforeStart is the error result for a dispatch this worker must
// not start on any backend: a leg its role does not take, a request past
// its deadline, an injected fault, or one cancelled before it started.
func (w *Worker) refuseBeforeStart(d schemas.Dispatch, m jetstream.Msg) (schemas.Result, bool) {
	id := d.Admitted.Request.ID
	if e := w.refusePhase(d, storedAt(m, d)); e != nil {
		res := svc.ErrorResult(id, d.Admitted.Tenant, d.Admitted.Priority, e, w.sh.Now())
		res.WorkerID = w.cfg.ID
		return res, true
	}
	if e := engine.RefuseLate(&d.Admitted, w.sh.Now(), w.cfg.ID); e != nil {
		return svc.ErrorResult(id, d.Admitted.Tenant, d.Admitted.Priority, e, w.sh.Now()), true
	}
	if res, failed := w.injectedError(d); failed {
		return res, true
	}
	w.mu.Lock()
	reason, cancelled := w.exhume(d.Admitted.Tenant, id, w.sh.Now())
	w.mu.Unlock()
	if !cancelled {
		return schemas.Result{}, false
	}
	e := schemas.Errf(schemas.CodeCancelled, "", "cancelled before it started: %s", reason)
	res := svc.ErrorResult(id, d.Admitted.Tenant, d.Admitted.Priority, e, w.sh.Now())
	res.WorkerID, res.Simulated = w.cfg.ID, w.remote == nil
	w.sh.Emit(schemas.Event{Kind: "cancelled", RequestID: id, Tenant: d.Admitted.Tenant, WorkerID: w.cfg.ID, Reason: reason,
		Fields: map[string]any{"gpu_seconds_spent": 0.0, "before_start": true}})
	return res, true
}

// runInstant answers at once, off the consumer's goroutine, at most
// cap(w.instant) at a time.
func (w *Worker) runInstant(ctx context.Context, d schemas.Dispatch, m jetstream.Msg) {
	w.instant <- struct{}{}
	w.instantWG.Add(1)
	go func() {
		defer func() { <-w.instant; w.instantWG.Done() }()
		w.finish(ctx, d, m, w.instantResult(d))
	}()
}

// runSimulated runs a dispatch on the simulated engine: a redelivery of
// something running here is left to the running copy, a stream its lost
// worker had begun continues from what the client already received, and
// an answer already complete in the record is sent from it.
func (w *Worker) runSimulated(ctx context.Context, d schemas.Dispatch, m jetstream.Msg) {
	id := d.Admitted.Request.ID
	w.mu.Lock()
	refused := w.eng.RefuseModel(d.Admitted.Model, w.cfg.ID) // under mu: a switch changes w.eng (switch.go)
	_, dup := w.inflight[id]
	w.mu.Unlock()
	if refused != nil {
		w.finish(ctx, d, m, svc.ErrorResult(id, d.Admitted.Tenant, d.Admitted.Priority, refused, w.sh.Now()))
		return
	}
	if dup {
		// A redelivery of something running here. Not acked: that acked
		// the stream message while the work ran, and a crash then lost it
		// (restart recovery and adoption no longer saw it). The running
		// copy's in-progress acks and final ack count for the message,
		// whichever delivery they name (JetStream acks by stream sequence).
		return
	}
	// A stream its lost worker had begun continues from what the client
	// already received (docs/architecture.md, "Mid-stream failover"); a
	// decode leg continues after the prefill's first token.
	var resumed streamed
	ok := false
	if d.Phase == schemas.PhaseDecode {
		resumed, ok = w.decodeResumePoint(ctx, d, m)
	} else {
		resumed, ok = w.resumePoint(ctx, d, m)
	}
	if !ok {
		return
	}
	if resumed.seq > 0 && (resumed.done || resumed.tokens >= d.Admitted.Request.MaxTokens) {
		w.answerFromRecord(ctx, d, m, resumed, true)
		return
	}
	if d.Phase == schemas.PhaseDecode {
		if resumed.tokens >= d.Admitted.Request.MaxTokens {
			// The prefill's token was the whole answer.
			w.answerFromRecord(ctx, d, m, resumed, true)
			return
		}
		w.startDecode(ctx, d, m, resumed)
		return
	}
	w.startSimulated(ctx, d, m, resumed)
}

// startSimulated adds the request's sequence to the simulated engine,
// continued after the tokens already streamed, and wakes the engine loop;
// a sequence the engine cannot hold is answered unplaceable.
func (w *Worker) startSimulated(ctx context.Context, d schemas.Dispatch, m jetstream.Msg, resumed streamed) {
	id := d.Admitted.Request.ID
	seq := engine.Sequence{
		ID:           id,
		PromptTokens: d.Admitted.PromptTokens,
		BlockHashes:  d.Admitted.BlockHashes,
		MaxTokens:    d.Admitted.Request.MaxTokens,
		Priority:     engine.PriorityOf(d.Admitted.Priority),
		Critical:     d.Admitted.Priority == schemas.PriorityCritical,
		TPOTTarget:   time.Duration(d.Admitted.TPOTTargetMs * float64(time.Millisecond)),
	}
	var err error
	if resumed.tokens > 0 {
		seq, err = engine.Resume(seq, resumed.tokens)
	}
	if d.Phase == schemas.PhasePrefill {
		seq = w.prefillSequence(seq)
	}
	j := &job{d: d, msg: m, words: newSimWords(id), resumed: resumed}
	j.words.skip(resumed.tokens)
	if d.Admitted.Request.Stream {
		j.tokens = newTokenStream(&d.Admitted)
		j.tokens.continueFrom(resumed)
	}
	w.mu.Lock()
	if err == nil {
		if _, dup := w.inflight[id]; dup {
			w.mu.Unlock()
			return // a redelivery that raced this one: the running copy answers and acks
		}
		seq.Arrival = w.clock.now(w.sh.Now())
		if e := w.eng.RefuseModel(d.Admitted.Model, w.cfg.ID); e != nil {
			err = e // the GPU changed model since runSimulated's check (switch.go)
		} else {
			err = w.eng.Add(seq)
		}
	}
	if err == nil {
		w.inflight[id] = j
	}
	w.mu.Unlock()
	if err != nil {
		e := schemas.Errf(schemas.CodeUnplaceable, "", "worker %s cannot run it: %v", w.cfg.ID, err)
		w.finish(ctx, d, m, svc.ErrorResult(id, d.Admitted.Tenant, d.Admitted.Priority, e, w.sh.Now()))
		return
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// finish publishes the one final result and only then acks the dispatch:
// a crash in between redelivers, and result dedupe keeps it to one.
func (w *Worker) finish(ctx context.Context, d schemas.Dispatch, m jetstream.Msg, res schemas.Result) {
	pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := w.sh.PublishResult(pubCtx, res, svc.ResultFormat(d.Admitted.ResultFormat)); err != nil {
		w.sh.Log.Warn("publish result", "id", res.ID, "err", err)
		m.NakWithDelay(time.Second)
		return
	}
	w.mu.Lock()
	if res.Status == schemas.StatusOK {
		w.done++
	} else {
		w.errs++
	}
	w.mu.Unlock()
	if err := m.Ack(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		w.sh.Log.Debug("ack dispatch", "id", res.ID, "err", err)
	}
}
