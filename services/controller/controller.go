// Package controller is the control-loop service shell: it gathers worker
// heartbeats (sy.hb.>), the router's queue depth per class (JetStream
// consumer info of the router-<class> consumers) and results (SLO
// attainment per class and the request mix) and the routers' held demand
// for cold starts (sy.event.router.held_demand, held.go) and queue depth
// per model (sy.event.router.queued_by_model, queued.go), runs internal/core/control every
// interval and publishes its decisions on sy.ctl.> — per-worker spec
// decoding, budgets, warmth and role, model switches (sy.ctl.switch.<worker>,
// GPUs that change model when control.Config.ShiftModels is set), per-pool
// desired replicas, per-class shedding margins — each change also an event
// with its reason. It exports
// switchyard_desired_replicas{pool} for KEDA or an HPA. Its Scaler acts on
// desired replicas inside one process (switchyard up / demo). All decisions
// are internal/core/control's; this package moves bytes.
package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Config configures the service.
type Config struct {
	Control control.Config
	// StaleAfter drops a worker whose last heartbeat is older (default 5 s).
	StaleAfter time.Duration
	// SLOWindow is the window of results attainment is measured over
	// (default 60 s).
	SLOWindow time.Duration
	// Starting, when set, reports replicas started but not yet
	// heartbeating per pool key (the in-process Scaler's Starting).
	Starting func() map[string]int
	// Planner names what sizes the pools: "" or "switchyard" for
	// Switchyard's controller, or a baseline (baselines.PlannerNames:
	// Dynamo's planner, llm-d's WVA, KEDA's HPA) — the same planners
	// `sim --autoscale --planner` compares, run live.
	Planner string
}

// Controller is the running service.
type Controller struct {
	sh  *svc.Shell
	cfg Config
	ctl control.Planner
	// own is Switchyard's controller core, which ctl is unless a baseline
	// planner sizes the pools; it says which pools GPUs that change model
	// size (ShiftPools).
	own *control.Controller

	mu      sync.Mutex
	hbs     map[string]hbSeen
	recent  control.Recent
	desired map[string]int
	// unserved counts results that never reached a worker for lack of
	// capacity (control.Unserved), for Inputs.Unserved.
	unserved uint64
	// held is the routers' held demand for cold starts (held.go).
	held heldBook
	// queued is the routers' queue depth per model (queued.go), and
	// poolModel names a model as the pools do.
	queued    queuedBook
	poolModel func(string) string
	// booked is the routers' dispatches no heartbeat counts yet
	// (booked.go).
	booked *bookedBook
}

type hbSeen struct {
	hb schemas.Heartbeat
	at time.Time
}

// New builds the service.
func New(sh *svc.Shell, cfg Config) (*Controller, error) {
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 5 * time.Second
	}
	if cfg.SLOWindow <= 0 {
		cfg.SLOWindow = time.Minute
	}
	own, err := control.New(cfg.Control)
	if err != nil {
		return nil, err
	}
	cfg.Control = own.Config()
	var ctl control.Planner = own
	if cfg.Planner != "" && cfg.Planner != control.PlannerSwitchyard {
		if ctl, err = baselines.NewPlanner(cfg.Planner, cfg.Control); err != nil {
			return nil, err
		}
	}
	if cfg.Control.ShiftModels && ctl != control.Planner(own) {
		return nil, fmt.Errorf("controller: shift models: planner %s does not move GPUs between models; only %s does", cfg.Planner, control.PlannerSwitchyard)
	}
	c := &Controller{sh: sh, cfg: cfg, ctl: ctl, own: own, hbs: map[string]hbSeen{}, desired: map[string]int{}, recent: control.Recent{Window: cfg.SLOWindow},
		poolModel: poolModels(cfg.Control.Pools, cfg.Control.Catalog), booked: newBookedBook()}
	for _, p := range cfg.Control.Pools {
		key := p.Key()
		c.desired[key] = -1
		sh.Metrics.NewGauge(fmt.Sprintf(`switchyard_desired_replicas{pool=%q}`, key), func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			return float64(max(c.desired[key], 0))
		})
		sh.Metrics.NewGauge(fmt.Sprintf(`switchyard_controller_held_for_warmup{pool=%q}`, key), func() float64 {
			pools, _ := c.held.demand(c.sh.Now())
			return float64(pools[key].Requests)
		})
		svc.StartAtZero(sh.Metrics, fmt.Sprintf(`switchyard_scale_ups_total{pool=%q}`, key))
	}
	sh.Metrics.NewGauge(`switchyard_controller_booked_requests`, func() float64 { return float64(c.booked.total()) })
	return c, nil
}

