package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Disaggregated serving's two legs on a simulated worker
// (docs/architecture.md, "Disaggregated serving"; at a real engine see
// legs_remote.go, whose streaming and KV pull differ):
//
//   - Prefill (Dispatch.Phase "prefill"): the prompt and its first token,
//     streamed as chunk 1 when the request streams; the KV stays held here
//     until a decode worker pulls it or KVHold passes. The leg ends with a
//     schemas.KVHandle stored on sy.handoff.<tenant>.<id> (HANDOFFS); the
//     routers' consumer turns it into the decode leg. The dispatch is acked
//     after the handle is stored and the KV pulled (or its hold ended),
//     not before: see heldKV. No final result comes from here.
//   - Decode (Phase "decode"): pull the KV from the handle's worker over
//     sy.rpc.kvpull.<worker> (simulated: the answer says whether the blocks
//     are still held, and the priced transfer time is waited), generate the
//     rest, streaming from the chunk after the prefill's, and publish the
//     one final result through the ledger as an aggregated request does.
//     A pull that cannot succeed (the source gone, the KV expired or
//     released, the transfer outlasting the hold) is reported as the same
//     handle with Failed set, stored before the dispatch is acked, and the
//     router re-places the request under its retry budget.

// DefaultKVHold is how long a prefill worker holds a finished prefill's KV
// for its decode worker: the router's turn-around (a journal round trip and
// a dispatch) plus the priced transfer fit many times over, and a handle
// nobody pulls frees its blocks within it.
const DefaultKVHold = 30 * time.Second

// kvPullTimeout bounds a decode worker's pull request: a live prefill
// worker answers from memory at once; silence means it is gone.
const kvPullTimeout = 2 * time.Second

// handoffPublishTimeout bounds the stored publish of a handle.
const handoffPublishTimeout = 10 * time.Second

// Reasons a KV pull fails, the start of Failed.Message so operators and
// the router's events can tell them apart (Failed.Code is worker_failed:
// the leg's worker could not go on).
const (
	PullSourceGone = "kv_source_gone"
	PullExpired    = "kv_expired"
	PullUnknown    = "kv_unknown"
	PullTimeout    = "kv_transfer_timeout"
)

// heldKV is a finished prefill's KV this worker keeps for a pull, and the
// prefill leg's dispatch, acked only once the KV is pulled (or its hold
// ends): until a decode worker has the KV the prefill dispatch is the
// request's in-flight record, so a router taking over (a new leader, a peer
// adopting a dead one's work) finds it, knows the request, and applies its
// handle instead of dropping it as unknown.
type heldKV struct {
	tenant  string
	attempt int
	expires time.Time
	msg     jetstream.Msg
}

// kvPullRequest is what a decode worker asks a prefill worker for.
type kvPullRequest struct {
	V         int    `json:"v,omitempty"`
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	Attempt   int    `json:"attempt"`
	// Worker is the decode worker asking.
	Worker string `json:"worker"`
}

// kvPullReply is the prefill worker's answer: OK and the blocks released
// to the puller, or why not.
type kvPullReply struct {
	OK     bool           `json:"ok"`
	Blocks int            `json:"blocks,omitempty"`
	Error  *schemas.Error `json:"error,omitempty"`
}

// handoffMsgID dedupes a leg's handle: one per request, attempt and kind,
// so a prefill leg run again after a restart leaves one handle, and a
// decode leg's failure report is never taken for its prefill's handle.
func handoffMsgID(id string, attempt int, failed bool) string {
	s := id + "-a" + strconv.Itoa(attempt) + "-kv"
	if failed {
		s += "fail"
	}
	return s
}

