// Package router is the router service shell around internal/core/routing's
// state machine. It turns what arrives from NATS — heartbeats, KV events,
// admitted requests pulled into a bounded look-ahead window (unacked, kept
// alive with in-progress acks), released bookings, cancels, clock ticks —
// into routing Inputs, journals each one on sy.journal.router.<instance>
// so replay can reproduce every decision, applies it, and carries out the
// Actions: publish a dispatch and ack, publish an error result and ack,
// emit an event, ask a worker for a KV snapshot.
//
// One goroutine owns the core; NATS callbacks only post to it. Replicas
// either elect one active router through a KV lease (standbys keep their
// fleet view warm), or, with ActiveActive, all place at once (peers.go):
// they share the per-class durable consumers, so JetStream spreads the
// admitted work among them, each publishes its bookings for the others to
// count, and the survivors adopt a dead router's in-flight dispatches.
package router

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Config configures a router.
type Config struct {
	// Window is the most admitted requests held unacked per class.
	Window int
	// AckWait bounds how long a dead router holds requests before JetStream
	// hands them to another replica.
	AckWait time.Duration
	// Lease elects one active router through a KV lease; a standby takes
	// over within LeaseTTL + AckWait.
	Lease         bool
	LeaseTTL      time.Duration
	LeaseReplicas int
	// Tick is how often queued work is retried for placement.
	Tick  time.Duration
	Fleet fleet.Options
	// Policy places requests; nil means the Switchyard placer over Cost
	// with Placement options.
	Policy    placement.Policy
	Cost      placement.CostModel
	Placement placement.Options
	// Catalog is the catalog Cost and Policy read; a learning one
	// (catalog.Learning) is taught the models heartbeats describe by the
	// core itself, as it applies each heartbeat (routing.Config.Catalog),
	// so replay learns them at the same input.
	Catalog      *catalog.Catalog
	QueueWeights map[string]int
	// Journal records every input for replay (default on).
	NoJournal bool
	// ActiveActive makes this router one of several peers that place at
	// once (peers.go); Lease is then ignored.
	ActiveActive bool
	// PullBatch is how many admitted messages one pull asks for (default
	// min(64, Window)). Peers pulling with different batches take
	// different shares of the admitted work.
	PullBatch int
	// PullRate caps the admitted messages a second this router pulls,
	// over all its classes (0: no cap; pull.go).
	PullRate float64
	// MemberTTL is how long an active-active router's membership lives
	// without a refresh (peers.go; default PeerMemberTTL).
	MemberTTL time.Duration
	// Classes limits the classes this router pulls (default every class):
	// a router may serve some classes only, and the fairness test skews
	// the class mix of what each router holds with it.
	Classes []string
	// NoFairShare keeps an active-active router's class weights and tenant
	// shares to its own placements (fairness.go): for measuring what the
	// shared counters fix.
	NoFairShare bool
}

// Router is one router replica.
type Router struct {
	sh    *svc.Shell
	cfg   Config
	core  *routing.Core
	inbox chan func()
	// progress is when each held request's ack deadline was last extended.
	progress map[string]time.Time
	journal  string
	acks     chan pendingAck
	// jbatch holds the journal entries of inputs applied since the last
	// flush, and effects their actions: a batch of inputs is journaled in
	// one stored message, and its actions are carried out only after that
	// message is on its way, so every dispatch, result and event follows
	// the record of the input that caused it.
	jbatch        *routing.Journal
	effects, done []effect
	// journalBusy is set while a journal batch awaits its stored ack. The
	// next batch, and its actions, wait for that ack (Nagle's way): a quiet
	// router journals and acts at once, a busy one journals many inputs
	// per stored message — the inbox alone rarely holds more than two or
	// three, since the loop outpaces their arrival — for at most one
	// JOURNAL round trip of delay.
	journalBusy bool
	// jbatchSince is when the oldest entry in jbatch was applied. A batch
	// whose inputs decided nothing (heartbeats, KV events, peer bookings,
	// requests queued, releases that freed nothing waiting) does not need
	// to be stored before anything else happens, so it waits up to
	// journalLinger for company: a lightly loaded router had stored a
	// journal message for nearly every input, every peer's booking and
	// release and every heartbeat among them.
	jbatchSince time.Time
	// peerOut gathers the bookings of a flush's dispatches, published in
	// one core-NATS message to the peer routers (ActiveActive) and the
	// controller (always), and with peers the releases of results.
	peerOut []routing.PeerBooking
	// peerIn gathers the peers' bookings and releases as they arrive, under
	// peerMu, until the decision loop takes them all as one InPeerBooking
	// input: one journal entry and one core step however many messages
	// came in since.
	peerMu sync.Mutex
	peerIn []routing.PeerBooking
	// mine holds the ids this active-active router dispatched or adopted
	// and has no result for: only their results are its to apply. A
	// peer's results would cost every router a decode, a journal entry and
	// a core step per request for nothing but releasing a peer booking a
	// heartbeat absorbs within Settle anyway.
	mine sync.Map
	// queueDepth (by schemas.Priorities' order) and dispatched are metric
	// handles looked up once: flush and dispatch run per request, and
	// naming a metric there cost a fmt.Sprintf and a locked map lookup
	// each time.
	queueDepth []*metrics.Gauge
	dispatched map[[2]string]*metrics.Counter
	// fairState are the gauges of the queue's fairness state
	// (routing.Core.FairState): tenants, peers, peers' tenant totals.
	fairState [3]*metrics.Gauge
	// pace caps the pulls (Config.PullRate; nil: no cap).
	pace *pacer
	// logs bounds the per-request log lines (logs.go).
	logs logLimiter
	// fails tracks the error results published off the decision loop, at
	// most maxFailPublishes at once (failSlots).
	fails     sync.WaitGroup
	failSlots chan struct{}
	// queued is the queue depth per model last reported to the
	// controller (queued.go).
	queued queuedReport
}

