package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/backend/openai"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// Disaggregated serving's two legs at a real engine: the openai backend
// fronting vLLM instances started with NixlConnector
// (internal/adapter/backend/openai/disagg.go, docs/engines.md
// "Disaggregated legs"). The bus protocol is the simulated legs' (legs.go):
// the same handle on HANDOFFS, the same holds and acks, the same failed
// handles. What differs is where the KV lives and who streams what.
//
//   - Prefill: the request the aggregated path would send (remoteRequest:
//     same prompt or messages, same max_tokens) goes to Client.Prefill,
//     with X-Request-Id legRequestID(id, attempt). The handle carries the
//     response's kv_transfer_params (Engine, BlockIDs), the leg's GPU time
//     and its cost at this worker's price. The prefill's one token is NOT
//     streamed: vLLM's decode instance samples the first token again from
//     the pulled KV and streams the whole answer, so a client that had the
//     prefill's token would see it twice, or, with sampling, two different
//     first tokens (vLLM's own P/D proxy drops it too). This differs from
//     the simulated path, where the prefill worker streams token 1 and the
//     decode worker continues from chunk 2. A prefill whose token was a
//     stop (Prefilled.Done), or that was the whole max_tokens, has finished
//     the request: its one final result comes from here, streamed as a
//     single last chunk, and there is no handoff. A response without
//     kv_transfer_params (a vLLM without a KV connector, or Ollama) is an
//     error result naming --kv-transfer-config.
//   - Decode: openai.DecodeParams(handle) becomes the request's
//     kv_transfer_params and the request goes through Generate as an
//     aggregated one does, with the prefill's X-Request-Id, streamed from
//     chunk 1 (after what an earlier attempt streamed, if any). A handle
//     without engine parameters (a simulated prefill worker's, or one that
//     does not ask for a remote prefill) cannot be decoded here: it is
//     reported as a failed handle (PullNoEngineParams) so the router
//     re-places the request, excluding that prefill worker.
//
// The KV pull. The KV stays in the vLLM prefill instance's GPU memory and
// the vLLM decode instance reads it itself over NIXL when the decode
// request arrives; no block crosses the bus and the priced transfer is not
// waited (the real one is inside the decode's time to first token). The
// worker-level pull over sy.rpc.kvpull.<worker> still runs, answered
// trivially by the prefill worker, because it is the handshake the
// protocol rests on: the prefill dispatch stays unacked, the request's
// in-flight record for a router taking over, until a decode worker has
// taken the request; and it tells the decode worker the hold has not
// ended and the prefill worker is alive. A dead prefill worker fails the
// pull (kv_source_gone) and the request is re-placed even though its vLLM
// instance may still hold the KV: the worker cannot know, and a prefill
// repeated costs less than a decode that finds no KV.
//
// The hold. Config.KVHold bounds how long the handle is good for; vLLM's
// prefill instance frees blocks nobody read after
// VLLM_NIXL_ABORT_REQUEST_TIMEOUT (vLLMNixlAbortTimeout by default), and
// the decode instance reads them only once the decode request is
// scheduled there, after the handshake. So the hold must stay well under
// vLLM's timeout, leaving the decode instance's queue the rest (New warns
// otherwise). Nothing here can make vLLM free an unread KV early: a handle
// whose hold ends unpulled leaves its blocks at the prefill instance until
// vLLM's timeout.
//
// Untested against a live vLLM: the tests play vLLM's prefill and decode
// endpoints with httptest servers answering the documented shapes
// (internal/adapter/backend/openai/testdata).

// vLLMNixlAbortTimeout is vLLM's default VLLM_NIXL_ABORT_REQUEST_TIMEOUT
// (vllm/envs.py): how long a prefill instance keeps blocks a decode
// instance has not read.
const vLLMNixlAbortTimeout = 480 * time.Second

// PullNoEngineParams starts a failed handle's message when a real decode
// worker got a handle it has no engine parameters to decode from.
const PullNoEngineParams = "kv_no_engine_params"

// PullEngineMismatch starts a failed handle's message when a simulated
// decode worker is handed a real engine's KV (the mirror of
// PullNoEngineParams).
const PullEngineMismatch = "kv_engine_mismatch"

