package sim

import (
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
)

// A split request's legs in virtual time, as the live workers run them
// (services/worker): the prefill worker's engine runs the prompt and the
// first token and keeps the KV; its handle reaches the router one dispatch
// latency later (the live worker publishes it on sy.handoff.>); the
// router's decode dispatch reaches the decode worker after the dispatch
// latency plus the priced transfer; the decode worker takes the KV from
// the source (which lets it go) and decodes the rest.

// handedOff is a prefill leg's end on w: the KV is held there and its
// handle goes to the router.
func (r *runner) handedOff(w *simWorker, i int32, f engine.Finished) {
	st := &r.reqs[i]
	st.source, st.firstTokenAt, st.prefillCached = w.idx, f.FirstTokenAt.Sub(Epoch).Nanoseconds(), f.CachedTokens
	r.h.pushAB(r.now+int64(r.cfg.DispatchLatency), evHandoff, i, st.attempt)
}

// handoff delivers a prefill leg's KV handle to the router core.
func (r *runner) handoff(i, attempt int32) {
	st := &r.reqs[i]
	if r.resolved(i) || st.attempt != attempt || st.phase != schemas.PhasePrefill {
		return
	}
	src := r.ws[st.source]
	q := &r.tr.Requests[i]
	kv := &schemas.KVHandle{RequestID: q.ID, Tenant: q.Tenant, Attempt: int(attempt), Worker: src.id, Link: src.link,
		PromptTokens: q.PromptTokens, CachedTokens: st.prefillCached, FirstTokenAt: at(st.firstTokenAt)}
	r.apply(routing.Input{Kind: routing.InHandoff, Handoff: kv})
}

// pull takes request i's KV from its prefill worker for a decode leg on w,
// or says why it cannot.
func (r *runner) pull(w *simWorker, i int32) *schemas.Error {
	st := &r.reqs[i]
	src := r.ws[st.source]
	id := r.tr.Requests[i].ID
	src.eng.Settle(at(r.now)) // holds past their expiry are let go first
	switch {
	case src.fault.dead:
		return schemas.Errf(schemas.CodeWorkerFailed, "", "prefill worker %s is gone: its KV for %s cannot be pulled", src.id, id)
	case !src.eng.HoldsKV(id):
		return schemas.Errf(schemas.CodeWorkerFailed, "", "prefill worker %s no longer holds the KV for %s (expired)", src.id, id)
	}
	src.eng.ReleaseKV(id)
	r.kick(src)
	return nil
}

// legFailed is a decode worker's report that its leg cannot go on: the
// router re-places the request (routing's InHandoff with Failed).
func (r *runner) legFailed(w *simWorker, i int32, e *schemas.Error) {
	st := &r.reqs[i]
	q := &r.tr.Requests[i]
	kv := &schemas.KVHandle{RequestID: q.ID, Tenant: q.Tenant, Attempt: int(st.attempt), Worker: r.ws[st.source].id, Failed: e}
	r.apply(routing.Input{Kind: routing.InHandoff, Handoff: kv})
}