// New builds a router.
func New(sh *svc.Shell, cfg Config) *Router {
	if cfg.Window <= 0 {
		cfg.Window = 256
	}
	peerDefaults(&cfg)
	if cfg.AckWait <= 0 {
		// Short, so a dead router's held requests come back fast; the
		// look-ahead extends it with in-progress acks while they wait.
		cfg.AckWait = 4 * time.Second
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 25 * time.Millisecond
	}
	pol := cfg.Policy
	if pol == nil {
		pol = placement.New(cfg.Cost, cfg.Placement)
	}
	core := routing.New(routing.Config{Policy: pol, Cost: cfg.Cost, Fleet: cfg.Fleet, QueueWeights: cfg.QueueWeights, Queue: queueDiscipline(cfg),
		Catalog: cfg.Catalog})
	svc.StartAtZero(sh.Metrics, `switchyard_retries_total{allowed="true"}`, `switchyard_retries_total{allowed="false"}`,
		`switchyard_breaker_transitions_total{to="open"}`, `switchyard_breaker_transitions_total{to="half_open"}`, `switchyard_breaker_transitions_total{to="closed"}`)
	r := &Router{sh: sh, cfg: cfg, core: core, inbox: make(chan func(), 8192), progress: map[string]time.Time{},
		journal: subjects.Journal("router", sh.Instance), acks: make(chan pendingAck, 4096), jbatch: routing.NewJournal(),
		dispatched: map[[2]string]*metrics.Counter{}, pace: newPacer(cfg.PullRate), failSlots: make(chan struct{}, maxFailPublishes)}
	for _, c := range schemas.Priorities {
		r.queueDepth = append(r.queueDepth, sh.Metrics.GetOrCreateGauge(fmt.Sprintf(`switchyard_queue_depth{class=%q}`, c), nil))
	}
	for i, name := range []string{`switchyard_router_fair_tenants`, `switchyard_router_fair_peers`, `switchyard_router_fair_peer_tenants`} {
		r.fairState[i] = sh.Metrics.GetOrCreateGauge(name, nil)
	}
	return r
}

