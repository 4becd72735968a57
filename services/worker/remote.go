package worker

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/enginemetrics"
	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/internal/adapter/nvml"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// remote is the `openai` backend: the worker fronts a real
// OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp), forwards each
// dispatch as a streamed request, and reports the server's own metrics
// (KV capacity and usage, running and waiting requests, tokens per second,
// read by enginemetrics) and, with a driver, NVML's view
// of the GPU. Nothing about it is simulated, and its heartbeats say so.
type remote struct {
	client  *openai.Client
	sem     chan struct{}
	gpu     nvml.Info
	haveGPU bool

	// guarded by Worker.mu
	// metrics is the engine's /metrics as the last scrape left it, with
	// rates over the interval since the one before (tracker).
	metrics enginemetrics.Telemetry
	tracker enginemetrics.Tracker
	scraped bool
	cancels map[string]context.CancelCauseFunc
	// msgs are the dispatches held, from the wait for a slot to the final
	// ack: kept alive (keepalive.go), counted by a drain, handed back when
	// the drain times out.
	msgs map[string]jetstream.Msg
	// unprefilled holds the prompt tokens of this worker's requests that
	// have had no byte from the engine yet (waiting for a slot here or in
	// the engine's queue, or prefilling): the heartbeat's queued tokens.
	unprefilled map[string]int
	// promptMean is the running mean prompt length of what this worker
	// forwards, standing in for the requests other clients queued at the
	// engine (promptSeen counts them).
	promptMean float64
	promptSeen int
	// busy splits the engine's time among this worker's generations
	// (busyMeter): their GPU-seconds.
	busy    busyMeter
	running int
	// notApplied marks the controller settings already logged as not
	// applied (control.go). Guarded by Worker.mu.
	notApplied map[string]bool
	// progress is when the engine last sent anything for a request (unix
	// nanoseconds), and stalled is set while the watchdog (stall.go) holds
	// the engine out of rotation.
	progress atomic.Int64
	stalled  bool
	// auditing is set while a check after an abort runs (stall.go).
	auditing atomic.Bool
	// engine is what the server's native API says (engine.go): whether it
	// is Ollama, which models it holds and has loaded, and the load times
	// measured on real loads.
	engine engineState
}

func newRemote(cfg Config) *remote {
	model := cfg.OpenAIModel
	if model == "" {
		model = cfg.Model
	}
	r := &remote{client: openai.New(cfg.OpenAIURL, model), sem: make(chan struct{}, max(1, cfg.MaxConcurrent)), cancels: map[string]context.CancelCauseFunc{},
		msgs: map[string]jetstream.Msg{}, unprefilled: map[string]int{}, notApplied: map[string]bool{}, engine: newEngineState()}
	if info, err := nvml.Probe(); err == nil {
		r.gpu, r.haveGPU = info, true
	}
	return r
}

