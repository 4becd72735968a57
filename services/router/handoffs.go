package router

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// KV handles: the seam between a split request's two legs
// (docs/architecture.md, "Disaggregated serving"). A prefill worker stores
// its handle on HANDOFFS; the routers read it with one shared durable
// consumer, journal it as an InHandoff input, and the core answers with the
// decode leg's dispatch (or, for a failed pull, a re-placement). The
// handle's message is acked only once what answers it is stored:
//
//   - a decode leg's dispatch carries the message as its Held.Handle, so
//     ackDispatches acks it after the dispatch's stored ack, as it acks an
//     admitted request;
//   - a failed pull re-holds the request (a retry) or fails it: the message
//     becomes that request's handle, kept alive while it waits, acked when
//     its re-placement's dispatch or its error result is stored — never
//     earlier, since until then the request lives only in this router;
//   - a stale handle (an attempt re-placed meanwhile, a second handle for a
//     leg already handed off) is acked after its journal batch, having
//     changed nothing;
//   - with active-active routers a handle can reach a peer that did not
//     place the request (the consumer is shared). That peer knows nothing of
//     it, and acking it would drop it: it is handed back (nak) for the
//     router that placed it, or the one that adopted its in-flight prefill
//     leg, to take.

// handoffAckWait is how long a handle delivered to a router that has not
// answered it waits before another router may take it.
func (r *Router) handoffAckWait() time.Duration { return r.cfg.AckWait }

// notMineRedelivery is how soon a handle a peer did not own is offered
// again, and notMineGiveUp how many offers before it is dropped: a handle
// nobody owns is of a request no live router knows (its router died before
// adoption saw the prefill leg), which that router's successors answer from
// the in-flight scan or the reaper, not from the handle.
const (
	notMineRedelivery = 50 * time.Millisecond
	notMineGiveUp     = 200
)

// actSettleHandoff is the shell's own action: ack (or, for a peer's, hand
// back) a handle the core answered nothing for, after the journal batch
// that records it.
const actSettleHandoff = "settle_handoff"

// consumeHandoffs pulls KV handles into the decision loop.
func (r *Router) consumeHandoffs(ctx context.Context) (jetstream.ConsumeContext, error) {
	cons, err := r.sh.JS.CreateOrUpdateConsumer(ctx, subjects.StreamHandoffs, jetstream.ConsumerConfig{
		Durable:       subjects.RouterHandoffsConsumer,
		Description:   "router replicas share this consumer of KV handles between a split request's legs",
		FilterSubject: subjects.HandoffAll(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.handoffAckWait(),
		MaxAckPending: r.cfg.Window,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("router handoff consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var h schemas.KVHandle
		if err := svc.Decode(m.Headers(), m.Data(), &h); err != nil || h.RequestID == "" {
			reason := "undecodable KV handle"
			if err != nil {
				reason += ": " + err.Error()
			}
			r.sh.DeadLetter(ctx, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, reason)
			m.Term()
			return
		}
		// The tenant is the subject's, never the payload's.
		if tenant, id, ok := parseHandoff(m.Subject()); ok {
			h.Tenant, h.RequestID = tenant, id
		}
		r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InHandoff, Handoff: &h}, m) })
	}, jetstream.PullMaxMessages(r.pullBatch()), svc.PullExpiry)
	if err != nil {
		return nil, fmt.Errorf("router consume handoffs: %w", err)
	}
	return cc, nil
}

// settleHandoff gives a handle's message to what answers it (see above).
// It runs on the decision loop right after the core applied the handle.
func (r *Router) settleHandoff(in routing.Input, handle any, acts []routing.Action) {
	msg, ok := handle.(jetstream.Msg)
	if !ok {
		return
	}
	id := in.Handoff.RequestID
	for i := range acts {
		a := &acts[i]
		if a.Held != nil && a.Held.Handle == handle {
			return // a decode leg's dispatch: acked once it is stored
		}
	}
	if in.Handoff.Failed != nil {
		// A retry dispatched at once or refused (its error result), or
		// the request held again: the handle's message carries it.
		for i := range acts {
			a := &acts[i]
			if a.ID == id && a.Held != nil && a.Held.Handle == nil && (a.Kind == routing.ActDispatch || a.Kind == routing.ActFail) {
				a.Held.Handle = msg
				return
			}
		}
		claimed := false
		r.core.Each(func(h *routing.Held) {
			if !claimed && h.Adm.Request.ID == id && h.Handle == nil {
				h.Handle = msg
				claimed = true
			}
		})
		if claimed {
			return
		}
	}
	delete(r.progress, id)
	r.effects = append(r.effects, effect{in: in, act: routing.Action{Kind: actSettleHandoff, ID: id, Handle: msg}})
}

// ackHandoff settles a handle the core answered nothing for: stale to the
// router that owns the request, acked; a peer's, handed back.
func (r *Router) ackHandoff(a routing.Action) {
	msg, ok := a.Handle.(jetstream.Msg)
	if !ok {
		return
	}
	if r.cfg.ActiveActive {
		if _, mine := r.mine.Load(a.ID); !mine {
			md, err := msg.Metadata()
			if err != nil || md.NumDelivered < notMineGiveUp {
				msg.NakWithDelay(notMineRedelivery)
				return
			}
			r.sh.Log.Warn("KV handle of a request no live router owns; dropped", "id", a.ID, "deliveries", md.NumDelivered)
		}
	}
	r.sh.Metrics.GetOrCreateCounter(`switchyard_router_handoffs_stale_total`).Inc()
	msg.Ack()
}

// parseHandoff returns the tenant and request id of sy.handoff.<tenant>.<id>.
func parseHandoff(subj string) (tenant, id string, ok bool) {
	t := strings.Split(subj, ".")
	if len(t) != 4 || t[0] != subjects.Prefix || t[1] != "handoff" {
		return "", "", false
	}
	return t[2], t[3], true
}