// Run serves until ctx ends.
func (r *Router) Run(ctx context.Context) error {
	// Events held for a batch go out before the connection closes.
	defer r.sh.FlushEvents()
	subs := []struct {
		subject string
		handle  func(*nats.Msg)
	}{
		{subjects.HeartbeatAll, func(m *nats.Msg) {
			var hb schemas.Heartbeat
			if svc.Decode(m.Header, m.Data, &hb) == nil {
				r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InHeartbeat, Heartbeat: &hb}, nil) })
			}
		}},
		{subjects.KVAll, func(m *nats.Msg) {
			var ev schemas.KVEvent
			if svc.Decode(m.Header, m.Data, &ev) == nil {
				r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InKV, KV: &ev}, nil) })
			}
		}},
		{subjects.ResultAll, func(m *nats.Msg) {
			_, id, err := subjects.ParseResult(m.Subject)
			if err != nil {
				return
			}
			if r.cfg.ActiveActive {
				if _, ok := r.mine.LoadAndDelete(id); !ok {
					return
				}
			}
			var res schemas.Result
			var sum *routing.ResultSummary
			if svc.Decode(m.Header, m.Data, &res) == nil {
				sum = routing.SummarizeResult(&res)
			}
			r.post(ctx, func() {
				r.apply(ctx, routing.Input{Kind: routing.InReleased, ID: id, Result: sum}, nil)
				if r.cfg.ActiveActive {
					// The peers counted this request's booking; the release
					// rides with the next flush's bookings.
					r.peerOut = append(r.peerOut, routing.PeerBooking{ID: id, Released: true})
				}
			})
		}},
		{control.ReplicasAll, func(m *nats.Msg) {
			// The controller's pools: a request for a model no live worker
			// serves is held while one of them warms a replica (warmup.go).
			var p control.ReplicasMsg
			if svc.Decode(m.Header, m.Data, &p) == nil && p.Pool != "" {
				spec := &routing.PoolSpec{Key: p.Pool, GPU: p.GPU, Model: p.Model, Dtype: p.Dtype, TP: p.TP, Max: p.Max,
					Desired: p.Desired, ColdStartSeconds: p.ColdStartSeconds}
				r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InPool, Pool: spec}, nil) })
			}
		}},
		{subjects.CancelAll, func(m *nats.Msg) {
			var c schemas.Cancel
			if svc.Decode(m.Header, m.Data, &c) == nil {
				r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InCancel, Cancel: &c}, nil) })
			}
		}},
	}
	for _, s := range subs {
		sub, err := r.sh.NC.Subscribe(s.subject, s.handle)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", s.subject, err)
		}
		defer sub.Unsubscribe()
	}
	loopCtx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); r.loop(loopCtx) }()
	go r.ackDispatches(loopCtx)
	defer func() { stopLoop(); <-loopDone; r.fails.Wait() }()
	if r.cfg.ActiveActive {
		return r.runPeer(ctx)
	}
	if !r.cfg.Lease {
		return r.consume(ctx)
	}
	kv, err := svc.LeaseKV(ctx, r.sh.JS, r.cfg.LeaseTTL, r.cfg.LeaseReplicas)
	if err != nil {
		return err
	}
	leader := r.sh.Metrics.NewGauge(fmt.Sprintf(`switchyard_router_leader{instance=%q}`, r.sh.Instance), nil)
	return svc.RunAsLeader(ctx, kv, "router", r.sh.Instance, r.cfg.LeaseTTL, func(is bool) {
		v, what := 0.0, "lost"
		if is {
			v, what = 1, "acquired"
		}
		leader.Set(v)
		r.sh.Log.Info("router leadership", "leader", is)
		r.sh.Emit(schemas.Event{Kind: "leadership", Reason: what})
	}, r.consume)
}

// loop is the decision goroutine: it alone touches the core.
func (r *Router) loop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	idle := 0
	for {
		select {
		case <-ctx.Done():
			// Inputs lingering without actions are still recorded.
			r.publishJournal()
			// What it held goes back to the stream for another router,
			// which will report it.
			r.reportQueued(r.sh.Now(), true)
			return
		case fn := <-r.inbox:
			fn()
			// Whatever else is already waiting joins the same batch.
		drain:
			for n := 1; n < maxBatchInputs; n++ {
				select {
				case fn := <-r.inbox:
					fn()
				default:
					break drain
				}
			}
			r.flush(ctx)
		case <-tick.C:
			// Queued work is retried every tick; otherwise the clock still
			// advances twice a second for breakers and overdue requests.
			idle++
			if r.core.Queued() > 0 || r.core.Warming() || idle*int(r.cfg.Tick) >= int(500*time.Millisecond) {
				idle = 0
				r.apply(ctx, routing.Input{Kind: routing.InTick}, nil)
			}
			r.flush(ctx)
			r.keepAlive()
			r.reportQueued(r.sh.Now(), false)
		}
	}
}