// runRemote forwards one dispatch. The semaphore bounds concurrency: a
// full worker stops pulling dispatches, which is the backpressure the
// router sees in its heartbeats.
func (w *Worker) runRemote(ctx context.Context, d schemas.Dispatch, m jetstream.Msg) {
	r := w.remote
	a := d.Admitted
	// The generation outlives the worker's own shutdown (it drains), but
	// not the request's deadline or a cancel. The cancel is registered
	// before the wait for a slot, so that a cancel arriving while the
	// request waits behind a full engine stops it too.
	// Its cause tells a client's cancel from the stall watchdog's.
	rctx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	cancel := func() { stop(nil) }
	if !a.Deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		rctx, cancelDeadline = context.WithDeadline(rctx, a.Deadline)
		cancel = func() { cancelDeadline(); stop(nil) }
	}
	w.mu.Lock()
	_, running := r.cancels[a.Request.ID]
	// A prefill leg whose KV waits for its pull holds its dispatch in
	// w.held, not in cancels (legs_remote.go): a redelivery of it is left
	// alone as a running one is.
	running = running || w.heldPrefill(d)
	if !running {
		r.cancels[a.Request.ID] = stop
		r.msgs[a.Request.ID] = m
		r.unprefilled[a.Request.ID] = a.PromptTokens
		r.promptSeen++
		r.promptMean += (float64(a.PromptTokens) - r.promptMean) / float64(min(r.promptSeen, promptMeanWindow))
	}
	w.mu.Unlock()
	if running {
		// A redelivery of a generation still running here (its keep-alive
		// lapsed): a second copy would race it, and acking this delivery
		// acked the stream message while the work ran — a crash then lost
		// it. The running copy's in-progress and final acks count for the
		// message whichever delivery they name.
		cancel()
		return
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		cancel()
		w.mu.Lock()
		delete(r.cancels, a.Request.ID)
		delete(r.msgs, a.Request.ID)
		delete(r.unprefilled, a.Request.ID)
		w.mu.Unlock()
		return // unacked: redelivered
	}
	w.mu.Lock()
	if r.running == 0 {
		// The engine had nothing of ours: its silence counts from now.
		r.noteProgress(w.sh.Now())
	}
	r.running++
	stalled := r.stalled
	w.mu.Unlock()
	go func() {
		aborted := false // at the engine, by a cancel or the deadline
		defer func() {
			cancel()
			w.mu.Lock()
			delete(r.cancels, a.Request.ID)
			delete(r.msgs, a.Request.ID)
			delete(r.unprefilled, a.Request.ID)
			r.running--
			w.mu.Unlock()
			<-r.sem
			if aborted {
				w.auditAfterAbort(ctx)
			}
		}()
		if stalled {
			w.handBack(d, m, "the engine is stalled: not sent to it", nil)
			return
		}
		aborted = w.generateRemote(ctx, rctx, d, m)
	}()
}

// generateRemote runs one dispatch at the engine and answers it (a result,
// a KV handle, or the dispatch handed back), reporting whether the engine's
// generation was aborted (a cancel or the deadline) so the caller can audit
// the engine after it. A prefill leg goes to remotePrefill; a decode leg is
// the aggregated request with its KV handle's engine parameters
// (remoteDecodeLeg, legs_remote.go).
func (w *Worker) generateRemote(ctx, rctx context.Context, d schemas.Dispatch, m jetstream.Msg) (aborted bool) {
	r := w.remote
	a := d.Admitted
	var leg *decodeLeg
	switch d.Phase {
	case schemas.PhasePrefill:
		return w.remotePrefill(ctx, rctx, d, m)
	case schemas.PhaseDecode:
		var ok bool
		if leg, ok = w.remoteDecodeLeg(ctx, d, m); !ok {
			return false
		}
	}
	req, resumed, ok := w.remoteQuestion(ctx, d, m)
	if !ok {
		return false
	}
	if leg != nil {
		req.KVTransferParams, req.RequestID = leg.params, leg.requestID
	}
	var ts *tokenStream
	if a.Request.Stream {
		ts = newTokenStream(&a)
		ts.continueFrom(resumed)
	}
	w.ensureLoaded(rctx, req.Model)
	r.noteProgress(w.sh.Now()) // a load is not the engine's silence
	first := true
	var firstAt time.Time
	w.mu.Lock()
	sentAt := w.sh.Now()
	r.busy.start(a.Request.ID, sentAt)
	w.mu.Unlock()
	res, err := r.client.Generate(rctx, req, func(text string) {
		r.noteProgress(w.sh.Now())
		if first {
			first = false
			firstAt = w.sh.Now()
			w.mu.Lock()
			delete(r.unprefilled, a.Request.ID) // prefilled: decoding now
			w.mu.Unlock()
		}
		// Each piece is one token for vLLM and Ollama, which stream
		// token by token; chunks group them as the simulated path does.
		if ts != nil && ts.add(text, 1, w.sh.Now()) {
			w.flush(ts, false)
		}
	})
	now := w.sh.Now()
	w.mu.Lock()
	busySeconds := r.busy.end(a.Request.ID, now)
	w.mu.Unlock()
	r.noteProgress(now)
	if err != nil {
		return w.remoteFailed(ctx, rctx, d, m, err, ts)
	}
	if ts != nil {
		w.flush(ts, true)
	}
	out := w.remoteResult(a, res, resumed, sentAt, firstAt, now, busySeconds)
	if leg != nil {
		leg.addPrefill(&out, w.eng.CostUSD)
	}
	w.finish(ctx, d, m, out)
	return false
}

