package router

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
)

// The journal: inputs are published in batches on sy.journal.router.<id>
// before their actions are carried out (Nagle's way while one batch awaits
// its ack), so replay sees every input the core was given.

// journalLinger is the longest a batch of inputs without actions waits
// before it is journaled anyway; maxLingerInputs closes such a batch
// sooner.
const (
	journalLinger   = 250 * time.Millisecond
	maxLingerInputs = 512
)

// journalAckWait bounds how long a journal batch's missing ack may hold
// the next batch and its actions back.
const journalAckWait = 2 * time.Second

// effect is one action of an applied input, waiting for the input's
// journal batch to be published.
type effect struct {
	in  routing.Input
	act routing.Action
}

// Journal batches close at whichever comes first: the inbox running dry,
// maxBatchInputs inputs, or maxBatchBytes of encoded entries (well under
// NATS's 1 MiB default payload limit, since a KV snapshot alone can be
// large).
const (
	maxBatchInputs = 128
	maxBatchBytes  = 256 << 10
)

// flush publishes the journal batch, then carries out its actions in the
// order they were decided. An action may apply another input (a dispatch
// that could not be published is handed back to the core), which starts
// the next batch; flush runs until none is left or the batch must wait
// for the previous one's ack.
func (r *Router) flush(ctx context.Context) {
	for !r.journalBusy && (len(r.effects) > 0 || r.journalDue()) {
		if fut := r.publishJournal(); fut != nil {
			r.journalBusy = true
			go r.awaitJournal(ctx, fut)
		}
		todo := r.effects
		r.effects = r.done[:0]
		for i := range todo {
			r.do(ctx, todo[i].in, todo[i].act)
			todo[i] = effect{} // drop references to delivered messages
		}
		r.done = todo[:0]
		// The bookings of these dispatches, and the releases applied
		// since the last batch, go to the peers in one message per
		// journal batch.
		r.publishBookings()
	}
	if !r.journalBusy {
		// Releases applied while no batch was due (without a journal, or
		// after the loop above ran dry) still go out now.
		r.publishBookings()
	}
	r.sh.Metrics.GetOrCreateGauge(`switchyard_router_held`, nil).Set(float64(r.core.HeldCount()))
	r.sh.Metrics.GetOrCreateGauge(`switchyard_router_held_for_warmup`, nil).Set(float64(r.core.HeldForWarmupCount()))
	for i, c := range schemas.Priorities {
		r.queueDepth[i].Set(float64(r.core.QueuedClass(c)))
	}
	tenants, peers, peerTenants := r.core.FairState()
	r.fairState[0].Set(float64(tenants))
	r.fairState[1].Set(float64(peers))
	r.fairState[2].Set(float64(peerTenants))
}

// journalDue reports whether the journal batch must go out although no
// action waits on it: it is big enough, or old enough.
func (r *Router) journalDue() bool {
	n := r.jbatch.Len()
	return n > 0 && (n >= maxLingerInputs || r.sh.Now().Sub(r.jbatchSince) >= journalLinger)
}

// awaitJournal waits for a journal batch's stored ack, then lets the
// decision loop publish the next batch and carry out its actions.
func (r *Router) awaitJournal(ctx context.Context, fut jetstream.PubAckFuture) {
	select {
	case <-fut.Ok():
	case err := <-fut.Err():
		r.sh.Log.Warn("journal batch not stored", "err", err)
		r.sh.Metrics.GetOrCreateCounter(`switchyard_router_journal_errors_total`).Inc()
	case <-time.After(journalAckWait):
	case <-ctx.Done():
		return
	}
	r.post(ctx, func() { r.journalBusy = false })
}

// publishJournal sends the journal batch, asynchronously: the decision
// loop never waits on the JOURNAL stream itself. It returns the publish's
// future, nil when nothing was sent.
func (r *Router) publishJournal() jetstream.PubAckFuture {
	n := r.jbatch.Len()
	if n == 0 {
		return nil
	}
	m := nats.NewMsg(r.journal)
	m.Data = r.jbatch.Take()
	m.Header.Set(schemas.HeaderContentType, schemas.ContentMsgpack)
	m.Header.Set(routing.HeaderJournalInputs, strconv.Itoa(n))
	fut, err := r.sh.JS.PublishMsgAsync(m)
	if err != nil {
		r.sh.Log.Warn("journal batch not published", "inputs", n, "err", err)
		r.sh.Metrics.GetOrCreateCounter(`switchyard_router_journal_errors_total`).Inc()
		return nil
	}
	r.sh.Metrics.GetOrCreateCounter(`switchyard_router_journal_messages_total`).Inc()
	return fut
}