// refusePhase answers a dispatch whose leg this worker's role does not
// take, or that its backend cannot run split: a router placing it here is
// a configuration error, and a clear result says so rather than running
// the leg as something else.
// The role is the live one (role.go): placed is when the dispatch was
// stored, so work placed before a role change reached the routers is
// still served.
func (w *Worker) refusePhase(d schemas.Dispatch, placed time.Time) *schemas.Error {
	role, takes := w.legRole(d.Phase, placed)
	leg := d.Phase
	if leg == schemas.PhaseBoth {
		leg = "whole-request"
	}
	if !takes {
		return schemas.Errf(schemas.CodeUnplaceable, "", "worker %s has role %s and takes no %s dispatch", w.cfg.ID, role, leg)
	}
	if d.Phase == schemas.PhaseDecode && d.Handoff == nil {
		return schemas.Errf(schemas.CodeInternal, "", "decode dispatch for worker %s carries no KV handle", w.cfg.ID)
	}
	// The simulated engine and real engines run legs (legs_remote.go);
	// the zero-time backend has no KV to hand off.
	if d.Phase != schemas.PhaseBoth && w.cfg.Instant {
		return schemas.Errf(schemas.CodeBackendError, "", "worker %s (%s backend) does not run split %s legs", w.cfg.ID, w.backendName(), d.Phase)
	}
	return nil
}

func (w *Worker) backendName() string {
	switch {
	case w.remote != nil:
		return "openai"
	case w.cfg.Instant:
		return "instant"
	}
	return "sim"
}

// completePrefill ends a prefill leg: the first token is out (streamed, if
// the request streams), the KV is held; store the handle, then ack.
func (w *Worker) completePrefill(ctx context.Context, j *job, f engine.Finished) {
	a := j.d.Admitted
	id := a.Request.ID
	first := ""
	if j.tokens != nil {
		w.flush(j.tokens, false) // the first token goes out before the handle
		first = j.tokens.Text()[len(j.resumed.text):]
	} else {
		first = j.words.next(f.OutputTokens)
	}
	now := w.sh.Now()
	blocks := w.prefillBlocks(f)
	h := schemas.KVHandle{
		V: schemas.Version, RequestID: id, Tenant: a.Tenant, Attempt: a.Attempt,
		Worker: w.cfg.ID, Link: w.cfg.Link, DecodeWorker: j.d.DecodeWorker,
		PromptTokens: f.PromptTokens, CachedTokens: f.CachedTokens, Blocks: blocks, BlockHashes: a.BlockHashes,
		FirstToken: first, FirstTokenAt: j.d.PlacedAt.Add(f.FirstTokenAt.Sub(f.Arrival)),
		ExpiresAt: now.Add(w.cfg.KVHold), GPUSeconds: f.GPUSeconds, CostUSD: w.eng.CostUSD(f.GPUSeconds),
	}
	if j.resumed.tokens > 0 && !j.resumed.firstAt.IsZero() {
		h.FirstTokenAt = j.resumed.firstAt // what the client saw first
	}
	w.mu.Lock()
	w.held[id] = heldKV{tenant: a.Tenant, attempt: a.Attempt, expires: h.ExpiresAt, msg: j.msg}
	w.mu.Unlock()
	if err := w.publishHandoff(ctx, h, false); err != nil {
		// Not stored: nothing downstream knows of this KV. Free it and let
		// the dispatch come back, so the leg runs again.
		w.sh.Log.Warn("publish KV handle; the prefill leg will run again", "id", id, "err", err)
		w.mu.Lock()
		delete(w.held, id)
		w.engineReleaseKV(id)
		w.mu.Unlock()
		j.msg.NakWithDelay(time.Second)
		return
	}
	w.sh.Emit(schemas.Event{Kind: "prefilled", RequestID: id, Tenant: a.Tenant, WorkerID: w.cfg.ID,
		Reason: "prefill leg done; KV held for " + j.d.DecodeWorker,
		Fields: map[string]any{"attempt": a.Attempt, "blocks": blocks, "prompt_tokens": f.PromptTokens, "cached_tokens": f.CachedTokens,
			"gpu_seconds": f.GPUSeconds, "expires_at": h.ExpiresAt}})
	// No completion is counted here: CompletedTotal counts requests
	// finished (one per request, by the leg that publishes its result), as
	// the simulator counts them and the controller and the admitter's
	// throughput estimate read them.
}