// legRequestID is the X-Request-Id both legs of one attempt send: vLLM's
// NixlConnector versions without remote_request_id pair the legs by it.
// The attempt keeps a re-placed request's legs from reusing an id a vLLM
// instance may still hold the KV of.
func legRequestID(id string, attempt int) string { return id + "-a" + strconv.Itoa(attempt) }

// warnRemoteHold says when a real-engine worker that runs prefill legs
// holds a handle as long as vLLM holds its KV or longer: such a handle
// could outlive the blocks it names.
func warnRemoteHold(sh *svc.Shell, cfg Config) {
	if cfg.Role == schemas.RoleDecode || cfg.KVHold < vLLMNixlAbortTimeout/2 {
		return
	}
	sh.Log.Warn("the KV hold is not well under vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s by default): a decode instance may find the prefill's blocks freed",
		"kv_hold", cfg.KVHold, "vllm_default", vLLMNixlAbortTimeout)
}

// heldPrefill reports whether d is a redelivery of a prefill leg whose KV
// is held here for the same attempt. A hold of an earlier attempt is
// released, its dispatch acked: the router has re-placed the request, so
// that dispatch is no longer its record. Callers hold w.mu.
func (w *Worker) heldPrefill(d schemas.Dispatch) bool {
	a := d.Admitted
	h, ok := w.held[a.Request.ID]
	if !ok || h.tenant != a.Tenant {
		return false
	}
	if h.attempt < a.Attempt {
		w.releaseHeld(a.Request.ID)
		return false
	}
	return d.Phase == schemas.PhasePrefill && h.attempt == a.Attempt
}

// remotePrefill runs a prefill leg at the engine (see the top of this
// file) and reports whether the engine's request was aborted.
func (w *Worker) remotePrefill(ctx, rctx context.Context, d schemas.Dispatch, m jetstream.Msg) (aborted bool) {
	r := w.remote
	a := d.Admitted
	id := a.Request.ID
	// What an earlier attempt streamed: the decode leg reads the same
	// record (this leg adds nothing to it), so both legs continue after
	// the same text and ask the same question.
	req, resumed, ok := w.remoteQuestion(ctx, d, m)
	if !ok {
		return false
	}
	req.RequestID = legRequestID(id, a.Attempt)
	w.ensureLoaded(rctx, req.Model)
	w.mu.Lock()
	sentAt := w.sh.Now()
	r.noteProgress(sentAt) // a load is not the engine's silence
	r.busy.start(id, sentAt)
	w.mu.Unlock()
	pre, err := r.client.Prefill(rctx, req)
	now := w.sh.Now()
	w.mu.Lock()
	busy := r.busy.end(id, now)
	delete(r.unprefilled, id)
	w.mu.Unlock()
	r.noteProgress(now)
	if err != nil {
		if errors.Is(err, openai.ErrNoTransferParams) {
			err = fmt.Errorf("prefill leg on worker %s: %w", w.cfg.ID, err)
		}
		return w.remoteFailed(ctx, rctx, d, m, err, nil)
	}
	if pre.Done || req.MaxTokens == 1 {
		// The request ended inside the prefill: its one token is the
		// whole (rest of the) answer, and nothing is handed off.
		if a.Request.Stream {
			ts := newTokenStream(&a)
			ts.continueFrom(resumed)
			if pre.Text != "" {
				ts.add(pre.Text, 1, now)
			}
			w.flush(ts, true)
		}
		w.finish(ctx, d, m, w.remoteResult(a, pre.Result, resumed, sentAt, time.Time{}, now, busy))
		w.sh.Emit(schemas.Event{Kind: "prefill_finished", RequestID: id, Tenant: a.Tenant, WorkerID: w.cfg.ID,
			Reason: "the prefill leg's one token ended the request (finish_reason " + pre.FinishReason + "): answered here, nothing handed off",
			Fields: map[string]any{"attempt": a.Attempt}})
		return false
	}
	prompt := pre.PromptTokens
	if prompt == 0 {
		prompt = a.PromptTokens
	}
	blocks := len(pre.BlockIDs)
	if blocks == 0 {
		blocks = (prompt + 15) / 16 // vLLM's default block size on GPUs
	}
	firstAt := now
	if resumed.tokens > 0 && !resumed.firstAt.IsZero() {
		firstAt = resumed.firstAt // what the client saw first
	}
	h := schemas.KVHandle{
		V: schemas.Version, RequestID: id, Tenant: a.Tenant, Attempt: a.Attempt,
		Worker: w.cfg.ID, Link: w.cfg.Link, DecodeWorker: d.DecodeWorker,
		PromptTokens: prompt, CachedTokens: pre.CachedTokens, Blocks: blocks, BlockIDs: pre.BlockIDs, BlockHashes: a.BlockHashes,
		// Not streamed (see the top of this file): kept for the trail.
		FirstToken: pre.Text, FirstTokenAt: firstAt,
		ExpiresAt:  now.Add(w.cfg.KVHold),
		GPUSeconds: busy * float64(max(1, w.cfg.TP)), CostUSD: busy / 3600 * w.replica.PricePerHour(),
		Engine: pre.Engine,
	}
	w.mu.Lock()
	w.held[id] = heldKV{tenant: a.Tenant, attempt: a.Attempt, expires: h.ExpiresAt, msg: m}
	w.mu.Unlock()
	if err := w.publishHandoff(ctx, h, false); err != nil {
		// Not stored: no decode worker will ask for this KV. The dispatch
		// comes back and the leg runs again; the vLLM instance frees the
		// unread blocks after its abort timeout.
		w.sh.Log.Warn("publish KV handle; the prefill leg will run again", "id", id, "err", err)
		w.mu.Lock()
		delete(w.held, id)
		w.mu.Unlock()
		m.NakWithDelay(time.Second)
		return false
	}
	w.sh.Emit(schemas.Event{Kind: "prefilled", RequestID: id, Tenant: a.Tenant, WorkerID: w.cfg.ID,
		Reason: "prefill leg done at the engine; its KV waits there for " + d.DecodeWorker + "'s engine to read it",
		Fields: map[string]any{"attempt": a.Attempt, "blocks": blocks, "prompt_tokens": prompt, "cached_tokens": pre.CachedTokens,
			"gpu_seconds": h.GPUSeconds, "expires_at": h.ExpiresAt, "engine_id": pre.Engine["remote_engine_id"]}})
	// The request completes on its decode leg (see prefillLeg in legs.go).
	return false
}