// ShiftPools is the pools sized by GPUs that change model
// (control.Config.ShiftModels): the controller moves workers between them
// with switch commands, so a scaler must start and release none for them.
func (c *Controller) ShiftPools() map[string]bool {
	out := map[string]bool{}
	for _, p := range c.cfg.Control.Pools {
		if c.own.Shifting(p.Key()) {
			out[p.Key()] = true
		}
	}
	return out
}

// Desired returns the last desired replicas per pool key.
func (c *Controller) Desired() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.desired))
	for k, v := range c.desired {
		out[k] = v
	}
	return out
}

// Run decides every interval until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	// Events are gathered into batches while one awaits its ack: send the
	// last batch before the controller's connection goes.
	defer c.sh.FlushEvents()
	hbSub, err := c.sh.NC.Subscribe(subjects.HeartbeatAll, c.onHeartbeat)
	if err != nil {
		return fmt.Errorf("controller heartbeats: %w", err)
	}
	defer hbSub.Unsubscribe()
	resSub, err := c.sh.NC.Subscribe(subjects.ResultAll, c.onResult)
	if err != nil {
		return fmt.Errorf("controller results: %w", err)
	}
	defer resSub.Unsubscribe()
	stopHeld, err := c.held.follow(c.sh.NC, c.sh.Now)
	if err != nil {
		return err
	}
	defer stopHeld()
	stopQueued, err := c.queued.follow(c.sh.NC, c.sh.Now)
	if err != nil {
		return err
	}
	defer stopQueued()
	stopBooked, err := c.booked.follow(c.sh.NC, c.sh.Now)
	if err != nil {
		return err
	}
	defer stopBooked()
	c.sh.Log.Info("controller starting", "interval", c.cfg.Control.Interval, "pools", len(c.cfg.Control.Pools))
	t := time.NewTicker(c.cfg.Control.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Step(ctx)
		}
	}
}

func (c *Controller) onHeartbeat(m *nats.Msg) {
	var hb schemas.Heartbeat
	if err := svc.Decode(m.Header, m.Data, &hb); err != nil || hb.WorkerID == "" {
		return
	}
	now := c.sh.Now()
	c.mu.Lock()
	c.hbs[hb.WorkerID] = hbSeen{hb: hb, at: now}
	c.mu.Unlock()
	c.booked.heartbeat(&hb, now)
}

