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
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/slo"
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
	// VLLMKV follows a vLLM engine's KV events (openai backend; vllmkv.go).
	VLLMKV VLLMKVConfig
}

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
	// remote is set for the openai backend.
	remote *remote
	// vkv relays a vLLM engine's KV events (vllmkv.go); guarded by mu.
	vkv *vllmRelay
	// tombstones are cancels that arrived before their dispatch.
	tombstones map[string]tombstone
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
	// resumed is what earlier attempts streamed, when this one continues it.
	resumed streamed
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
	if !subjects.ValidToken(cfg.ID) || !subjects.ValidToken(cfg.Pool) {
		return nil, fmt.Errorf("worker id %q and pool %q must be subject tokens", cfg.ID, cfg.Pool)
	}
	rep, err := perf.NewReplica(cfg.Catalog, cfg.GPU, cfg.Model, cfg.Dtype, cfg.TP)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	eng, err := engine.New(engine.Config{Replica: rep, MaxBatch: cfg.MaxBatch, InitialWeights: cfg.InitialWeights})
	if err != nil {
		return nil, fmt.Errorf("worker %s engine: %w", cfg.ID, err)
	}
	w := &Worker{sh: sh, cfg: cfg, replica: rep, eng: eng, inflight: map[string]*job{}, wake: make(chan struct{}, 1),
		instant: make(chan struct{}, instantConcurrency)}
	w.clock = simClock{real0: sh.Now(), sim0: sh.Now(), speed: cfg.SpeedUp}
	simulated := 1.0
	switch cfg.Backend {
	case "", "sim":
	case "openai":
		if cfg.OpenAIURL == "" {
			return nil, fmt.Errorf("worker %s: the openai backend needs its server's URL", cfg.ID)
		}
		if cfg.MaxConcurrent == 0 {
			w.cfg.MaxConcurrent = 64
		}
		w.remote = newRemote(w.cfg)
		simulated = 0
	default:
		return nil, fmt.Errorf("worker %s: unknown backend %q (sim or openai)", cfg.ID, cfg.Backend)
	}
	sh.Metrics.NewGauge(fmt.Sprintf(`switchyard_worker_simulated{worker=%q,gpu=%q}`, cfg.ID, rep.GPU.Name), func() float64 { return simulated })
	return w, nil
}

// simClock maps real time onto simulated GPU time at a fixed speed-up.
type simClock struct {
	real0, sim0 time.Time
	speed       float64
}

func (c simClock) now(real time.Time) time.Time {
	return c.sim0.Add(time.Duration(float64(real.Sub(c.real0)) * c.speed))
}

// realUntil is the real time at which the simulated clock reads sim.
func (c simClock) realUntil(sim time.Time) time.Time {
	return c.real0.Add(time.Duration(float64(sim.Sub(c.sim0)) / c.speed))
}