// decodeLeg is what a decode leg adds to the request a real decode
// worker sends: the engine's transfer parameters, the prefill's request
// id, and the prefill leg's figures for the result.
type decodeLeg struct {
	h         *schemas.KVHandle
	params    map[string]any
	requestID string
}

// remoteDecodeLeg readies a decode leg at a real engine: the handle's
// engine parameters, and the handshake pull. Either failing is reported as
// a failed handle, stored before the dispatch is acked, so the router
// re-places the request; ok is then false.
func (w *Worker) remoteDecodeLeg(ctx context.Context, d schemas.Dispatch, m jetstream.Msg) (leg *decodeLeg, ok bool) {
	h := d.Handoff
	params, err := openai.DecodeParams(h)
	if err != nil {
		w.failDecode(ctx, &job{d: d, msg: m}, schemas.Errf(schemas.CodeWorkerFailed, h.Worker,
			"%s: worker %s (openai backend) cannot decode from %s's handle: %v", PullNoEngineParams, w.cfg.ID, h.Worker, err))
		return nil, false
	}
	// No transfer to wait for: the engine reads the KV itself.
	if e := w.pullKV(ctx, h, 0); e != nil {
		w.failDecode(ctx, &job{d: d, msg: m}, e)
		return nil, false
	}
	return &decodeLeg{h: h, params: params, requestID: legRequestID(h.RequestID, h.Attempt)}, true
}

// addPrefill adds the prefill leg to a decode leg's result: its GPU time,
// its cost at the prefill GPU's price, and its prefix-cache hit (the
// decode instance's own cached count covers the KV it pulled, which is
// not a cache hit).
func (l *decodeLeg) addPrefill(out *schemas.Result, price func(gpuSeconds float64) float64) {
	out.GPUSeconds += l.h.GPUSeconds
	out.CostUSD += prefillCost(l.h, price)
	out.Usage.CachedTokens = l.h.CachedTokens
}
