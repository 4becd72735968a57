// Package router is the router service shell. It keeps the fleet view from
// heartbeats and KV events, pulls admitted requests per priority class into
// a bounded look-ahead window (unacked, kept alive with in-progress acks),
// orders them with the deadline-aware queue, places each through the
// placement core, reserves capacity on the chosen worker, and dispatches.
// It delays — never drops — work that cannot be placed yet, and answers
// with an explicit result work that never can be, or whose deadline has
// passed.
//
// All decisions run on one goroutine that owns the core state (fleet,
// queue, placer), fed by channels: the same single-threaded shape the
// simulator and replay use.
package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/fleet"
	"github.com/switchyard-ai/switchyard/internal/placement"
	"github.com/switchyard-ai/switchyard/internal/queue"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// ConsumerName is the durable consumer per class that router replicas share.
func ConsumerName(class string) string { return "router-" + class }

// Config configures a router.
type Config struct {
	// Window is the most admitted requests held unacked per class.
	Window int
	// AckWait bounds how long a dead router holds requests before JetStream
	// hands them to another replica.
	AckWait time.Duration
	// Lease makes replicas elect one active router through a KV lease, so
	// two routers never book the same worker from stale views; a standby
	// keeps its fleet view warm and takes over within LeaseTTL + AckWait.
	Lease         bool
	LeaseTTL      time.Duration
	LeaseReplicas int
	// Tick is how often queued work is retried for placement.
	Tick  time.Duration
	Fleet fleet.Options
	// Policy places requests; nil means the Switchyard placer over Cost.
	Policy placement.Policy
	Cost   placement.CostModel
	// QueueWeights are the per-class shares (queue.DefaultWeights when nil).
	QueueWeights map[string]int
}

// Router is one router replica.
type Router struct {
	sh  *svc.Shell
	cfg Config

	fleet  *fleet.Fleet
	policy placement.Policy
	q      *queue.Queue[*held]
	cost   placement.CostModel

	inbox   chan func()
	pending map[string]*held
}

type held struct {
	adm schemas.Admitted
	msg jetstream.Msg
	// lastProgress is when the look-ahead last extended the message's ack
	// deadline.
	lastProgress time.Time
	// waitingSince is when it first failed to place; for events.
	waitingSince time.Time
	reason       string
}

// New builds a router.
func New(sh *svc.Shell, cfg Config) *Router {
	if cfg.Window <= 0 {
		cfg.Window = 256
	}
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
		pol = placement.New(cfg.Cost, placement.Options{})
	}
	return &Router{
		sh: sh, cfg: cfg,
		fleet:   fleet.New(cfg.Fleet),
		policy:  pol,
		q:       queue.New[*held](cfg.QueueWeights),
		cost:    cfg.Cost,
		inbox:   make(chan func(), 4096),
		pending: map[string]*held{},
	}
}

// Run serves until ctx ends.
func (r *Router) Run(ctx context.Context) error {
	hbSub, err := r.sh.NC.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		var hb schemas.Heartbeat
		if svc.Decode(m.Header, m.Data, &hb) != nil {
			return
		}
		r.post(ctx, func() { r.onHeartbeat(&hb) })
	})
	if err != nil {
		return fmt.Errorf("heartbeat subscription: %w", err)
	}
	defer hbSub.Unsubscribe()
	kvSub, err := r.sh.NC.Subscribe(subjects.KVAll, func(m *nats.Msg) {
		var ev schemas.KVEvent
		if svc.Decode(m.Header, m.Data, &ev) != nil {
			return
		}
		r.post(ctx, func() { r.onKV(ctx, &ev) })
	})
	if err != nil {
		return fmt.Errorf("kv subscription: %w", err)
	}
	defer kvSub.Unsubscribe()
	resSub, err := r.sh.NC.Subscribe(subjects.ResultAll, func(m *nats.Msg) {
		_, id, err := subjects.ParseResult(m.Subject)
		if err != nil {
			return
		}
		r.post(ctx, func() { r.fleet.Unreserve(id) })
	})
	if err != nil {
		return fmt.Errorf("result subscription: %w", err)
	}
	defer resSub.Unsubscribe()
	cancelSub, err := r.sh.NC.Subscribe(subjects.CancelAll, func(m *nats.Msg) {
		var c schemas.Cancel
		if svc.Decode(m.Header, m.Data, &c) != nil {
			return
		}
		r.post(ctx, func() { r.onCancel(ctx, c) })
	})
	if err != nil {
		return fmt.Errorf("cancel subscription: %w", err)
	}
	defer cancelSub.Unsubscribe()

	loopCtx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); r.loop(loopCtx) }()
	defer func() { stopLoop(); <-loopDone }()
	if !r.cfg.Lease {
		return r.consume(ctx)
	}
	kv, err := svc.LeaseKV(ctx, r.sh.JS, r.cfg.LeaseTTL, r.cfg.LeaseReplicas)
	if err != nil {
		return err
	}
	leader := r.sh.Metrics.NewGauge(fmt.Sprintf(`switchyard_router_leader{instance=%q}`, r.sh.Instance), nil)
	return svc.RunAsLeader(ctx, kv, "router", r.sh.Instance, r.cfg.LeaseTTL, func(is bool) {
		if is {
			leader.Set(1)
		} else {
			leader.Set(0)
		}
		r.sh.Log.Info("router leadership", "leader", is)
		r.sh.Emit(schemas.Event{Kind: "leadership", Reason: map[bool]string{true: "acquired", false: "lost"}[is]})
	}, r.consume)
}