// Run serves until ctx ends, then drains: it stops taking dispatches and
// finishes what it holds before returning.
func (w *Worker) Run(ctx context.Context) error {
	// Events held for a batch go out before the connection closes.
	defer w.sh.FlushEvents()
	if w.remote != nil {
		w.sh.Log.Info("worker starting", "gpu", w.replica.GPU.Name, "model", w.cfg.Model, "simulated", false,
			"backend", "openai", "server", w.cfg.OpenAIURL, "nvml", w.remote.haveGPU, "gpu_name", w.remote.gpu.Name)
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
		AckWait:       30 * time.Second,
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
	stopControl, err := w.subscribeControl()
	if err != nil {
		return err
	}
	defer stopControl()
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
	// Drain: finish what is held (bounded), so a scale-down loses nothing.
	drainUntil := time.Now().Add(30 * time.Second)
	for time.Now().Before(drainUntil) {
		w.mu.Lock()
		n := len(w.inflight)
		w.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopLoop()
	<-loopDone
	<-hbDone
	w.sh.Log.Info("worker stopped", "completed", w.done)
	return nil
}

func (w *Worker) onDispatch(ctx context.Context, m jetstream.Msg) {
	var d schemas.Dispatch
	if err := svc.Decode(m.Headers(), m.Data(), &d); err != nil {
		// The router only publishes what it encoded; keep the evidence.
		w.sh.DeadLetter(ctx, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, "undecodable dispatch: "+err.Error())
		m.Term()
		return
	}
	id := d.Admitted.Request.ID
	// A redelivery (this worker restarted) or a retry may already have its
	// final result elsewhere: never compute an answer nobody can use.
	if md, err := m.Metadata(); err == nil && (md.NumDelivered > 1 || d.Admitted.Attempt > 0) && w.sh.Ledger != nil {
		if done, err := w.sh.Ledger.Done(ctx, d.Admitted.Tenant, id); err == nil && done {
			w.sh.Emit(schemas.Event{Kind: "skipped_finished", RequestID: id, Tenant: d.Admitted.Tenant, WorkerID: w.cfg.ID,
				Reason: "already has a final result (re-placed while this worker was away)"})
			m.Ack()
			return
		}
	}
	if e := engine.RefuseLate(&d.Admitted, w.sh.Now(), w.cfg.ID); e != nil {
		w.finish(ctx, d, m, svc.ErrorResult(id, d.Admitted.Tenant, d.Admitted.Priority, e, w.sh.Now()))
		return
	}
	if res, failed := w.injectedError(d); failed {
		w.finish(ctx, d, m, res)
		return
	}
	w.mu.Lock()
	reason, cancelled := w.exhume(d.Admitted.Tenant, id, w.sh.Now())
	w.mu.Unlock()
	if cancelled {
		e := schemas.Errf(schemas.CodeCancelled, "", "cancelled before it started: %s", reason)
		res := svc.ErrorResult(id, d.Admitted.Tenant, d.Admitted.Priority, e, w.sh.Now())
		res.WorkerID, res.Simulated = w.cfg.ID, w.remote == nil
		w.sh.Emit(schemas.Event{Kind: "cancelled", RequestID: id, Tenant: d.Admitted.Tenant, WorkerID: w.cfg.ID, Reason: reason,
			Fields: map[string]any{"gpu_seconds_spent": 0.0, "before_start": true}})
		w.finish(ctx, d, m, res)
		return
	}
	if w.cfg.Instant {
		w.instant <- struct{}{}
		w.instantWG.Add(1)
		go func() {
			defer func() { <-w.instant; w.instantWG.Done() }()
			w.finish(ctx, d, m, w.instantResult(d))
		}()
		return
	}
	if w.remote != nil {
		w.runRemote(ctx, d, m)
		return
	}
	if e := w.eng.RefuseModel(d.Admitted.Model, w.cfg.ID); e != nil {
		w.finish(ctx, d, m, svc.ErrorResult(id, d.Admitted.Tenant, d.Admitted.Priority, e, w.sh.Now()))
		return
	}
	w.mu.Lock()
	_, dup := w.inflight[id]
	w.mu.Unlock()
	if dup {
		m.Ack() // a redelivery of something already running here
		return
	}
	// A stream its lost worker had begun continues from what the client
	// already received (docs/architecture.md, "Mid-stream failover").
	resumed, ok := w.resumePoint(ctx, d, m)
	if !ok {
		return
	}
	if resumed.seq > 0 && (resumed.done || resumed.tokens >= d.Admitted.Request.MaxTokens) {
		w.answerFromRecord(ctx, d, m, resumed, true)
		return
	}
	seq := engine.Sequence{
		ID:           id,
		PromptTokens: d.Admitted.PromptTokens,
		BlockHashes:  d.Admitted.BlockHashes,
		MaxTokens:    d.Admitted.Request.MaxTokens,
		Priority:     engine.PriorityOf(d.Admitted.Priority),
		Critical:     d.Admitted.Priority == schemas.PriorityCritical,
	}
	var err error
	if resumed.tokens > 0 {
		seq, err = engine.Resume(seq, resumed.tokens)
	}
	j := &job{d: d, msg: m, words: newSimWords(id), resumed: resumed}
	j.words.skip(resumed.tokens)
	if d.Admitted.Request.Stream {
		j.tokens = newTokenStream(&d.Admitted)
		j.tokens.continueFrom(resumed)
	}
	w.mu.Lock()
	if err == nil {
		if _, dup = w.inflight[id]; dup {
			w.mu.Unlock()
			m.Ack()
			return
		}
		seq.Arrival = w.clock.now(w.sh.Now())
		err = w.eng.Add(seq)
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

// loop drives the engine: plan a step at the current simulated time, wait
// for it to elapse, then publish what it produced.
//
// While the engine has work its steps follow each other back to back in
// simulated time, as a GPU's do: a step starts where the last one ended,
// not when this goroutine woke up, and the wait is until the step's end on
// the real clock rather than for its length. Otherwise every timer's
// lateness and every publish is added to the next step, and on a loaded
// machine the simulated GPU ran at a third of its modelled speed (a
// 2,000-token decode at 6.4 ms a token took 17 ms a token), so the live
// system and the simulator disagreed for no reason but the emulation.
func (w *Worker) loop(ctx context.Context) {
	var lastEnd time.Time // simulated end of the previous step
	for {
		w.mu.Lock()
		has := w.eng.HasWork()
		w.mu.Unlock()
		if !has {
			lastEnd = time.Time{}
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			case <-time.After(50 * time.Millisecond):
				continue
			}
		}
		w.mu.Lock()
		start := w.clock.now(w.sh.Now())
		if !lastEnd.IsZero() && start.After(lastEnd) && start.Sub(lastEnd) < backToBack {
			start = lastEnd
		}
		st := w.eng.Step(start)
		w.mu.Unlock()
		end := start.Add(time.Duration(float64(st.Duration) * w.cfg.Fault.stretch()))
		lastEnd = end
		if wait := w.clock.realUntil(end).Sub(w.sh.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		w.afterStep(ctx, st)
	}
}

// backToBack is how far behind the real clock a step may start and still
// count as following the previous one: a timer's lateness and the publish
// of a step's tokens, not an idle spell.
const backToBack = 50 * time.Millisecond

func (w *Worker) afterStep(ctx context.Context, st engine.Step) {
	w.mu.Lock()
	if len(st.Stored) > 0 || len(st.Evicted) > 0 {
		w.publishKV(st.Stored, st.Evicted)
	}
	now := w.sh.Now()
	emitted := make(map[string]bool, len(st.Emitted))
	for _, e := range st.Emitted {
		if j := w.inflight[e.ID]; j != nil && j.tokens != nil {
			emitted[e.ID] = true
			if j.tokens.add(j.words.next(e.Tokens), e.Tokens, now) {
				w.flush(j.tokens, false)
			}
		}
	}
	// A stream that produced nothing this step (a preempted sequence)
	// still sends what it holds once it has waited long enough.
	for id, j := range w.inflight {
		if j.tokens != nil && !emitted[id] && j.tokens.due(now) {
			w.flush(j.tokens, false)
		}
	}
	type fin struct {
		j *job
		f engine.Finished
	}
	var fins []fin
	for _, f := range st.Finished {
		if j := w.inflight[f.ID]; j != nil {
			delete(w.inflight, f.ID)
			fins = append(fins, fin{j, f})
		}
	}
	w.mu.Unlock()
	for _, x := range fins {
		w.complete(ctx, x.j, x.f)
	}
}

func (w *Worker) complete(ctx context.Context, j *job, f engine.Finished) {
	a := j.d.Admitted
	// A resumed sequence prefilled the tokens streamed before as prompt;
	// they are output the client received, and counted as such.
	k := j.resumed.tokens
	ttft := f.FirstTokenAt.Sub(f.Arrival)
	total := f.FinishedAt.Sub(f.Arrival)
	itl := 0.0
	if f.OutputTokens > 1 {
		itl = float64(f.FinishedAt.Sub(f.FirstTokenAt).Milliseconds()) / float64(f.OutputTokens-1)
	}
	queue := j.d.PlacedAt.Sub(a.SubmittedAt)
	firstToken := queue + ttft
	if k > 0 && !j.resumed.firstAt.IsZero() {
		firstToken = j.resumed.firstAt.Sub(a.SubmittedAt) // what the client saw
	}
	finished := w.sh.Now()
	// A streamed answer is exactly what its chunks carried.
	var text string
	if j.tokens != nil {
		text = j.tokens.Text()
	} else {
		text = SimulatedText(a.Request.ID, a.Model, f.OutputTokens)
	}
	res := schemas.Result{
		ID:           a.Request.ID,
		Tenant:       a.Tenant,
		Status:       schemas.StatusOK,
		Model:        a.Model,
		Text:         text,
		FinishReason: "length",
		Usage:        schemas.Usage{PromptTokens: f.PromptTokens - k, CompletionTokens: f.OutputTokens + k, CachedTokens: f.CachedTokens},
		Timing: schemas.Timing{
			QueueMs: float64(queue.Microseconds()) / 1000,
			TTFTMs:  float64(firstToken.Microseconds()) / 1000,
			ITLMs:   itl,
			TotalMs: float64((queue + total).Microseconds()) / 1000,
		},
		WorkerID:   w.cfg.ID,
		GPU:        w.replica.GPU.Name,
		Simulated:  true,
		Priority:   a.Priority,
		Attempt:    a.Attempt,
		GPUSeconds: f.GPUSeconds,
		CostUSD:    w.eng.CostUSD(f.GPUSeconds),
		FinishedAt: finished,
	}
	if k > 0 {
		reprefill := f.PromptTokens - f.CachedTokens
		res.Reliability = &schemas.Reliability{
			ResumedFromSeq: j.resumed.seq, ResumedTokens: k, ReprefillTokens: reprefill,
			ReprefillGPUSeconds: w.replica.PrefillSeconds(reprefill, f.CachedTokens) * float64(w.replica.TP),
			LostWorkers:         a.ExcludeWorkers,
		}
	}
	dl := a.Deadline
	res.Deadline = &dl
	res.SLOMet = slo.Met(slo.Observed{OK: true, TTFT: firstToken, ITL: time.Duration(itl * float64(time.Millisecond)), Finished: finished}, slo.TargetOf(&a))
	if j.tokens != nil {
		w.flush(j.tokens, true)
	}
	w.finish(ctx, j.d, j.msg, res)
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

func (w *Worker) onCancel(msg *nats.Msg) {
	var c schemas.Cancel
	if err := svc.Decode(msg.Header, msg.Data, &c); err != nil {
		return
	}
	if w.remote != nil {
		if !w.cancelRemote(c.RequestID) {
			w.mu.Lock()
			w.bury(c.Tenant, c.RequestID, c.Reason, w.sh.Now())
			w.mu.Unlock()
		}
		return
	}
	w.mu.Lock()
	j := w.inflight[c.RequestID]
	if j == nil || j.d.Admitted.Tenant != c.Tenant {
		w.bury(c.Tenant, c.RequestID, c.Reason, w.sh.Now())
		w.mu.Unlock()
		return
	}
	generated, cached, spent, _ := w.eng.Progress(c.RequestID)
	generated += j.resumed.tokens
	w.eng.Cancel(c.RequestID)
	delete(w.inflight, c.RequestID)
	w.mu.Unlock()
	w.sh.Emit(schemas.Event{Kind: "cancelled", RequestID: c.RequestID, Tenant: c.Tenant, WorkerID: w.cfg.ID, Reason: c.Reason,
		Fields: map[string]any{"gpu_seconds_spent": spent}})
	e := schemas.Errf(schemas.CodeCancelled, "", "cancelled: %s", c.Reason)
	res := svc.ErrorResult(c.RequestID, c.Tenant, j.d.Admitted.Priority, e, w.sh.Now())
	res.WorkerID, res.Simulated, res.GPUSeconds = w.cfg.ID, true, spent
	res.CostUSD = w.eng.CostUSD(spent)
	// What was streamed before the cancel was computed and is billed: the
	// usage says so, as OpenAI's does for an aborted stream.
	res.Usage = schemas.Usage{PromptTokens: j.d.Admitted.PromptTokens, CompletionTokens: generated, CachedTokens: cached}
	if j.tokens != nil {
		w.flush(j.tokens, true)
	}
	w.finish(context.Background(), j.d, j.msg, res)
}

func (w *Worker) publishKV(stored, evicted []uint64) {
	now := w.sh.Now()
	for _, ev := range []struct {
		kind string
		h    []uint64
	}{{schemas.KVStored, stored}, {schemas.KVEvicted, evicted}} {
		if len(ev.h) == 0 {
			continue
		}
		w.kvSeq++
		e := schemas.KVEvent{V: schemas.Version, WorkerID: w.cfg.ID, Seq: w.kvSeq, Kind: ev.kind, Hashes: append([]uint64(nil), ev.h...), At: now}
		if m, err := svc.Encode(subjects.KV(w.cfg.ID), schemas.Msgpack, e, ""); err == nil {
			w.sh.NC.PublishMsg(m)
		}
	}
}

func (w *Worker) onSnapshot(msg *nats.Msg) {
	w.mu.Lock()
	e := schemas.KVEvent{V: schemas.Version, WorkerID: w.cfg.ID, Seq: w.kvSeq, Kind: schemas.KVSnapshot, Hashes: w.cachedHashes(), At: w.sh.Now()}
	w.mu.Unlock()
	if m, err := svc.Encode(msg.Reply, schemas.Msgpack, e, ""); err == nil {
		w.sh.NC.PublishMsg(m)
	}
}

func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.remote != nil {
				w.scrape(ctx)
				if w.engineDown() {
					// Silent, not draining: the router must count what was
					// dispatched here as lost and re-place it.
					continue
				}
			}
			w.heartbeat()
		}
	}
}

// engineDown reports whether the engine a remote worker fronts has stopped
// answering.
func (w *Worker) engineDown() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.remote != nil && w.remote.engine.down
}

// Heartbeat is the worker's current telemetry.
func (w *Worker) Heartbeat() schemas.Heartbeat {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hbSeq++
	if w.remote != nil {
		hb := w.remoteHeartbeat()
		hb.KVSeq = w.kvSeq // relayed engine KV events (vllmkv.go) are sequenced here
		return hb
	}
	hb := schemas.Heartbeat{
		V: schemas.Version, WorkerID: w.cfg.ID, Pool: w.cfg.Pool, Backend: "sim", Draining: w.draining,
		KVSeq: w.kvSeq, Seq: w.hbSeq, SentAt: w.sh.Now(), CompletedTotal: w.done, ErrorsTotal: w.errs,
	}
	w.eng.FillHeartbeat(&hb)
	return hb
}

func (w *Worker) heartbeat() {
	hb := w.Heartbeat()
	if m, err := svc.Encode(subjects.Heartbeat(w.cfg.Pool, w.cfg.ID), schemas.Msgpack, hb, ""); err == nil {
		w.sh.NC.PublishMsg(m)
	}
}

var vocab = strings.Fields("the a model token answer result cache prefix batch worker router queue deadline tenant gpu memory value step plan tool")

// SimulatedText is a deterministic stand-in answer of n words. It is
// labelled as simulated in every result (Simulated: true). A streamed
// answer's chunks concatenate to the same text (simWords).
func SimulatedText(seed, model string, n int) string {
	g := newSimWords(seed)
	return g.next(n)
}

func fnvSeed(seed string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(seed))
	return h.Sum64()
}

// instantResult answers a dispatch with zero GPU time.
func (w *Worker) instantResult(d schemas.Dispatch) schemas.Result {
	a := d.Admitted
	now := w.sh.Now()
	total := float64(now.Sub(a.SubmittedAt).Microseconds()) / 1000
	return schemas.Result{
		ID: a.Request.ID, Tenant: a.Tenant, Status: schemas.StatusOK, Model: a.Model,
		FinishReason: "length", Usage: schemas.Usage{PromptTokens: a.PromptTokens},
		Timing:   schemas.Timing{QueueMs: float64(d.PlacedAt.Sub(a.SubmittedAt).Microseconds()) / 1000, TTFTMs: total, TotalMs: total},
		WorkerID: w.cfg.ID, GPU: w.replica.GPU.Name, Simulated: true, Priority: a.Priority,
		SLOMet: !now.After(a.Deadline), FinishedAt: now,
	}
}
