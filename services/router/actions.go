package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Carrying out the core's actions: dispatches (acked upstream only once
// stored), failures as results, snapshot requests, and keeping admitted
// messages alive while they wait.

// pendingAck is a dispatch whose stream ack is awaited before the admitted
// message it came from is acked.
type pendingAck struct {
	fut jetstream.PubAckFuture
	msg jetstream.Msg
	adm schemas.Admitted
}

func (r *Router) do(ctx context.Context, in routing.Input, a routing.Action) {
	switch a.Kind {
	case routing.ActSnapshot:
		r.requestSnapshot(ctx, a.Worker)
	case routing.ActDuplicate:
		if m, ok := a.Held.Handle.(jetstream.Msg); ok {
			m.Ack()
		}
	case routing.ActEvent:
		ev, _ := routing.EventFor(in, a)
		r.sh.Emit(ev)
		switch a.Event.Kind {
		case "retry":
			r.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_retries_total{allowed="%t"}`, a.Event.Fields["retry"])).Inc()
		case routing.EventHeldForWarmup:
			r.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_router_held_for_warmup_total{pool=%q}`, a.Event.Fields["pool"])).Inc()
		case routing.EventHeldDemand:
			// Read by the controller; the held_for_warmup counter counts the requests.
		case routing.EventWorkerDeparted:
			// A drained worker stopped heartbeating (a scale-down): no breaker moved.
		default:
			if !routing.IsBreakerTransition(a.Event.Kind) {
				break // no metric of its own: the event is the record
			}
			r.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_breaker_transitions_total{to=%q}`, a.Event.Fields["to"])).Inc()
			open := 0.0
			if a.Event.Fields["to"] != "closed" {
				open = 1
			}
			r.sh.Metrics.GetOrCreateGauge(fmt.Sprintf(`switchyard_breaker_open{worker=%q}`, a.Worker), nil).Set(open)
		}
	case routing.ActDelayed:
		ev, _ := routing.EventFor(in, a)
		r.sh.Emit(ev)
	case routing.ActFail:
		r.fail(ctx, in, a)
	case routing.ActDispatch:
		r.dispatch(ctx, in, a)
	}
}

func (r *Router) dispatch(ctx context.Context, in routing.Input, a routing.Action) {
	h := a.Held
	msg, _ := h.Handle.(jetstream.Msg)
	delete(r.progress, a.ID)
	d := schemas.Dispatch{V: schemas.Version, Admitted: h.Adm, WorkerID: a.Worker, RouterID: r.sh.Instance, PlacedAt: in.At,
		PredictedSeconds: a.Terms.CompletionSeconds, CachedTokens: a.Terms.CachedTokens}
	m, err := svc.Encode(subjects.Dispatch(a.Worker), schemas.Msgpack, d, a.ID+"-a"+strconv.Itoa(h.Adm.Attempt))
	var fut jetstream.PubAckFuture
	if err == nil {
		fut, err = r.sh.JS.PublishMsgAsync(m)
	}
	if err != nil {
		r.sh.Log.Warn("dispatch publish failed; holding it again", "id", a.ID, "err", err)
		adm := h.Adm
		r.apply(ctx, routing.Input{Kind: routing.InDispatchFailed, ID: a.ID, Admitted: &adm}, msg)
		return
	}
	// The admitted message is acked only once the dispatch is stored; the
	// decision loop does not wait for that round trip.
	select {
	case r.acks <- pendingAck{fut: fut, msg: msg, adm: h.Adm}:
	case <-ctx.Done():
	}
	if r.cfg.ActiveActive {
		r.peerOut = append(r.peerOut, a.Booking)
		r.mine.Store(a.ID, struct{}{})
	}
	r.sh.Metrics.GetOrCreatePrometheusHistogramExt(`switchyard_router_queue_seconds`, queueWaitBuckets).Update(in.At.Sub(h.Adm.SubmittedAt).Seconds())
	r.dispatchedCounter(h.Adm.Priority, a.GPU).Inc()
	ev, _ := routing.EventFor(in, a)
	r.sh.Emit(ev)
}

// fail publishes a held request's error result and acks it; if the result
// cannot be stored the message stays unacked and comes back.
func (r *Router) fail(ctx context.Context, in routing.Input, a routing.Action) {
	h := a.Held
	delete(r.progress, a.ID)
	res := svc.ErrorResult(a.ID, h.Adm.Tenant, h.Adm.Priority, a.Err, in.At)
	// A request that leaves the queue failed (expired, no feasible worker)
	// waited too: leaving it out would read the longest waits as none.
	r.sh.Metrics.GetOrCreatePrometheusHistogramExt(`switchyard_router_queue_seconds`, queueWaitBuckets).Update(in.At.Sub(h.Adm.SubmittedAt).Seconds())
	if err := r.sh.PublishResult(ctx, res, svc.ResultFormat(h.Adm.ResultFormat)); err != nil {
		if !errors.Is(err, context.Canceled) {
			r.sh.Log.Warn("publish result", "id", res.ID, "err", err)
		}
		return
	}
	ev, _ := routing.EventFor(in, a)
	r.sh.Emit(ev)
	if m, ok := h.Handle.(jetstream.Msg); ok {
		m.Ack()
	}
}

// keepAlive extends the ack deadline of requests held longer than a third
// of AckWait, so the look-ahead never lets one lapse while it waits.
func (r *Router) keepAlive() {
	now := r.sh.Now()
	r.core.Each(func(h *routing.Held) {
		id := h.Adm.Request.ID
		if now.Sub(r.progress[id]) > r.cfg.AckWait/3 {
			if m, ok := h.Handle.(jetstream.Msg); ok {
				m.InProgress()
			}
			r.progress[id] = now
		}
	})
}

// requestSnapshot asks a worker for its full block set after a gap in its
// KV events; the answer comes back as a KV input.
func (r *Router) requestSnapshot(ctx context.Context, worker string) {
	inbox := r.sh.NC.NewRespInbox()
	sub, err := r.sh.NC.Subscribe(inbox, func(m *nats.Msg) {
		var ev schemas.KVEvent
		if svc.Decode(m.Header, m.Data, &ev) == nil {
			r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InKV, KV: &ev}, nil) })
		}
	})
	if err != nil {
		return
	}
	sub.AutoUnsubscribe(1)
	r.sh.NC.PublishRequest(subjects.KVSnapshotRequest(worker), inbox, nil)
	r.sh.Metrics.GetOrCreateCounter(`switchyard_router_kv_snapshots_requested_total`).Inc()
}

// ackDispatches acks admitted messages in dispatch order as their dispatch
// publishes are confirmed; a failed one is handed back to the core.
func (r *Router) ackDispatches(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-r.acks:
			select {
			case <-p.fut.Ok():
				if p.msg != nil {
					p.msg.Ack()
				}
			case err := <-p.fut.Err():
				r.sh.Log.Warn("dispatch not stored; holding it again", "id", p.adm.Request.ID, "err", err)
				adm := p.adm
				msg := p.msg
				r.post(ctx, func() {
					r.apply(ctx, routing.Input{Kind: routing.InDispatchFailed, ID: adm.Request.ID, Admitted: &adm}, msg)
				})
			case <-ctx.Done():
				return
			}
		}
	}
}