// loop is the decision goroutine: it alone touches fleet, queue and held
// requests.
func (r *Router) loop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case fn := <-r.inbox:
			fn()
		case <-tick.C:
			r.placeReady(ctx)
		}
	}
}

// consume pulls admitted work while ctx (leadership) lasts. When it ends,
// whatever is held is forgotten unacked, so JetStream redelivers it to the
// next leader after AckWait: nothing is lost, nothing is placed twice by
// two routers at once.
func (r *Router) consume(ctx context.Context) error {
	var ccs []jetstream.ConsumeContext
	defer func() {
		for _, cc := range ccs {
			cc.Stop()
		}
		select {
		case r.inbox <- r.forgetHeld:
		default:
		}
	}()
	for _, class := range schemas.Priorities {
		cons, err := r.sh.JS.CreateOrUpdateConsumer(ctx, subjects.StreamAdmitted, jetstream.ConsumerConfig{
			Durable:       ConsumerName(class),
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
			var adm schemas.Admitted
			if err := svc.Decode(m.Headers(), m.Data(), &adm); err != nil {
				r.sh.DeadLetter(ctx, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, "undecodable admitted: "+err.Error())
				m.Term()
				return
			}
			r.post(ctx, func() { r.onAdmitted(ctx, adm, m) })
		}, jetstream.PullMaxMessages(min(64, r.cfg.Window)))
		if err != nil {
			return fmt.Errorf("router consume %s: %w", class, err)
		}
		ccs = append(ccs, cc)
	}
	r.sh.Log.Info("router consuming", "policy", r.policy.Name())
	<-ctx.Done()
	return nil
}

// forgetHeld drops held requests without acking them (leadership lost).
func (r *Router) forgetHeld() {
	for id := range r.pending {
		r.q.Remove(id)
		delete(r.pending, id)
	}
}

// post hands work to the decision goroutine.
func (r *Router) post(ctx context.Context, fn func()) {
	select {
	case r.inbox <- fn:
	case <-ctx.Done():
	}
}

func (r *Router) onHeartbeat(hb *schemas.Heartbeat) {
	now := r.sh.Now()
	if r.fleet.ApplyHeartbeat(hb, now) {
		r.requestSnapshot(hb.WorkerID)
	}
}

func (r *Router) onKV(ctx context.Context, ev *schemas.KVEvent) {
	if r.fleet.ApplyKV(ev, r.sh.Now()) {
		r.requestSnapshot(ev.WorkerID)
	}
}

// requestSnapshot asks a worker for its full block set after a gap in its
// KV events; the answer is applied like any KV event.
func (r *Router) requestSnapshot(worker string) {
	inbox := r.sh.NC.NewRespInbox()
	sub, err := r.sh.NC.Subscribe(inbox, func(m *nats.Msg) {
		var ev schemas.KVEvent
		if svc.Decode(m.Header, m.Data, &ev) == nil {
			r.inbox <- func() { r.fleet.ApplyKV(&ev, r.sh.Now()) }
		}
	})
	if err != nil {
		return
	}
	sub.AutoUnsubscribe(1)
	r.sh.NC.PublishRequest(subjects.KVSnapshotRequest(worker), inbox, nil)
	r.sh.Metrics.GetOrCreateCounter(`switchyard_router_kv_snapshots_requested_total`).Inc()
}