// remoteRequest is the engine request a dispatch sends: the client's
// request as admitted, continued after what an earlier attempt streamed
// (resumeRemote). Both legs of a split request build it here, so the
// decode instance is asked the question whose KV the prefill instance
// computed.
// remoteQuestion is what a dispatch asks a real engine, after what an
// earlier attempt streamed (both legs of a split request ask the same):
// ok is false when nothing is left to ask — the record already answered
// the request, or the request cannot be built (its error result sent).
func (w *Worker) remoteQuestion(ctx context.Context, d schemas.Dispatch, m jetstream.Msg) (req openai.Request, resumed streamed, ok bool) {
	a := d.Admitted
	if resumed, ok = w.resumePoint(ctx, d, m); !ok {
		return req, resumed, false
	}
	if resumed.seq > 0 && (resumed.done || (a.Request.MaxTokens > 0 && resumed.tokens >= a.Request.MaxTokens)) {
		w.answerFromRecord(ctx, d, m, resumed, false)
		return req, resumed, false
	}
	req, e := w.remoteRequest(a, resumed)
	if e != nil {
		w.finish(ctx, d, m, svc.ErrorResult(a.Request.ID, a.Tenant, a.Priority, e, w.sh.Now()))
		return req, resumed, false
	}
	return req, resumed, true
}

func (w *Worker) remoteRequest(a schemas.Admitted, resumed streamed) (openai.Request, *schemas.Error) {
	req := openai.Request{Model: w.engineModel(a.Model), Messages: a.Request.Messages, Prompt: a.Request.Prompt,
		MaxTokens: a.Request.MaxTokens, Temperature: a.Request.Temperature, Seed: a.Request.Seed,
		TopP: a.Request.TopP, Stop: a.Request.Stop, ResponseFormat: a.Request.ResponseFormat, Tools: a.Request.Tools}
	if resumed.seq > 0 {
		if e := resumeRemote(&req, resumed); e != nil {
			return req, e
		}
	}
	return req, nil
}

// remoteFailed answers a dispatch whose engine request failed: handed back
// when the engine stalled or the worker stopped under it, left unacked when
// the engine died, else an error result. It reports whether the engine's
// generation was aborted by a cancel or the deadline.
func (w *Worker) remoteFailed(ctx, rctx context.Context, d schemas.Dispatch, m jetstream.Msg, err error, ts *tokenStream) (aborted bool) {
	r := w.remote
	a := d.Admitted
	if stalledCause(rctx) {
		w.handBack(d, m, "the engine stalled under it", ts)
		return false
	}
	if drainedCause(rctx) {
		w.handBackDrained(d, m, ts)
		return false
	}
	if rctx.Err() == nil && (unreachable(err) || errors.Is(err, io.ErrUnexpectedEOF)) {
		// The engine died under the request. Its answer is lost with
		// the engine's KV cache, and this worker is no better placed
		// than any other to redo it: the worker goes silent while its
		// engine is down (see heartbeats), the router's breaker treats
		// it as lost and re-places its work under the retry budget,
		// and this dispatch is neither answered nor acked, so a router
		// that takes over still finds it in flight. Redelivered later,
		// the ledger check at the top of onDispatch skips it once the
		// re-placed attempt has answered.
		w.mu.Lock()
		w.noteReachability(err)
		w.remote.engine.down = true
		w.mu.Unlock()
		w.sh.Emit(schemas.Event{Kind: "engine_lost", RequestID: a.Request.ID, Tenant: a.Tenant, WorkerID: w.cfg.ID,
			Reason: "engine " + r.client.BaseURL + " stopped answering mid-request: " + err.Error(),
			Fields: map[string]any{"chunks_streamed": chunksOf(ts), "attempt": a.Attempt, "phase": d.Phase}})
		m.NakWithDelay(engineLostRedelivery)
		return false
	}
	if ts != nil {
		w.flush(ts, true)
	}
	code, msg := schemas.CodeBackendError, "backend "+r.client.BaseURL+": "+err.Error()
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		code, msg = schemas.CodeDeadlineExceeded, "deadline passed while the backend was generating"
	case errors.Is(rctx.Err(), context.Canceled):
		code, msg = schemas.CodeCancelled, "cancelled while the backend was generating"
	}
	out := svc.ErrorResult(a.Request.ID, a.Tenant, a.Priority, &schemas.Error{Code: code, Message: msg}, w.sh.Now())
	out.WorkerID, out.GPU = w.cfg.ID, w.replica.GPU.Name
	w.finish(ctx, d, m, out)
	return rctx.Err() != nil
}