// publishHandoff stores a handle on HANDOFFS and waits for the stored ack.
func (w *Worker) publishHandoff(ctx context.Context, h schemas.KVHandle, failed bool) error {
	m, err := svc.Encode(subjects.Handoff(h.Tenant, h.RequestID), schemas.Msgpack, h, handoffMsgID(h.RequestID, h.Attempt, failed))
	if err != nil {
		return fmt.Errorf("encode KV handle of %s: %w", h.RequestID, err)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handoffPublishTimeout)
	defer cancel()
	if _, err := w.sh.JS.PublishMsg(pctx, m); err != nil {
		return fmt.Errorf("store KV handle of %s: %w", h.RequestID, err)
	}
	return nil
}

// releaseHeld frees a held prefill's KV and acks its dispatch: the handle
// is stored and the KV is with its decode worker (or its hold is over, and
// the decode leg's failed pull re-places the request). Callers hold w.mu.
func (w *Worker) releaseHeld(id string) {
	h, ok := w.held[id]
	if !ok {
		return
	}
	delete(w.held, id)
	w.engineReleaseKV(id)
	if h.msg != nil {
		if err := h.msg.Ack(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			w.sh.Log.Debug("ack prefill dispatch", "id", id, "err", err)
		}
	}
}

// expireHeld frees the KV of handles nobody pulled in time.
func (w *Worker) expireHeld(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, h := range w.held {
		if now.After(h.expires) {
			w.releaseHeld(id)
			w.sh.Emit(schemas.Event{Kind: "kv_expired", RequestID: id, Tenant: h.tenant, WorkerID: w.cfg.ID,
				Reason: "no decode worker pulled the prefill's KV before its hold ended", Fields: map[string]any{"attempt": h.attempt}})
		}
	}
}

// onKVPull answers a decode worker's pull: the KV is handed over (released
// here) if it is still held for that attempt, else the reason it is not.
func (w *Worker) onKVPull(msg *nats.Msg) {
	var req kvPullRequest
	if err := svc.Decode(msg.Header, msg.Data, &req); err != nil {
		return
	}
	now := w.sh.Now()
	var rep kvPullReply
	w.mu.Lock()
	h, ok := w.held[req.RequestID]
	switch {
	case !ok || !w.engineHoldsKV(req.RequestID):
		w.releaseHeld(req.RequestID)
		rep.Error = schemas.Errf(schemas.CodeWorkerFailed, w.cfg.ID, "%s: worker %s holds no KV for %s (released, expired, or lost in a restart)", PullUnknown, w.cfg.ID, req.RequestID)
	case h.attempt != req.Attempt || h.tenant != req.Tenant:
		rep.Error = schemas.Errf(schemas.CodeWorkerFailed, w.cfg.ID, "%s: worker %s holds the KV of %s attempt %d, not attempt %d", PullUnknown, w.cfg.ID, req.RequestID, h.attempt, req.Attempt)
	case now.After(h.expires):
		w.releaseHeld(req.RequestID)
		rep.Error = schemas.Errf(schemas.CodeWorkerFailed, w.cfg.ID, "%s: the KV of %s on %s expired at %s", PullExpired, req.RequestID, w.cfg.ID, h.expires.Format(time.RFC3339Nano))
	default:
		w.releaseHeld(req.RequestID)
		rep.OK = true
	}
	w.mu.Unlock()
	m, err := svc.Encode(msg.Reply, schemas.Msgpack, rep, "")
	if err != nil {
		return
	}
	if err := w.sh.NC.PublishMsg(m); err != nil {
		w.sh.Log.Warn("answer KV pull", "id", req.RequestID, "err", err)
	}
}

// startDecode runs a decode leg: the job is held (kept alive, counted for
// drain, a redelivery left alone) while the KV is pulled and transferred,
// then enters the engine. resumed is what the client has received so far:
// at least the prefill's first token.
func (w *Worker) startDecode(ctx context.Context, d schemas.Dispatch, m jetstream.Msg, resumed streamed) {
	a := d.Admitted
	id := a.Request.ID
	j := &job{d: d, msg: m, words: newSimWords(id), resumed: resumed}
	j.words.skip(resumed.tokens)
	if a.Request.Stream {
		j.tokens = newTokenStream(&a)
		j.tokens.continueFrom(resumed)
	}
	w.mu.Lock()
	if _, dup := w.inflight[id]; dup {
		w.mu.Unlock()
		return // a redelivery of a leg running here: the running copy acks
	}
	w.inflight[id] = j
	w.mu.Unlock()
	go w.pullAndDecode(ctx, j)
}

