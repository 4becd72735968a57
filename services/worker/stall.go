package worker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/schemas"
)

// An engine can stop serving while it still answers on its address: its
// health and model endpoints reply, and every generation waits forever.
// Ollama does this after a streamed request is aborted at the wrong
// moment: the handler stops reading its channel while the generation's
// goroutine is about to send on it, the send blocks for good, and the
// engine's request slot with it (ollama/ollama#17131, open against
// v0.6.5 and later; reproduced here by aborting streams in a loop, the
// stuck goroutine in the server's dump at server/routes.go:342). With
// OLLAMA_NUM_PARALLEL=1 that is the whole engine. Users of Ollama know the
// shape from "requests hang until it is restarted" (ollama/ollama#1994,
// #2176, #4545).
//
// Reachability alone cannot see it, so the worker watches progress: when
// generations are in flight at the engine and none has received a byte
// for StallAfter, the engine is stalled. The worker then does what it does
// for an engine that died under its requests: it goes silent, so routers
// count its work lost and re-place it under the retry budget; it aborts
// what waits at the engine and leaves those dispatches unacked (the ledger
// skips them once the re-placed attempts answer); and it probes the engine
// with a one-token request until one is answered, then heartbeats again.
// On Ollama it first unloads the engine's models, which frees a kept slot
// (unloadStalled); the engine is otherwise left alone.

// The events of the watchdog: the engine stalled (the worker goes
// silent; per request, its generation was handed back for re-placement),
// and the engine served a probe again.
const (
	EventEngineStalled   = "engine_stalled"
	EventEngineRecovered = "engine_recovered"
	// EventEngineSlotFreed: after an abort, the idle engine had no slot
	// for a one-token request, and unloading its models freed one.
	EventEngineSlotFreed = "engine_slot_freed"
)

// errEngineStalled is the cause the watchdog cancels a generation with,
// telling it from a client's cancel and from its deadline.
var errEngineStalled = errors.New("engine stalled: no progress on any request in flight")

// DefaultEngineStallAfter is long enough for a long prompt's prefill on a
// slow engine, during which no byte arrives; a load of weights is not
// counted against it.
const DefaultEngineStallAfter = 2 * time.Minute

// noteProgress records that the engine sent something for a request.
func (r *remote) noteProgress(now time.Time) { r.progress.Store(now.UnixNano()) }

// checkStall runs before each heartbeat of a remote worker.
func (w *Worker) checkStall(ctx context.Context) {
	after := w.cfg.EngineStallAfter // New made zero the default; negative is off
	if after <= 0 {
		return
	}
	r := w.remote
	now := w.sh.Now()
	w.mu.Lock()
	quiet := now.Sub(time.Unix(0, r.progress.Load()))
	if r.stalled || r.running == 0 || len(r.engine.loading) > 0 || quiet < after {
		w.mu.Unlock()
		return
	}
	r.stalled = true
	running := r.running
	stop := make([]context.CancelCauseFunc, 0, len(r.cancels))
	for _, c := range r.cancels {
		stop = append(stop, c)
	}
	w.mu.Unlock()
	w.sh.Log.Error("engine stalled: generations in flight and none has progressed; going silent so their work is re-placed, probing until it serves again (Ollama can keep the slot of an aborted stream: ollama/ollama#17131)",
		"server", r.client.BaseURL, "running", running, "quiet", quiet.Round(time.Millisecond))
	w.sh.Emit(schemas.Event{Kind: EventEngineStalled, WorkerID: w.cfg.ID,
		Reason: "engine " + r.client.BaseURL + " answers but has not progressed any of " + strconv.Itoa(running) + " generations for " + quiet.Round(time.Second).String(),
		Fields: map[string]any{"running": running, "quiet_s": quiet.Seconds()}})
	for _, c := range stop {
		c(errEngineStalled)
	}
	go w.probeStalledEngine(ctx)
}

// stalledEngineProbe is how often, and how long, a stalled engine is asked
// for one token.
func (w *Worker) stalledEngineProbe() time.Duration {
	return min(w.cfg.EngineStallAfter, 10*time.Second)
}

