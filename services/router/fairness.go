package router

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Fleet-wide fairness for active-active routers (internal/core/queue,
// fair.go): every FairShareInterval a router publishes its fairness report
// on sy.rpc.fair.<router> (core NATS), and applies each peer's as an
// InFairShare input, journaled like any other, so the class weights and
// tenant token shares its queue orders by count the whole fleet's service
// and not only its own. A report holds one entry per class and per tenant
// the queue remembers (it forgets idle ones, queue/forget.go), at most
// about queue.MaxReportBytes: past that it is partial, tenants with work
// queued first, the rest in turn. An idle router with nothing queued
// sends one only when its totals change.

// FairShareInterval is how often an active-active router reports. It
// bounds how far a router's view of its peers' service lags (one interval
// plus a core-NATS hop; queue.PeerStale, five intervals, forgets a silent
// peer's queued work).
const FairShareInterval = 200 * time.Millisecond

// startFairShare subscribes to the peers' reports and starts publishing
// this router's; the returned stop ends both.
func (r *Router) startFairShare(ctx context.Context) (stop func(), err error) {
	if r.cfg.NoFairShare {
		r.sh.Log.Info("fleet-wide fairness off: class weights and tenant shares count this router's placements only")
		return func() {}, nil
	}
	sub, err := r.sh.NC.Subscribe(subjects.FairShareAll, func(m *nats.Msg) {
		from, err := subjects.ParseFairShare(m.Subject)
		if err != nil || from == r.sh.Instance {
			return
		}
		var rep queue.Report
		if err := svc.Decode(m.Header, m.Data, &rep); err != nil {
			r.sh.Log.Warn("undecodable fairness report", "from", from, "err", err)
			return
		}
		r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InFairShare, ID: from, Fair: &rep}, nil) })
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subjects.FairShareAll, err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(FairShareInterval)
		defer t.Stop()
		var last []byte
		for {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
				// The report is read on the decision goroutine, which
				// alone touches the core.
				r.post(fctx, func() { last = r.publishFairShare(last) })
			}
		}
	}()
	return func() { cancel(); <-done; sub.Unsubscribe() }, nil
}

// publishFairShare sends this router's report unless it is the same as
// the last one sent (last) and holds nothing queued: peers need fresh
// word of queued work, not of totals that have not moved. It returns what
// was last sent.
func (r *Router) publishFairShare(last []byte) []byte {
	rep := r.core.FairReport()
	if rep == nil || len(rep.Classes) == 0 {
		return last
	}
	m, err := svc.Encode(subjects.FairShare(r.sh.Instance), schemas.Msgpack, rep, "")
	if err != nil {
		r.sh.Log.Warn("encode fairness report", "err", err)
		return last
	}
	if max := r.sh.NC.MaxPayload(); max > 0 && int64(len(m.Data)) > max {
		// The queue caps its report well under the default 1 MiB; a
		// server configured smaller refuses it, which must be said.
		r.sh.Log.Warn("fairness report larger than the server's max payload: not sent", "bytes", len(m.Data), "max_payload", max)
		r.sh.Metrics.GetOrCreateCounter(`switchyard_router_fair_share_errors_total`).Inc()
		return last
	}
	queued := slices.ContainsFunc(rep.Classes, func(c queue.ClassShare) bool { return c.Queued > 0 })
	if !queued && bytes.Equal(m.Data, last) {
		return last
	}
	if err := r.sh.NC.PublishMsg(m); err != nil {
		r.sh.Log.Warn("publish fairness report", "err", err)
		return last
	}
	r.sh.Metrics.GetOrCreateCounter(`switchyard_router_fair_share_messages_total`).Inc()
	r.sh.Metrics.GetOrCreateGauge(`switchyard_router_fair_held_back_passes`, nil).Set(float64(r.core.HeldBack()))
	return m.Data
}

// pulls reports whether this router pulls admitted work of class (every
// class unless Config.Classes names some).
func (r *Router) pulls(class string) bool {
	return len(r.cfg.Classes) == 0 || slices.Contains(r.cfg.Classes, class)
}

// queueDiscipline is the queue an active-active router runs: class
// weights as shares of service (queue.Discipline.ServiceShares), so they
// hold across the fleet in requests placed; a single router keeps the
// weights of offers it always had.
func queueDiscipline(cfg Config) queue.Discipline {
	return queue.Discipline{ServiceShares: cfg.ActiveActive}
}
