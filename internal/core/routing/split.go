package routing

import (
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/breaker"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/retry"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Disaggregated requests: two legs, one request. A split placement
// (placement.Decision.Split) dispatches the prefill leg to the prefill
// worker and books the decode leg on the worker planned to decode. The
// prefill worker's KV handle (InHandoff) dispatches the decode leg — to
// the planned worker while it is live, else to the decode worker placement
// picks then — and a decode worker that could not pull the KV answers with
// a failed handle, which re-places the request under the retry budget as
// a lost worker's work is. The request stays in placedOn across both legs,
// so a lost worker, the reaper and adoption cover either leg as they cover
// an aggregated request.

// decodeKey is the fleet booking key of a split request's decode leg: a
// request books its prefill leg under its id and its decode leg under
// this, so the two workers' capacity is held at once.
func decodeKey(id string) string { return id + "\x00decode" }

// unbook releases both of a request's bookings.
func (c *Core) unbook(id string) {
	c.fleet.Unreserve(id)
	c.fleet.Unreserve(decodeKey(id))
}

// placeSplit dispatches a split decision's prefill leg and books both legs.
func (c *Core) placeSplit(id string, h *Held, dec *placement.Decision, now time.Time) {
	pre := dec.Prefill
	prefill := max(1, h.Adm.PromptTokens-dec.PrefillTerms.CachedTokens)
	preBlocks := dec.PrefillTerms.Blocks
	_, output, blocks := dec.Booking(h.Adm.PromptTokens, h.Adm.Request.MaxTokens)
	c.fleet.Reserve(pre.ID, id, h.Adm.Priority, prefill, 1, preBlocks, now)
	// The decode leg books no prompt: its prompt arrives as KV, not as
	// prefill work queued on that worker.
	c.fleet.Reserve(dec.Worker.ID, decodeKey(id), h.Adm.Priority, 0, output, blocks, now)
	a := Action{Kind: ActDispatch, ID: id, Held: h, Worker: pre.ID, GPU: pre.GPU, Policy: dec.Policy,
		Terms: dec.PrefillTerms, Rejected: len(dec.Rejections), Considered: dec.Considered, Skipped: dec.Skipped,
		Phase: schemas.PhasePrefill, DecodeWorker: dec.Worker.ID, TransferSeconds: dec.TransferSeconds, Attempt: h.Adm.Attempt,
		Booking: PeerBooking{ID: id, Worker: pre.ID, Class: h.Adm.Priority, Prefill: prefill, Output: 1, Blocks: preBlocks}}
	c.explain(&a, dec)
	delete(c.held, id)
	c.placedOn[id] = &inflight{worker: pre.ID, adm: h.Adm, predicted: dec.PrefillTerms.CompletionSeconds, placedAt: now,
		phase: schemas.PhasePrefill, decodeWorker: dec.Worker.ID, transfer: dec.TransferSeconds, decodePredicted: dec.Terms.CompletionSeconds}
	if c.approxKV[pre.ID] {
		c.fleet.Prefix().Stored(pre.Idx, h.Adm.BlockHashes)
	}
	if c.breakers.State(pre.ID) != breaker.Closed {
		c.breakers.Allow(pre.ID, now)
	}
	c.acts = append(c.acts, a)
}

// explain copies the decision's best candidates into a dispatch action.
func (c *Core) explain(a *Action, dec *placement.Decision) {
	for i, cd := range dec.Candidates {
		if i == c.cfg.ExplainTop {
			break
		}
		a.Candidates = append(a.Candidates, Candidate{Worker: cd.Worker.ID, GPU: cd.Worker.GPU, Terms: cd.Terms})
	}
}

// handoff applies a prefill leg's KV handle, or a decode worker's report
// that it could not pull one. A handle of an attempt that is not the one in
// flight (re-placed meanwhile, or answered) is stale and changes nothing.
func (c *Core) handoff(kv *schemas.KVHandle, handle any, now time.Time) {
	if kv == nil {
		return
	}
	id := kv.RequestID
	f, ok := c.placedOn[id]
	if !ok || f.adm.Attempt != kv.Attempt || f.adm.Tenant != kv.Tenant {
		return
	}
	if kv.Failed != nil {
		// Only the decode leg's worker reports a failed pull; a failure
		// named by anyone else for another leg is not this attempt's.
		if f.phase != schemas.PhaseDecode {
			return
		}
		c.replace(id, f, kv.Failed.Code, kv.Failed.Message, kv.Worker, now, nil)
		return
	}
	if f.phase != schemas.PhasePrefill || kv.Worker != f.worker {
		return // a second handle for a leg already handed off
	}
	c.fleet.Unreserve(id) // the prefill leg is done
	target, transfer, predicted, gpu := f.decodeWorker, f.transfer, f.decodePredicted, ""
	var terms placement.Terms
	if w := c.fleet.Get(target); w != nil && w.Fresh(now, c.fleet.Staleness()) && !w.Draining &&
		schemas.RoleTakes(w.Role, schemas.PhaseDecode) && c.breakers.State(target) == breaker.Closed {
		gpu = w.GPU
	} else {
		// The planned decode worker is gone or suspect: the decode leg
		// alone is placed now, its prompt coming from the prefill worker.
		c.fleet.Unreserve(decodeKey(id))
		req := placement.FromAdmitted(&f.adm, "", f.adm.WorkflowStartedAt)
		req.Phase, req.Source = schemas.PhaseDecode, kv.Worker
		c.excludeSuspects(&req, now)
		dec := c.cfg.Policy.Place(c.fleet, &req, now)
		if !dec.OK() {
			c.replace(id, f, schemas.CodeWorkerFailed, "no decode worker can take the handed-off KV: "+Summarize(dec), "", now, nil)
			return
		}
		target, transfer, predicted, gpu, terms = dec.Worker.ID, dec.TransferSeconds, dec.Terms.CompletionSeconds, dec.Worker.GPU, dec.Terms
		_, output, blocks := dec.Booking(f.adm.PromptTokens, f.adm.Request.MaxTokens)
		c.fleet.Reserve(target, decodeKey(id), f.adm.Priority, 0, output, blocks, now)
	}
	f.worker, f.phase, f.predicted, f.placedAt = target, schemas.PhaseDecode, predicted, now
	if c.breakers.State(target) != breaker.Closed {
		c.breakers.Allow(target, now)
	}
	c.acts = append(c.acts, Action{Kind: ActDispatch, ID: id, Held: &Held{Adm: f.adm, Handle: handle}, Handle: handle,
		Worker: target, GPU: gpu, Policy: c.cfg.Policy.Name(), Terms: terms, Phase: schemas.PhaseDecode,
		Handoff: kv, TransferSeconds: transfer, Attempt: f.adm.Attempt})
}

// replace re-places an in-flight request whose leg failed, under the
// retry budget, as a lost worker's work is; exclude names a worker the
// next attempt must avoid ("" for none), handle is the shell's message
// that carries the request until the next attempt is stored (nil: the
// shell attaches one).
func (c *Core) replace(id string, f *inflight, code, reason, exclude string, now time.Time, handle any) {
	delete(c.placedOn, id)
	c.unbook(id)
	if d, ok := c.cfg.Policy.(Completer); ok {
		d.Done(id, f.worker)
	}
	adm := f.adm
	prefill, decode := c.minServiceParts(&adm, false)
	dec := c.budget.Decide(retry.Input{Tenant: adm.Tenant, Now: now, Deadline: adm.Deadline, Attempt: adm.Attempt,
		PrefillSeconds: prefill, DecodeSeconds: decode})
	ev := &schemas.Event{Kind: "retry", At: now, RequestID: id, Tenant: adm.Tenant, WorkerID: f.worker, Reason: dec.Reason,
		Fields: map[string]any{"retry": dec.Retry, "attempt": adm.Attempt + 1, "remaining_s": dec.Remaining, "needed_s": dec.Needed,
			"scope": dec.Scope, "leg_failed": code, "leg_reason": reason}}
	c.acts = append(c.acts, Action{Kind: ActEvent, ID: id, Worker: f.worker, Event: ev})
	if !dec.Retry {
		c.fail(&Held{Adm: adm, Handle: handle}, dec.Error())
		return
	}
	adm.Attempt++
	if exclude != "" {
		adm.ExcludeWorkers = append(append([]string(nil), adm.ExcludeWorkers...), exclude)
	}
	h := &Held{Adm: adm, Handle: handle}
	c.held[id] = h
	c.q.Push(c.item(h, now))
	c.placeReady(now)
}