func (r *Router) onAdmitted(ctx context.Context, adm schemas.Admitted, m jetstream.Msg) {
	id := adm.Request.ID
	if _, dup := r.pending[id]; dup {
		m.Ack()
		return
	}
	now := r.sh.Now()
	h := &held{adm: adm, msg: m, lastProgress: now}
	r.pending[id] = h
	if err := r.q.Push(r.item(h, now)); err != nil {
		r.answer(ctx, h, schemas.Errf(schemas.CodeInvalidPriority, "priority", "%v", err))
		return
	}
	r.placeReady(ctx)
}

func (r *Router) onCancel(ctx context.Context, c schemas.Cancel) {
	h := r.pending[c.RequestID]
	if h == nil || h.adm.Tenant != c.Tenant {
		return
	}
	r.q.Remove(c.RequestID)
	e := schemas.Errf(schemas.CodeCancelled, "", "cancelled before placement: %s", c.Reason)
	r.answer(ctx, h, e)
}

// placeReady places queued requests in queue order until one cannot be
// placed yet; it also expires requests whose deadline has passed.
func (r *Router) placeReady(ctx context.Context) {
	now := r.sh.Now()
	for _, it := range r.q.Expire(now, nil) {
		if h := it.Payload; h != nil {
			e := schemas.Errf(schemas.CodeDeadlineExceeded, "", "deadline passed after %s in the router queue; not computed", now.Sub(h.adm.SubmittedAt).Round(time.Millisecond))
			r.answer(ctx, h, e)
		}
	}
	var blocked []queue.Item[*held]
	defer func() {
		for _, it := range blocked {
			r.q.Push(it)
		}
	}()
	for {
		it, ok, _ := r.q.PopReady(now, nil)
		if !ok {
			break
		}
		h := it.Payload
		if r.pending[it.ID] != h {
			continue
		}
		req := placement.FromAdmitted(&h.adm, "", time.Time{})
		dec := r.policy.Place(r.fleet, &req, now)
		if !dec.OK() {
			if dec.Unresolvable && r.fleet.Len() > 0 {
				e := schemas.Errf(schemas.CodeUnplaceable, "model", "no GPU in the fleet can serve model %q: %s", h.adm.Model, summarize(dec))
				r.answer(ctx, h, e)
				continue
			}
			if h.waitingSince.IsZero() {
				h.waitingSince = now
				h.reason = summarize(dec)
				r.sh.Emit(schemas.Event{Kind: "delayed", RequestID: it.ID, Tenant: h.adm.Tenant, Reason: h.reason})
			}
			blocked = append(blocked, it)
			// Keep the look-ahead alive without letting one request's
			// ack deadline lapse while it waits.
			if now.Sub(h.lastProgress) > r.cfg.AckWait/3 {
				h.msg.InProgress()
				h.lastProgress = now
			}
			// Lower-ranked work must not jump a blocked higher class only
			// because it fits; but a smaller request of the same class may
			// still fit. Stop after a bounded number of misses.
			if len(blocked) >= 16 {
				break
			}
			continue
		}
		r.dispatch(ctx, h, dec, now)
	}
	for _, h := range r.pending {
		if now.Sub(h.lastProgress) > r.cfg.AckWait/3 {
			h.msg.InProgress()
			h.lastProgress = now
		}
	}
	r.sh.Metrics.GetOrCreateGauge(`switchyard_router_held`, nil).Set(float64(len(r.pending)))
}