// probeStalledEngine asks the engine for one token until it answers, then
// lets the worker heartbeat again.
func (w *Worker) probeStalledEngine(ctx context.Context) {
	every := w.stalledEngineProbe()
	r := w.remote
	for tries := 1; ; tries++ {
		started := w.sh.Now()
		w.unloadStalled(ctx, every)
		err := w.probeEngine(ctx, every)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			now := w.sh.Now()
			w.mu.Lock()
			r.stalled = false
			r.noteProgress(now)
			w.mu.Unlock()
			w.sh.Log.Info("engine serves again: heartbeating", "server", r.client.BaseURL, "probes", tries)
			w.sh.Emit(schemas.Event{Kind: EventEngineRecovered, WorkerID: w.cfg.ID,
				Reason: "engine " + r.client.BaseURL + " answered a probe after " + strconv.Itoa(tries) + " tries",
				Fields: map[string]any{"probes": tries}})
			return
		}
		w.sh.Log.Debug("stalled engine probe", "server", r.client.BaseURL, "try", tries, "err", err)
		if rest := every - w.sh.Now().Sub(started); rest > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(rest):
			}
		}
	}
}

// probeEngine asks the engine for one token of the worker's model within
// timeout: the cheapest request that proves a slot serves.
func (w *Worker) probeEngine(ctx context.Context, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := w.remote.client.Generate(pctx, openai.Request{Model: w.engineModel(""), Prompt: "ping", MaxTokens: 1}, nil)
	return err
}

// unloadStalled asks an Ollama engine to unload the models it holds. A
// slot an aborted stream kept belongs to the loaded model's server, which
// Ollama drops with the model once no request holds it (the kept
// request's own context is done, and the watchdog has cancelled the rest):
// the probe that follows loads the model afresh, with every slot. Measured
// on v0.6.5 with a slot kept so: the unload answered in 5 ms and the next
// request in 0.28 s. On an engine stalled for another reason the unload
// takes effect when its requests end, which costs a reload, nothing more.
func (w *Worker) unloadStalled(ctx context.Context, timeout time.Duration) {
	r := w.remote
	w.mu.Lock()
	ollama, models := r.engine.ollama, slices.Clone(r.engine.loaded)
	w.mu.Unlock()
	if !ollama {
		return
	}
	for _, m := range models {
		uctx, cancel := context.WithTimeout(ctx, timeout)
		err := r.client.Unload(uctx, m)
		cancel()
		w.sh.Log.Info("unloading a model so that Ollama drops any slot an aborted stream kept", "server", r.client.BaseURL, "model", m, "err", err)
	}
}

// slotCheckTimeout bounds the one-token request that checks an idle
// engine after an abort: a loaded model answers one token in well under a
// second even on a CPU.
const slotCheckTimeout = 5 * time.Second

// auditAfterAbort checks, once nothing of the worker's is at the engine,
// that an Ollama engine still has a slot after a generation was aborted
// there, and frees one it kept by unloading its models — at once, rather
// than when the next request has waited out the stall bound. One check
// runs at a time; a check that finds work of ours at the engine again
// proves nothing and stops.
func (w *Worker) auditAfterAbort(ctx context.Context) {
	r := w.remote
	if !r.auditing.CompareAndSwap(false, true) {
		return
	}
	defer r.auditing.Store(false)
	idle := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return r.engine.ollama && r.running == 0 && !r.stalled
	}
	probe := func() error { return w.probeEngine(ctx, slotCheckTimeout) }
	if !idle() || probe() == nil || !idle() || ctx.Err() != nil {
		return
	}
	w.sh.Log.Warn("after an aborted generation the idle engine has no slot: unloading its models to free the one Ollama kept (ollama/ollama#17131)",
		"server", r.client.BaseURL)
	w.unloadStalled(ctx, slotCheckTimeout)
	if err := probe(); err != nil {
		w.sh.Log.Warn("the engine still has no slot after the unload; the stall watchdog takes over if work waits", "server", r.client.BaseURL, "err", err)
		return
	}
	w.sh.Emit(schemas.Event{Kind: EventEngineSlotFreed, WorkerID: w.cfg.ID,
		Reason: "engine " + r.client.BaseURL + " had no slot for one token after an aborted generation; unloading its models freed it"})
}

// handBack leaves a dispatch unanswered and unacked, as for an engine lost
// under it: the worker is silent, so the router re-places it, and it is
// offered here again only after engineLostRedelivery, when the ledger
// normally finds it answered.
func (w *Worker) handBack(d schemas.Dispatch, m jetstream.Msg, why string, ts *tokenStream) {
	a := d.Admitted
	w.sh.Emit(schemas.Event{Kind: EventEngineStalled, RequestID: a.Request.ID, Tenant: a.Tenant, WorkerID: w.cfg.ID,
		Reason: why, Fields: map[string]any{"chunks_streamed": chunksOf(ts), "attempt": a.Attempt}})
	m.NakWithDelay(engineLostRedelivery)
}

// stalledCause reports whether ctx was cancelled by the watchdog.
func stalledCause(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errEngineStalled) }