func (w *Worker) pullAndDecode(ctx context.Context, j *job) {
	d, h := j.d, j.d.Handoff
	a := d.Admitted
	id := a.Request.ID
	transfer := time.Duration(d.TransferSeconds * float64(time.Second))
	realTransfer := time.Duration(float64(transfer) / w.cfg.SpeedUp)
	if len(h.Engine) > 0 {
		// A real engine's prefill (vLLM's kv_transfer_params): its KV sits
		// in that engine's memory, which a simulated engine cannot read.
		// Decoding here would invent the answer; the router re-places it.
		w.failDecode(ctx, j, schemas.Errf(schemas.CodeWorkerFailed, h.Worker,
			"%s: simulated worker %s cannot decode from %s's handle: its KV is in a real engine (kv_transfer_params)", PullEngineMismatch, w.cfg.ID, h.Worker))
		return
	}
	if e := w.pullKV(ctx, h, realTransfer); e != nil {
		w.failDecode(ctx, j, e)
		return
	}
	if realTransfer > 0 {
		select {
		case <-time.After(realTransfer):
		case <-ctx.Done():
			// Stopping mid-transfer: the dispatch goes back unacked and,
			// its KV gone with this process, the next pull reports it.
		}
	}
	remaining := a.Request.MaxTokens - j.resumed.tokens
	seq := decodeSequence(engine.Sequence{
		ID: id, PromptTokens: h.PromptTokens, BlockHashes: a.BlockHashes,
		Priority: engine.PriorityOf(a.Priority), Critical: a.Priority == schemas.PriorityCritical,
		TPOTTarget: time.Duration(a.TPOTTargetMs * float64(time.Millisecond)),
	}, remaining)
	w.mu.Lock()
	if w.inflight[id] != j {
		w.mu.Unlock()
		return // cancelled while the KV moved: the cancel answered it
	}
	j.addedAt = w.sh.Now()
	seq.Arrival = w.clock.now(j.addedAt)
	err := w.eng.Add(seq)
	if err != nil {
		delete(w.inflight, id)
	}
	w.mu.Unlock()
	if err != nil {
		e := schemas.Errf(schemas.CodeUnplaceable, "", "worker %s cannot run the decode leg: %v", w.cfg.ID, err)
		w.finish(ctx, d, j.msg, svc.ErrorResult(id, a.Tenant, a.Priority, e, w.sh.Now()))
		return
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pullKV asks the handle's worker for the KV. A nil answer means it is
// this worker's now; otherwise why the leg cannot go on.
func (w *Worker) pullKV(ctx context.Context, h *schemas.KVHandle, transfer time.Duration) *schemas.Error {
	if now := w.sh.Now(); !h.ExpiresAt.IsZero() && now.Add(transfer).After(h.ExpiresAt) {
		return schemas.Errf(schemas.CodeWorkerFailed, h.Worker, "%s: the transfer (%s) would end after the KV's hold on %s ends (%s)",
			PullTimeout, transfer, h.Worker, h.ExpiresAt.Format(time.RFC3339Nano))
	}
	req := kvPullRequest{V: schemas.Version, RequestID: h.RequestID, Tenant: h.Tenant, Attempt: h.Attempt, Worker: w.cfg.ID}
	m, err := svc.Encode(subjects.KVPullRequest(h.Worker), schemas.Msgpack, req, "")
	if err != nil {
		return schemas.Errf(schemas.CodeInternal, "", "encode KV pull: %v", err)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kvPullTimeout)
	defer cancel()
	resp, err := w.sh.NC.RequestMsgWithContext(pctx, m)
	if err != nil {
		// No responder, or none within the timeout: the prefill worker is
		// gone, and its KV with it.
		return schemas.Errf(schemas.CodeWorkerFailed, h.Worker, "%s: prefill worker %s did not answer the KV pull: %v", PullSourceGone, h.Worker, err)
	}
	var rep kvPullReply
	if err := svc.Decode(resp.Header, resp.Data, &rep); err != nil {
		return schemas.Errf(schemas.CodeInternal, h.Worker, "undecodable KV pull answer from %s: %v", h.Worker, err)
	}
	if !rep.OK {
		if rep.Error == nil {
			rep.Error = schemas.Errf(schemas.CodeWorkerFailed, h.Worker, "%s: %s refused the KV pull", PullUnknown, h.Worker)
		}
		return rep.Error
	}
	return nil
}

// failDecode reports a decode leg that cannot go on: the handle, with
// Failed set, is stored for the router to re-place the request, and only
// then is the dispatch acked.
func (w *Worker) failDecode(ctx context.Context, j *job, e *schemas.Error) {
	a := j.d.Admitted
	id := a.Request.ID
	w.mu.Lock()
	if w.inflight[id] == j {
		delete(w.inflight, id)
	}
	w.mu.Unlock()
	h := *j.d.Handoff
	h.V, h.DecodeWorker, h.Failed = schemas.Version, w.cfg.ID, e
	h.Attempt = a.Attempt
	w.sh.Log.Info("decode leg cannot pull its KV; reported for re-placement", "id", id, "source", h.Worker, "attempt", a.Attempt, "reason", e.Message)
	if err := w.publishHandoff(ctx, h, true); err != nil {
		w.sh.Log.Warn("report a failed KV pull; the dispatch comes back", "id", id, "err", err)
		j.msg.NakWithDelay(time.Second)
		return
	}
	w.sh.Emit(schemas.Event{Kind: "kv_pull_failed", RequestID: id, Tenant: a.Tenant, WorkerID: w.cfg.ID, Reason: e.Message,
		Fields: map[string]any{"attempt": a.Attempt, "source": h.Worker}})
	if err := j.msg.Ack(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		w.sh.Log.Debug("ack decode dispatch", "id", id, "err", err)
	}
}

// decodeResumePoint is where a decode leg's stream continues: after what
// TOKENS holds for the request (the prefill's first token, and whatever
// earlier attempts streamed), or, before TOKENS has stored the prefill's
// chunk, after the handle's first token. A request that does not stream
// has only the handle's token before this leg.
func (w *Worker) decodeResumePoint(ctx context.Context, d schemas.Dispatch, m jetstream.Msg) (streamed, bool) {
	h := d.Handoff
	fromHandle := streamed{tokens: 1, text: h.FirstToken, firstAt: h.FirstTokenAt, lastAt: h.FirstTokenAt, attempt: d.Admitted.Attempt}
	if !d.Admitted.Request.Stream {
		return fromHandle, true
	}
	r, err := readStreamed(ctx, w.sh.JS, d.Admitted.Tenant, d.Admitted.Request.ID)
	switch {
	case err == nil && r.attempt > d.Admitted.Attempt:
		w.sh.Emit(schemas.Event{Kind: "skipped_superseded", RequestID: d.Admitted.Request.ID, Tenant: d.Admitted.Tenant, WorkerID: w.cfg.ID,
			Reason: fmt.Sprintf("attempt %d already streams it (chunk %d)", r.attempt, r.seq)})
		m.Ack()
		return streamed{}, false
	case err == nil && r.tokens > 0:
		return r, true
	case err == nil:
		fromHandle.seq = 1
		return fromHandle, true
	case errors.Is(err, errIncompleteRecord):
		e := schemas.Errf(schemas.CodeWorkerFailed, "", "the stream before the decode leg cannot be continued truthfully: %v", err)
		w.finish(ctx, d, m, svc.ErrorResult(d.Admitted.Request.ID, d.Admitted.Tenant, d.Admitted.Priority, e, w.sh.Now()))
	default:
		w.sh.Log.Warn("read back the stream before a decode leg; retrying", "id", d.Admitted.Request.ID, "err", err)
		m.NakWithDelay(time.Second)
	}
	return streamed{}, false
}

// completeDecode publishes a decode leg's final result: the whole
// request's, with the first token's time from the prefill leg and both
// legs' GPU time.
func (w *Worker) completeDecode(ctx context.Context, j *job, f engine.Finished) {
	a := j.d.Admitted
	h := j.d.Handoff
	k := j.resumed.tokens // output the client had before this leg
	// The prefill leg's first token (its placement plus its simulated
	// time to first token, as an aggregated result counts it), or, after a
	// failover, the first token the client saw from an earlier attempt.
	firstToken := h.FirstTokenAt.Sub(a.SubmittedAt)
	if a.Attempt > 0 && !j.resumed.firstAt.IsZero() {
		firstToken = j.resumed.firstAt.Sub(a.SubmittedAt)
	}
	queue := j.d.PlacedAt.Sub(a.SubmittedAt)
	// The gap between the first token and this leg's start (the handoff,
	// the pull, the transfer) is part of what the client waits between
	// tokens, so it counts in the inter-token latency.
	lastBefore := h.FirstTokenAt
	if !j.resumed.lastAt.IsZero() {
		lastBefore = j.resumed.lastAt
	}
	// In simulated time, as the engine's durations are (SpeedUp).
	gap := time.Duration(float64(max(0, j.addedAt.Sub(lastBefore))) * w.cfg.SpeedUp)
	decode := f.FinishedAt.Sub(f.Arrival)
	// The engine counts the prefill's first token in OutputTokens; this
	// leg generated the rest.
	generated := max(0, f.OutputTokens-1)
	itl := 0.0
	if generated > 0 {
		itl = float64((gap + decode).Microseconds()) / 1000 / float64(generated)
	}
	finished := w.sh.Now()
	var text string
	if j.tokens != nil {
		text = j.tokens.Text()
	} else {
		text = SimulatedText(a.Request.ID, a.Model, k+generated)
	}
	gpu := f.GPUSeconds + h.GPUSeconds
	cost := w.eng.CostUSD(f.GPUSeconds) + prefillCost(h, w.eng.CostUSD)
	res := schemas.Result{
		ID: a.Request.ID, Tenant: a.Tenant, Status: schemas.StatusOK, Model: a.Model, Text: text, FinishReason: "length",
		Usage: schemas.Usage{PromptTokens: a.PromptTokens, CompletionTokens: generated + k, CachedTokens: h.CachedTokens},
		Timing: schemas.Timing{
			QueueMs: ms(queue), TTFTMs: ms(firstToken), ITLMs: itl,
			TotalMs: ms(firstToken + gap + decode),
		},
		WorkerID: w.cfg.ID, GPU: w.replica.GPU.Name, Simulated: true, Priority: a.Priority, Attempt: a.Attempt,
		// Both legs' GPU time, each leg priced at its own GPU's rate.
		GPUSeconds: gpu, CostUSD: cost, FinishedAt: finished,
	}
	if a.Attempt > 0 {
		res.Reliability = &schemas.Reliability{ResumedFromSeq: j.resumed.seq, ResumedTokens: k, LostWorkers: a.ExcludeWorkers}
	}
	dl := a.Deadline
	res.Deadline = &dl
	res.SLOMet = sloMet(&a, firstToken, itl, finished)
	if j.tokens != nil {
		w.flush(j.tokens, true)
	}
	w.finish(ctx, j.d, j.msg, res)
}

// prefillCost is what a handle's prefill leg cost: its CostUSD, priced by
// the prefill worker at its own GPU's rate, or, from a prefill worker that
// predates the field (CostUSD zero with GPU time spent), its GPU-seconds at
// this worker's rate (price), the best estimate left.
func prefillCost(h *schemas.KVHandle, price func(gpuSeconds float64) float64) float64 {
	if h.CostUSD > 0 || h.GPUSeconds <= 0 {
		return h.CostUSD
	}
	return price(h.GPUSeconds)
}
