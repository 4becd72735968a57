package routing

import (
	"sort"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/breaker"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/retry"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Reliability: breakers over worker outcomes, a lost worker's work
// re-placed, overdue dispatches reaped, silent workers forgotten.

// ForgetAfter is how long a worker may stay silent before the router drops
// it from its fleet view, breakers and prefix index. Workers come and go
// with autoscaling, each under a new id; without forgetting, every one ever
// seen would stay in the view (failing closed, but costing every placement
// a look) and keep a breaker. By then anything dispatched to it has been
// re-placed or reaped.
const ForgetAfter = 10 * time.Minute

// OverdueGrace is how long past its deadline a dispatched request may go
// without a result before the router answers it with deadline_exceeded: a
// worker that is alive but wedged must not leave a client waiting forever.
const OverdueGrace = 5 * time.Second

// MaxEjectFraction caps how much of the fleet breakers may take out of
// placement at once (Envoy's max_ejection_percent idea): when most of the
// fleet looks sick the likelier culprit is shared (the bus, the load), and
// ejecting everyone would turn a slowdown into an outage.
const MaxEjectFraction = 0.5

// excludeSuspects adds workers whose breaker refuses traffic to the
// request's exclusions, reporting whether any was added.
func (c *Core) excludeSuspects(req *placement.Request, now time.Time) bool {
	if len(c.suspect) == 0 {
		return false
	}
	limit := max(1, int(float64(c.fleet.Len())*MaxEjectFraction))
	c.exclude = append(c.exclude[:0], req.Exclude...)
	added := 0
	for _, w := range c.suspect {
		if added == limit {
			break
		}
		if !c.breakers.Allowed(w, now) {
			c.exclude = append(c.exclude, w)
			added++
		}
	}
	req.Exclude = c.exclude
	return added > 0
}

// EventWorkerDeparted records a worker that drained and then stopped
// heartbeating: it left the fleet (a scale-down); no breaker moved.
const EventWorkerDeparted = "worker_departed"

// IsBreakerTransition reports whether an event kind is a breaker's state
// change (breaker_open, breaker_half_open, breaker_closed), which carries
// "from", "to" and "cause" fields.
func IsBreakerTransition(kind string) bool { return strings.HasPrefix(kind, "breaker_") }

// transition records a breaker state change; a worker whose breaker opened
// because it went silent has lost its in-flight work with its KV cache,
// so that work is re-placed under the retry budget.
func (c *Core) transition(t breaker.Transition) {
	if t.To == breaker.Open && t.Cause == breaker.CauseStale && c.departed(t.Worker) {
		// A worker that drained and then went quiet has left (scaled
		// down), not failed: forget it rather than open its breaker.
		c.acts = append(c.acts, Action{Kind: ActEvent, Worker: t.Worker, Event: &schemas.Event{
			Kind: EventWorkerDeparted, At: t.At, WorkerID: t.Worker, Reason: "drained, then stopped heartbeating"}})
		c.forget(t.Worker)
		c.refreshSuspects()
		return
	}
	c.refreshSuspects()
	c.acts = append(c.acts, Action{Kind: ActEvent, Worker: t.Worker, Event: &schemas.Event{
		Kind: t.EventKind(), At: t.At, WorkerID: t.Worker, Reason: t.Reason,
		Fields: map[string]any{"from": t.From.String(), "to": t.To.String(), "cause": string(t.Cause)}}})
	if t.To == breaker.Open && t.Cause == breaker.CauseStale {
		c.workerLost(t.Worker, t.At)
	}
}

// workerLost re-places, exactly once each, the requests dispatched to a
// worker that stopped heartbeating — if the retry budget allows and the
// deadline still covers a full re-prefill plus decode; otherwise the
// request fails fast with the reason. A late result from the lost worker
// is dropped by the result ledger.
func (c *Core) workerLost(worker string, now time.Time) {
	var ids []string
	for id, f := range c.placedOn {
		if f.worker == worker {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids) // deterministic order for replay
	for _, id := range ids {
		f := c.placedOn[id]
		delete(c.placedOn, id)
		c.unbook(id)
		if d, ok := c.cfg.Policy.(Completer); ok {
			d.Done(id, worker)
		}
		adm := f.adm
		prefill, decode := c.minServiceParts(&adm, false)
		dec := c.budget.Decide(retry.Input{Tenant: adm.Tenant, Now: now, Deadline: adm.Deadline, Attempt: adm.Attempt,
			PrefillSeconds: prefill, DecodeSeconds: decode})
		ev := &schemas.Event{Kind: "retry", At: now, RequestID: id, Tenant: adm.Tenant, WorkerID: worker, Reason: dec.Reason,
			Fields: map[string]any{"retry": dec.Retry, "attempt": adm.Attempt + 1, "remaining_s": dec.Remaining, "needed_s": dec.Needed, "scope": dec.Scope}}
		c.acts = append(c.acts, Action{Kind: ActEvent, ID: id, Worker: worker, Event: ev})
		if !dec.Retry {
			c.fail(&Held{Adm: adm}, dec.Error())
			continue
		}
		adm.Attempt++
		adm.ExcludeWorkers = append(append([]string(nil), adm.ExcludeWorkers...), worker)
		h := &Held{Adm: adm}
		c.held[id] = h
		c.q.Push(c.item(h, now))
	}
}

// release handles a request's final result: the booking ends, the policy
// learns the worker is free, and the outcome feeds that worker's breaker.
func (c *Core) release(id string, res *ResultSummary, now time.Time) {
	c.unbook(id)
	f, ok := c.placedOn[id]
	if !ok {
		return
	}
	delete(c.placedOn, id)
	if d, ok := c.cfg.Policy.(Completer); ok {
		d.Done(id, f.worker)
	}
	if res == nil || res.WorkerID == "" {
		return
	}
	if res.Status == schemas.StatusOK {
		c.calibrate(f, res)
	}
	o := breaker.Outcome{ObservedSeconds: res.WorkMs / 1000, PredictedSeconds: f.predicted}
	if res.Status != schemas.StatusOK && blamesWorker(res.Code) {
		o.Code = res.Code
	}
	if res.Status != schemas.StatusOK && o.Code == "" {
		return // the request's own fault or a cancel: says nothing about the GPU
	}
	if t, ok := c.breakers.Observe(res.WorkerID, o, now); ok {
		c.transition(t)
	}
}

// blamesWorker says which failure codes are the worker's fault.
func blamesWorker(code string) bool {
	switch code {
	case schemas.CodeWorkerFailed, schemas.CodeBackendError, schemas.CodeInternal:
		return true
	}
	return false
}

// reapOverdue fails dispatched requests that are OverdueGrace past their
// deadline with no result. The ledger keeps this and a late worker result
// from both becoming final.
func (c *Core) reapOverdue(now time.Time) {
	var ids []string
	for id, f := range c.placedOn {
		if !f.adm.Deadline.IsZero() && now.Sub(f.adm.Deadline) > OverdueGrace {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		f := c.placedOn[id]
		delete(c.placedOn, id)
		c.unbook(id)
		if d, ok := c.cfg.Policy.(Completer); ok {
			d.Done(id, f.worker)
		}
		c.fail(&Held{Adm: f.adm}, schemas.Errf(schemas.CodeDeadlineExceeded, "", "no result from worker %s by %s past the deadline", f.worker, OverdueGrace))
		// An overdue request says the worker is slow, not that it failed:
		// it still heartbeats (a silent one is the staleness check's). It
		// counts as a latency outcome, so a worker wedged while the rest
		// keep up opens, and an overloaded fleet does not eject itself.
		o := breaker.Outcome{PredictedSeconds: f.predicted}
		if !f.placedAt.IsZero() {
			o.ObservedSeconds = now.Sub(f.placedAt).Seconds()
		}
		// A policy that predicts nothing (a baseline) learns nothing here.
		if o.PredictedSeconds > 0 && o.ObservedSeconds > 0 {
			if t, ok := c.breakers.Observe(f.worker, o, now); ok {
				c.transition(t)
			}
		}
	}
}

// forgetDeparted drops workers silent for longer than ForgetAfter.
func (c *Core) forgetDeparted(now time.Time) {
	var gone []string
	for _, w := range c.fleet.Workers() {
		if w != nil && !w.LastSeen.IsZero() && now.Sub(w.LastSeen) > ForgetAfter {
			gone = append(gone, w.ID)
		}
	}
	sort.Strings(gone) // deterministic for replay
	for _, id := range gone {
		c.forget(id)
	}
	if len(gone) > 0 {
		c.refreshSuspects()
	}
}

// departed reports whether a worker's last heartbeat said it was draining
// and nothing dispatched to it is still out.
func (c *Core) departed(worker string) bool {
	w := c.fleet.Get(worker)
	if w == nil || !w.Draining {
		return false
	}
	for _, f := range c.placedOn {
		if f.worker == worker {
			return false
		}
	}
	return true
}

// forget drops a worker from the fleet view, breakers and KV bookkeeping.
func (c *Core) forget(id string) {
	c.fleet.Remove(id)
	c.breakers.Forget(id)
	delete(c.approxKV, id)
	delete(c.preciseKV, id)
}

// refreshSuspects lists the workers whose breaker is not closed.
func (c *Core) refreshSuspects() {
	c.suspect = c.suspect[:0]
	for _, st := range c.breakers.States() {
		if st.State != breaker.Closed {
			c.suspect = append(c.suspect, st.Worker)
		}
	}
}