func (c *Controller) onResult(m *nats.Msg) {
	var r schemas.Result
	if err := svc.Decode(m.Header, m.Data, &r); err != nil {
		return
	}
	c.booked.release(r.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	// Shed and rejected requests count as misses: the tenant did not get
	// an answer in time.
	ok := r.Status == schemas.StatusOK
	// The cached prompt tokens are the prefill's: what a prefill pool's
	// sizing leaves out of the tokens it must compute.
	c.recent.ObserveCached(c.sh.Now(), r.Priority, ok && r.SLOMet, ok, r.Usage.PromptTokens, r.Usage.CompletionTokens, r.Usage.CachedTokens)
	code := ""
	if r.Error != nil {
		code = r.Error.Code
	}
	if control.Unserved(r.Status, code, r.WorkerID) {
		c.unserved++
	}
}

// Step gathers the inputs, decides once and publishes the decision.
func (c *Controller) Step(ctx context.Context) control.Decision {
	in := c.inputs(ctx)
	d := c.ctl.Decide(in)
	c.mu.Lock()
	for _, r := range d.Replicas {
		c.desired[r.Pool] = r.Desired
	}
	c.mu.Unlock()
	c.publish(d)
	return d
}

func (c *Controller) inputs(ctx context.Context) control.Inputs {
	now := c.sh.Now()
	in := control.Inputs{Now: now, Queued: map[string]int{}, SLO: map[string]control.Attainment{}}
	c.mu.Lock()
	for id, s := range c.hbs {
		if now.Sub(s.at) > c.cfg.StaleAfter {
			delete(c.hbs, id)
			c.booked.forget(id)
			continue
		}
		in.Workers = append(in.Workers, s.hb)
	}
	in.SLO = c.recent.SLO(now, in.SLO)
	in.Mix = c.recent.Mix()
	in.Unserved = c.unserved
	c.mu.Unlock()
	in.Booked = c.booked.byWorker()
	if c.cfg.Starting != nil {
		in.Starting = c.cfg.Starting()
	}
	// backlog is every class's, for scaling the routers' queue depth per
	// model to (queued.go); -1 when a class's could not be read. A class
	// no router has a consumer for yet has none.
	backlog := 0
	for _, class := range schemas.Priorities {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := svc.RouterBacklog(qctx, c.sh.JS, class)
		switch {
		case err == nil:
			in.Queued[class] = n
			if backlog >= 0 {
				backlog += n
			}
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			backlog = -1
		}
		cancel()
	}
	in.QueuedByModel = c.queued.byModel(now, backlog, c.poolModel)
	// Requests held for a cold start are still unacked on the router
	// consumers: they are the held pools' demand, not the shared queue's.
	var heldByClass map[string]int
	in.Held, heldByClass = c.held.demand(now)
	for class, n := range heldByClass {
		in.Queued[class] = max(0, in.Queued[class]-n)
	}
	return in
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func (c *Controller) publish(d control.Decision) {
	send := func(subject string, v any) {
		m, err := svc.Encode(subject, schemas.Msgpack, v, "")
		if err != nil {
			c.sh.Log.Error("encode control", "subject", subject, "err", err)
			return
		}
		if err := c.sh.NC.PublishMsg(m); err != nil {
			c.sh.Log.Warn("publish control", "subject", subject, "err", err)
		}
	}
	// Desired replicas go out every interval: a scaler that (re)starts
	// converges within one interval.
	for _, r := range d.Replicas {
		send(control.ReplicasSubject(r.Pool), control.ReplicasMsg{Pool: r.Pool, GPU: r.GPU, Model: r.Model, Role: r.Role, Dtype: r.Dtype, TP: r.TP, Max: r.Max,
			ColdStartSeconds: r.ColdStartSeconds, Desired: r.Desired, Current: r.Current, Held: r.Held, Reason: r.Reason, At: d.At})
	}
	for _, s := range d.Spec {
		send(control.SpecSubject(s.Worker), control.SpecMsg{Worker: s.Worker, On: s.On, Gain: s.Gain, Reason: s.Reason, At: d.At})
	}
	for _, b := range d.Budgets {
		send(control.BudgetSubject(b.Worker), control.BudgetMsg{Worker: b.Worker, MaxBatch: b.MaxBatch, TokenBudget: b.TokenBudget, Reason: b.Reason, At: d.At})
	}
	for _, w := range d.Warmth {
		send(control.WarmthSubject(w.Worker), control.WarmthMsg{Worker: w.Worker, Model: w.Model, State: w.State, Reason: w.Reason, At: d.At})
	}
	for _, r := range d.Roles {
		send(control.RoleSubject(r.Worker), control.RoleMsg{Worker: r.Worker, Role: r.Role, Reason: r.Reason, At: d.At})
	}
	for _, s := range d.Switches {
		send(control.SwitchSubject(s.Worker), control.SwitchMsg{Worker: s.Worker, GPU: s.GPU, From: s.From, To: s.To,
			FromTier: s.FromTier, Seconds: s.Seconds, Reason: s.Reason, At: d.At})
	}
	for _, s := range d.Shed {
		send(control.ShedSubject(s.Class), control.ShedMsg{Class: s.Class, Margin: s.Margin, Reason: s.Reason, At: d.At})
	}
	for _, ch := range d.Changes {
		ev := schemas.Event{Kind: ch.Kind, Reason: ch.Reason, At: d.At,
			Fields: map[string]any{"target": ch.Target, "from": ch.From, "to": ch.To}}
		if ch.Kind == control.KindSpec || ch.Kind == control.KindBudget || ch.Kind == control.KindWarmth || ch.Kind == control.KindRole || ch.Kind == control.KindSwitch {
			ev.WorkerID = ch.Target
		}
		c.sh.Emit(ev)
		c.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_control_changes_total{kind=%q}`, ch.Kind)).Inc()
		if ch.Kind == control.KindReplicas && atoi(ch.To) > atoi(ch.From) {
			c.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_scale_ups_total{pool=%q}`, ch.Target)).Inc()
		}
		c.sh.Log.Info("control change", "kind", ch.Kind, "target", ch.Target, "from", ch.From, "to", ch.To, "reason", ch.Reason)
	}
}