func (r *Router) dispatch(ctx context.Context, h *held, dec *placement.Decision, now time.Time) {
	w := dec.Worker
	id := h.adm.Request.ID
	if err := r.fleet.Reserve(w.ID, id, h.adm.PromptTokens, h.adm.Request.MaxTokens, dec.Terms.Blocks, now); err != nil {
		r.sh.Log.Debug("reserve", "id", id, "worker", w.ID, "err", err)
	}
	d := schemas.Dispatch{V: schemas.Version, Admitted: h.adm, WorkerID: w.ID, RouterID: r.sh.Instance, PlacedAt: now,
		PredictedSeconds: dec.Terms.CompletionSeconds, CachedTokens: dec.Terms.CachedTokens}
	m, err := svc.Encode(subjects.Dispatch(w.ID), schemas.Msgpack, d, fmt.Sprintf("%s-a%d", id, h.adm.Attempt))
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = r.sh.JS.PublishMsg(pctx, m)
		cancel()
	}
	if err != nil {
		r.fleet.Unreserve(id)
		r.sh.Log.Warn("dispatch publish failed; will retry", "id", id, "err", err)
		r.q.Push(r.item(h, now))
		return
	}
	h.msg.Ack()
	delete(r.pending, id)
	r.sh.Metrics.GetOrCreateHistogram(`switchyard_router_queue_seconds`).Update(now.Sub(h.adm.SubmittedAt).Seconds())
	r.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_dispatched_total{class=%q,gpu=%q}`, h.adm.Priority, w.GPU)).Inc()
	r.sh.Emit(placementEvent(h, dec))
}

// answer publishes a final error result for a held request and acks it.
func (r *Router) answer(ctx context.Context, h *held, e *schemas.Error) {
	res := svc.ErrorResult(h.adm.Request.ID, h.adm.Tenant, h.adm.Priority, e, r.sh.Now())
	if err := r.sh.PublishResult(ctx, res, svc.ResultFormat(h.adm.ResultFormat)); err != nil {
		if !errors.Is(err, context.Canceled) {
			r.sh.Log.Warn("publish result", "id", res.ID, "err", err)
		}
		return // not acked: redelivered and answered again later
	}
	r.sh.Emit(schemas.Event{Kind: e.Code, RequestID: res.ID, Tenant: res.Tenant, Reason: e.Message})
	h.msg.Ack()
	delete(r.pending, h.adm.Request.ID)
}

func summarize(dec *placement.Decision) string {
	s := ""
	for reason, n := range dec.Counts {
		if n > 0 {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%d %s", n, placement.Reason(reason))
		}
	}
	if s == "" {
		return "no live workers"
	}
	return s
}

// placementEvent explains a placement with every candidate's breakdown.
func placementEvent(h *held, dec *placement.Decision) schemas.Event {
	cands := make([]map[string]any, 0, min(len(dec.Candidates), 8))
	for i, c := range dec.Candidates {
		if i == 8 {
			break
		}
		cands = append(cands, map[string]any{"worker": c.Worker.ID, "gpu": c.Worker.GPU, "terms": c.Terms})
	}
	return schemas.Event{Kind: "placed", RequestID: h.adm.Request.ID, Tenant: h.adm.Tenant, WorkerID: dec.Worker.ID,
		Reason: dec.Policy, Fields: map[string]any{"terms": dec.Terms, "candidates": cands, "rejected": len(dec.Rejections), "class": h.adm.Priority}}
}

// item is h's queue entry. Its minimum service time is the prediction on
// the fastest GPU generation in the fleet, with nothing cached and nothing
// queued: if even that cannot finish by the deadline, nothing can.
func (r *Router) item(h *held, now time.Time) queue.Item[*held] {
	return queue.Item[*held]{ID: h.adm.Request.ID, Priority: h.adm.Priority, Deadline: h.adm.Deadline,
		MinService: r.minService(&h.adm), Enqueued: now, Payload: h}
}

func (r *Router) minService(a *schemas.Admitted) time.Duration {
	if r.cost == nil {
		return 0
	}
	best := math.Inf(1)
	seen := map[string]bool{}
	for _, w := range r.fleet.Workers() {
		if w == nil || seen[w.GPU] {
			continue
		}
		seen[w.GPU] = true
		t := r.cost.PrefillSeconds(w.GPU, a.Model, "bf16", max(1, w.TP), a.PromptTokens, 0) +
			r.cost.DecodeSeconds(w.GPU, a.Model, "bf16", max(1, w.TP), a.Request.MaxTokens, 1, a.PromptTokens)
		best = math.Min(best, t)
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return time.Duration(best * float64(time.Second))
}
