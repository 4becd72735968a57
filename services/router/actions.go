package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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
		r.duplicate(in, a)
	case routing.ActEvent:
		ev, _ := routing.EventFor(in, a)
		r.sh.Emit(ev)
		switch a.Event.Kind {
		case "retry":
			r.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_retries_total{allowed="%t"}`, a.Event.Fields["retry"])).Inc()
			r.logs.log(r.sh.Log, "retry", "re-placing the work of a lost worker", "id", a.ID, "worker", a.Worker,
				"retry", a.Event.Fields["retry"], "attempt", a.Event.Fields["attempt"], "reason", a.Event.Reason)
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
			// Open means placement avoids the worker. Half-open takes
			// probes again — a worker whose engine came back and
			// heartbeats is half-open until its first result — so it
			// reads 0, not "still open" with no transition seen.
			open := 0.0
			if a.Event.Fields["to"] == "open" {
				open = 1
			}
			r.sh.Metrics.GetOrCreateGauge(fmt.Sprintf(`switchyard_breaker_open{worker=%q}`, a.Worker), nil).Set(open)
			r.sh.Log.Info("breaker "+fmt.Sprint(a.Event.Fields["to"]), "worker", a.Worker, "from", a.Event.Fields["from"],
				"cause", a.Event.Fields["cause"], "reason", a.Event.Reason)
		}
	case routing.ActDelayed:
		ev, _ := routing.EventFor(in, a)
		r.sh.Emit(ev)
		// Why a request waits unplaced belongs in the log, not only in the
		// event stream: nothing else tells an operator (issue 31).
		r.logs.log(r.sh.Log, "held", "request held: no worker can take it now", "id", a.ID, "tenant", a.Held.Adm.Tenant,
			"model", a.Held.Adm.Model, "class", a.Held.Adm.Priority, "reason", a.Reason)
	case routing.ActFail:
		r.fail(ctx, in, a)
	case routing.ActDispatch:
		r.dispatch(ctx, in, a)
	case actSettleHandoff:
		r.ackHandoff(a)
	}
}

func (r *Router) dispatch(ctx context.Context, in routing.Input, a routing.Action) {
	h := a.Held
	// The message acked once the dispatch is stored: the admitted request,
	// or, for a decode leg, the KV handle it answers.
	msg, _ := h.Handle.(jetstream.Msg)
	delete(r.progress, a.ID)
	d := schemas.Dispatch{V: schemas.Version, Admitted: h.Adm, WorkerID: a.Worker, RouterID: r.sh.Instance, PlacedAt: in.At,
		PredictedSeconds: a.Terms.CompletionSeconds, CachedTokens: a.Terms.CachedTokens,
		Phase: a.Phase, DecodeWorker: a.DecodeWorker, Handoff: a.Handoff, TransferSeconds: a.TransferSeconds}
	m, err := svc.Encode(subjects.Dispatch(a.Worker), schemas.Msgpack, d, DispatchMsgID(a.ID, h.Adm.Attempt, a.Phase))
	if r.cfg.ActiveActive {
		// Its own before it is published: a worker's result can come back
		// before this goroutine gets past the publish, and a result for an
		// id not yet recorded as this router's is dropped as a peer's.
		r.mine.Store(a.ID, struct{}{})
	}
	var fut jetstream.PubAckFuture
	if err == nil {
		fut, err = r.sh.JS.PublishMsgAsync(m)
	}
	if err != nil {
		if r.cfg.ActiveActive {
			r.mine.Delete(a.ID)
		}
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
	// Published with or without peers: the controller counts a dispatch
	// by its booking until the worker's heartbeat does (its booked.go).
	r.peerOut = append(r.peerOut, a.Booking)
	r.sh.Metrics.GetOrCreatePrometheusHistogramExt(`switchyard_router_queue_seconds`, queueWaitBuckets).Update(in.At.Sub(h.Adm.SubmittedAt).Seconds())
	r.dispatchedCounter(h.Adm.Priority, a.GPU).Inc()
	ev, _ := routing.EventFor(in, a)
	r.sh.Emit(ev)
}

// DispatchMsgID is a dispatch's Nats-Msg-Id: the request id and attempt,
// so two re-placements of one attempt are one stored dispatch, and for a
// split request's legs a suffix ("-p", "-d"), so the two legs of one
// attempt never dedupe each other. internal/adapter/trail parses it back.
func DispatchMsgID(id string, attempt int, phase string) string {
	s := id + "-a" + strconv.Itoa(attempt)
	switch phase {
	case schemas.PhasePrefill:
		s += "-p"
	case schemas.PhaseDecode:
		s += "-d"
	}
	return s
}

// duplicate handles a second delivery of a held request. A redelivery of
// the very message the router holds (its ack wait lapsed, say while the
// loop was busy) is not acked: acking it acked the request while it lived
// only in this router's memory, and a crash then lost it. The newest
// delivery carries the request from then on (keep-alives and the final
// ack go to it). A different stream message with the same id is a copy,
// and is acked.
func (r *Router) duplicate(in routing.Input, a routing.Action) {
	dup, ok := a.Handle.(jetstream.Msg)
	if !ok {
		return
	}
	held, _ := a.Held.Handle.(jetstream.Msg)
	if sameStreamMessage(dup, held) {
		a.Held.Handle = dup
		r.progress[a.ID] = in.At
		r.sh.Metrics.GetOrCreateCounter(`switchyard_router_redelivered_held_total`).Inc()
		return
	}
	dup.Ack()
}

// sameStreamMessage reports whether two deliveries are of one stream
// message (same stream and sequence). Without metadata it says yes: the
// safe answer, since a message left unacked comes back, and one acked in
// error is gone.
func sameStreamMessage(a, b jetstream.Msg) bool {
	if a == nil || b == nil {
		return b == nil
	}
	ma, errA := a.Metadata()
	mb, errB := b.Metadata()
	if errA != nil || errB != nil {
		return true
	}
	return ma.Stream == mb.Stream && ma.Sequence.Stream == mb.Sequence.Stream
}

// failPublishTimeout bounds the publish of one error result: under the
// shortest AckWait a router runs with (PeerAckWait), so a result that
// cannot be stored leaves its message to come back rather than hang.
const failPublishTimeout = 2 * time.Second

// maxFailPublishes bounds the error results being published at once.
const maxFailPublishes = 256

// fail publishes a held request's error result and acks it; if the result
// cannot be stored the message stays unacked and comes back. The publish
// runs off the decision loop: a synchronous JetStream publish (5 s by
// default) there stalled every placement, and every keep-alive, behind one
// slow store — long enough to lapse the ack wait of everything held.
func (r *Router) fail(ctx context.Context, in routing.Input, a routing.Action) {
	h := a.Held
	delete(r.progress, a.ID)
	res := svc.ErrorResult(a.ID, h.Adm.Tenant, h.Adm.Priority, a.Err, in.At)
	// A request that leaves the queue failed (expired, no feasible worker)
	// waited too: leaving it out would read the longest waits as none.
	r.sh.Metrics.GetOrCreatePrometheusHistogramExt(`switchyard_router_queue_seconds`, queueWaitBuckets).Update(in.At.Sub(h.Adm.SubmittedAt).Seconds())
	r.logs.log(r.sh.Log, "refused:"+a.Err.Code, "request answered without placement", "id", a.ID, "tenant", h.Adm.Tenant,
		"model", h.Adm.Model, "code", a.Err.Code, "reason", a.Err.Message)
	ev, _ := routing.EventFor(in, a)
	format := svc.ResultFormat(h.Adm.ResultFormat)
	msg, _ := h.Handle.(jetstream.Msg)
	r.fails.Add(1)
	go func() {
		defer r.fails.Done()
		select {
		case r.failSlots <- struct{}{}:
			defer func() { <-r.failSlots }()
		case <-ctx.Done():
			return
		}
		pctx, cancel := context.WithTimeout(ctx, failPublishTimeout)
		defer cancel()
		if err := r.sh.PublishResult(pctx, res, format); err != nil {
			if !errors.Is(err, context.Canceled) {
				r.sh.Log.Warn("publish result", "id", res.ID, "err", err)
			}
			return
		}
		r.sh.Emit(ev)
		if msg != nil {
			msg.Ack()
		}
	}()
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