// remoteResult is the final result of a generation at the engine: res as
// the client measured it, sent at sentAt, its first byte at firstAt (zero:
// nothing streamed), ended now, after busySeconds of the engine's time.
func (w *Worker) remoteResult(a schemas.Admitted, res openai.Result, resumed streamed, sentAt, firstAt, now time.Time, busySeconds float64) schemas.Result {
	queue := sentAt.Sub(a.SubmittedAt) // placement, transit, a slot here, a load
	itl := 0.0
	if res.CompletionTokens > 1 {
		itl = float64((res.Total - res.TTFT).Microseconds()) / 1000 / float64(res.CompletionTokens-1)
	}
	// GPU time is this request's share of the engine's busy time, not
	// its wall time: n generations at once share the GPU, and wall
	// time × TP each counted the GPU n times (busyMeter).
	gpuSec := busySeconds * float64(max(1, w.cfg.TP))
	usage := schemas.Usage{PromptTokens: res.PromptTokens, CompletionTokens: res.CompletionTokens, CachedTokens: res.CachedTokens}
	// Time to first token is from submission to the first token's
	// chunk: the queue before placement, the dispatch's transit, the
	// wait for a slot here, a weight load and the engine's own time to
	// first token — the engine's figure alone left out all but the last.
	if firstAt.IsZero() {
		firstAt = now // nothing streamed: the answer's first token came with its end
	}
	text, ttft := res.Text, firstAt.Sub(a.SubmittedAt)
	var rel *schemas.Reliability
	if k := resumed.tokens; resumed.seq > 0 {
		// The engine was sent the streamed text as prompt: it counted
		// it as prompt tokens, and prefilled it in its time to first
		// token, which is the re-prefill's measured price.
		text = resumed.text + res.Text
		usage.PromptTokens = max(0, res.PromptTokens-k)
		usage.CompletionTokens = res.CompletionTokens + k
		ttft = resumed.firstAt.Sub(a.SubmittedAt)
		rel = &schemas.Reliability{ResumedFromSeq: resumed.seq, ResumedTokens: k, ReprefillTokens: res.PromptTokens - res.CachedTokens,
			ReprefillGPUSeconds: res.TTFT.Seconds() * float64(max(1, w.cfg.TP)), LostWorkers: a.ExcludeWorkers}
	}
	out := schemas.Result{
		ID: a.Request.ID, Tenant: a.Tenant, Status: schemas.StatusOK, Model: a.Model, Text: text,
		FinishReason: res.FinishReason, Reliability: rel,
		Usage:    usage,
		Timing:   schemas.Timing{QueueMs: ms(queue), TTFTMs: ms(ttft), ITLMs: itl, TotalMs: ms(now.Sub(a.SubmittedAt))},
		WorkerID: w.cfg.ID, GPU: w.replica.GPU.Name, Simulated: false, Priority: a.Priority, Attempt: a.Attempt,
		GPUSeconds: gpuSec, CostUSD: busySeconds / 3600 * w.replica.PricePerHour(), FinishedAt: now,
	}
	dl := a.Deadline
	out.Deadline = &dl
	out.SLOMet = sloMet(&a, ttft, itl, now)
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// resumeRemote rewrites a forwarded request to continue after what an
// earlier attempt streamed. A completion (raw prompt) continues exactly:
// the engine is sent prompt+streamed text and asked for the tokens left,
// which is what it would have been generating next (up to how it
// re-tokenises the seam; Ollama applies the model's template to the
// prompt, which for a template other than the bare prompt conditions the
// continuation on the wrapped text). A chat answer cannot be continued
// through the OpenAI API in general — a partial assistant message is read
// as a finished turn, and the answer would restart or change — so a chat
// request lost mid-stream fails with the reason instead of a stream that
// pretends to continue.
func resumeRemote(req *openai.Request, r streamed) *schemas.Error {
	if len(req.Messages) > 0 {
		return schemas.Errf(schemas.CodeWorkerFailed, "",
			"its worker was lost after streaming %d chunks of a chat answer, and an OpenAI-compatible backend cannot continue a partial chat answer without repeating or changing it", r.seq)
	}
	req.Prompt += r.text
	if req.MaxTokens > 0 { // zero leaves the length to the engine
		req.MaxTokens -= r.tokens
	}
	return nil
}

// chunksOf is how many chunks a stream has sent, 0 without a stream.
func chunksOf(s *tokenStream) uint64 {
	if s == nil {
		return 0
	}
	return s.seq
}

// engineLostRedelivery is how long a dispatch whose engine died waits
// before JetStream offers it to this worker again: long past the router's
// staleness bound (3 s) and a retry's usual run, so by then the re-placed
// attempt has normally answered and the ledger check skips it.
const engineLostRedelivery = 30 * time.Second

// cancelRemote aborts a forwarded request; its goroutine publishes the
// cancelled result.
func (w *Worker) cancelRemote(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.remote.cancels[id]; ok {
		c(nil)
		return true
	}
	return false
}

// scrape refreshes the server's metrics, or for Ollama (which has none)
// its loaded and available models; called before each heartbeat, outside
// the worker lock.
func (w *Worker) scrape(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if w.scrapeEngine(sctx) {
		return
	}
	snap, err := w.remote.client.ScrapeMetrics(sctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil || unreachable(err) { // a server without /metrics is still up
		w.noteReachability(err)
	}
	if err != nil {
		w.sh.Log.Debug("scrape backend metrics", "err", err)
		return
	}
	now := w.sh.Now()
	snap.At = now // rates on the worker's clock, as busy's
	m := w.remote.tracker.Observe(snap)
	w.remote.metrics, w.remote.scraped = m, true
	w.remote.busy.advance(now) // the old batch up to now, the new one after
	w.remote.busy.Batch = max(0, m.Running)
	if w.remote.haveGPU {
		if info, err := nvml.Probe(); err == nil {
			w.remote.gpu = info
		}
	}
}

// promptMeanWindow bounds the running mean of prompt lengths to about the
// last hundred requests, so it follows a workload that changes.
const promptMeanWindow = 100

// remoteQueue is the engine's queue as the heartbeat reports it: requests
// running and waiting, and the prompt tokens not yet prefilled. Where the
// engine reports its queue (vLLM, SGLang /metrics) running and waiting are
// its own counts, and its waiting requests that are not this worker's
// (another client's, or another worker's in front of the same engine)
// count at the mean prompt length this worker has seen; this worker's own
// requests count at their real prompt lengths until the engine sends
// their first byte. Without that, a vLLM with hundreds of requests waiting
// gave the placer a queue_s of 0. The tokens carry no per-class split: the
// engines queue first come, first served, so all of them are ahead of a
// new request whatever its class (fleet reads a missing split that way).
//
// prefilling is this worker's requests at the engine with no byte back
// that the engine's waiting count cannot hold: running, their prompts not
// all computed (the heartbeat's prefilling, which the controller counts as
// backlog beside waiting). No engine reports that split; the worker sees
// its own first bytes, and counts its requests as waiting first, so the
// figure is at least the true one's least. Without engine metrics
// (Ollama) every request sent and not answered yet counts.
// Callers hold w.mu.
func (w *Worker) remoteQueue() (running, waiting, prefilling, queuedTokens int) {
	r := w.remote
	own, ownAtEngine := 0, 0
	for id, n := range r.unprefilled {
		own += n
		if _, sent := r.busy.share[id]; sent {
			ownAtEngine++ // in the engine's waiting count (or prefilling)
		}
	}
	running, waiting, prefilling, queuedTokens = r.running, 0, ownAtEngine, own
	if r.scraped && !r.engine.ollama { // Ollama has no metrics: count what is in flight here
		running, waiting = max(0, r.metrics.Running), max(0, r.metrics.Waiting)
		prefilling = max(0, min(ownAtEngine-waiting, running))
		if foreign := waiting - ownAtEngine; foreign > 0 {
			queuedTokens += int(float64(foreign) * max(r.promptMean, 1))
		}
	}
	return running, waiting, prefilling, queuedTokens
}

// remoteKVBlocks is the KV capacity in 16-token blocks: the engine's own
// where its metrics give it (vLLM's cache_config_info, SGLang's
// max_total_num_tokens), else the catalog's model of this GPU. Callers
// hold w.mu.
func (w *Worker) remoteKVBlocks() int {
	if b := w.remote.metrics.KVBlocksTotal; w.remote.scraped && b > 0 {
		return b // the tracker's, in its default 16-token blocks
	}
	return w.replica.KVBlocks(16, perf.DefaultMemUtil)
}

// remoteHeartbeat is the real backend's telemetry: the engine's queue and
// KV capacity and use where it reports them (remoteQueue, remoteKVBlocks).
// Callers hold w.mu.
func (w *Worker) remoteHeartbeat() schemas.Heartbeat {
	r := w.remote
	g := w.replica.GPU
	total := uint64(g.HBMGiB*float64(1<<30)) * uint64(w.cfg.TP)
	free := total
	name := ""
	if r.haveGPU {
		total, free, name = r.gpu.MemoryTotal, r.gpu.MemoryFree, r.gpu.Name
	}
	blocks := w.remoteKVBlocks()
	running, waiting, prefilling, queued := w.remoteQueue()
	return schemas.Heartbeat{
		V: schemas.Version, WorkerID: w.cfg.ID, Pool: w.cfg.Pool, GPU: g.Name, GPUName: name, Arch: g.Arch,
		Simulated: false, Backend: "openai", TP: w.cfg.TP,
		HBMTotalBytes: total, HBMFreeBytes: free,
		KVBlocksTotal: blocks, KVBlocksFree: int(float64(blocks) * (1 - max(0, r.metrics.KVUsage))), BlockSize: 16,
		Models:  w.remoteModels(),
		Running: running, Waiting: waiting, Prefilling: prefilling, QueuedTokens: queued, MaxBatch: cap(r.sem),
		// A switch of model under way drains too (switch.go).
		Draining: w.draining || r.engine.down || r.stalled || w.shift.order != nil,
		Seq:      w.hbSeq, SentAt: w.sh.Now(), PricePerHour: w.replica.PricePerHour(),
		// The engine's token counters over the last scrape interval.
		TokensPerSec:   max(0, r.metrics.TokensPerSec),
		CompletedTotal: w.done, ErrorsTotal: w.errs,
	}
}