// consume pulls admitted work while ctx (leadership) lasts. When it ends,
// whatever is held is forgotten unacked, so JetStream redelivers it to the
// next leader after AckWait: nothing is lost, nothing is placed twice.
func (r *Router) consume(ctx context.Context) error {
	var ccs []jetstream.ConsumeContext
	defer func() {
		for _, cc := range ccs {
			cc.Stop()
		}
		select {
		case r.inbox <- func() { r.apply(ctx, routing.Input{Kind: routing.InForget}, nil) }:
		default:
		}
	}()
	for _, class := range schemas.Priorities {
		if !r.pulls(class) {
			continue
		}
		cons, err := r.sh.JS.CreateOrUpdateConsumer(ctx, subjects.StreamAdmitted, jetstream.ConsumerConfig{
			Durable:       subjects.RouterConsumer(class),
			Description:   "router replicas share this consumer for class " + class,
			FilterSubject: subjects.AdmittedClass(class),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       r.cfg.AckWait,
			MaxAckPending: r.cfg.Window,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("router consumer %s: %w", class, err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			r.pace.wait(ctx)
			var adm schemas.Admitted
			if err := svc.Decode(m.Headers(), m.Data(), &adm); err != nil {
				r.sh.DeadLetter(ctx, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, "undecodable admitted: "+err.Error())
				m.Term()
				return
			}
			r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InAdmitted, Admitted: &adm}, m) })
		}, jetstream.PullMaxMessages(r.pullBatch()), svc.PullExpiry)
		if err != nil {
			return fmt.Errorf("router consume %s: %w", class, err)
		}
		ccs = append(ccs, cc)
	}
	hc, err := r.consumeHandoffs(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ccs = append(ccs, hc)
	r.sh.Log.Info("router consuming", "policy", r.core.Policy(), "active_active", r.cfg.ActiveActive)
	if r.cfg.ActiveActive {
		// Peers adopt by membership (peers.go), not at start.
		<-ctx.Done()
		return nil
	}
	if adopted, err := r.inflightDispatches(ctx, nil); err != nil {
		r.sh.Log.Warn("reading in-flight dispatches", "err", err)
	} else if len(adopted) > 0 {
		r.sh.Log.Info("adopting in-flight dispatches", "count", len(adopted))
		r.post(ctx, func() { r.apply(ctx, routing.Input{Kind: routing.InAdopt, Adopted: adopted}, nil) })
	}
	<-ctx.Done()
	return nil
}

// inflightDispatches reads back, from every worker's dispatch consumer, the
// dispatches delivered but not acked that have no final result: the work an
// earlier leader placed. Without them a new leader could not re-place the
// work of a worker that died before it took over. keep, when set, selects
// which of them to return (a peer router adopts only its share of a dead
// peer's).
func (r *Router) inflightDispatches(ctx context.Context, keep func(*schemas.Dispatch) bool) ([]schemas.Dispatch, error) {
	st, err := r.sh.JS.Stream(ctx, subjects.StreamDispatch)
	if err != nil {
		return nil, err
	}
	var out []schemas.Dispatch
	lister := st.ListConsumers(ctx)
	for info := range lister.Info() {
		if !strings.HasPrefix(info.Name, subjects.WorkerConsumerPrefix) || info.NumAckPending == 0 {
			continue
		}
		first, last := info.AckFloor.Stream+1, info.Delivered.Stream
		if last < first {
			continue
		}
		cons, err := r.sh.JS.OrderedConsumer(ctx, subjects.StreamDispatch, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{info.Config.FilterSubject}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: first})
		if err != nil {
			return out, err
		}
		out = append(out, readOrphans(cons, last, keep)...)
	}
	return r.unfinished(ctx, out), lister.Err()
}

// post hands work to the decision goroutine.
func (r *Router) post(ctx context.Context, fn func()) {
	select {
	case r.inbox <- fn:
	case <-ctx.Done():
	}
}

// apply stamps, journals and applies one input, and queues its actions
// for flush. Journaling happens first, in order, from this one goroutine.
func (r *Router) apply(ctx context.Context, in routing.Input, handle jetstream.Msg) {
	in.At = r.sh.Now()
	if !r.cfg.NoJournal {
		var seq uint64
		if handle != nil && in.Kind == routing.InAdmitted {
			if md, err := handle.Metadata(); err == nil {
				seq = md.Sequence.Stream
			}
		}
		if err := r.jbatch.Add(in, seq); err != nil {
			r.sh.Log.Warn("journal", "err", err)
		} else if r.jbatch.Len() == 1 {
			r.jbatchSince = in.At
		}
		if r.jbatch.Size() >= maxBatchBytes {
			r.publishJournal()
		}
	}
	var h any
	if handle != nil {
		h = handle
		switch {
		case in.Admitted != nil:
			r.progress[in.Admitted.Request.ID] = in.At
		case in.Handoff != nil:
			r.progress[in.Handoff.RequestID] = in.At
		}
	}
	if in.Kind == routing.InForget {
		clear(r.progress)
	}
	start := time.Now()
	acts := r.core.Apply(in, h)
	if in.Kind == routing.InAdmitted || in.Kind == routing.InTick {
		r.sh.Metrics.GetOrCreatePrometheusHistogramExt(`switchyard_placement_seconds`, placementBuckets).Update(time.Since(start).Seconds())
	}
	for _, a := range acts {
		r.effects = append(r.effects, effect{in: in, act: a})
	}
	if in.Kind == routing.InHandoff && handle != nil {
		r.settleHandoff(in, handle, acts)
	}
}
