package sim

// Autoscaling in virtual time: internal/core/control's Controller runs every
// Interval on the inputs the live controller (services/controller) gathers
// — the workers' latest heartbeats, the router queue's depth per class,
// SLO attainment per class over the last SLOWindow and the request mix —
// and its decisions act on the simulated fleet the way the live worker and
// the local scaler (services/controller Scaler) act on them: spec
// decoding, budgets and weight warmth on the engines, shedding margins on
// the admitter's shedder, desired replicas by starting and draining
// workers.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/control"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Autoscale turns the control loop on for a run (Config.Autoscale).
type Autoscale struct {
	// Control configures the controller. With no Pools, each GPU entry of
	// the fleet becomes one pool of Config.Model bounded by [Min, Max]; the
	// fleet's counts are the starting replicas.
	Control control.Config
	// Min and Max bound the derived pools (defaults 1 and 64).
	Min, Max int
	// SLOWindow is the window attainment is measured over (default 60 s,
	// the live controller's).
	SLOWindow time.Duration
	// Warmth applies the controller's weight-warmth decisions (sleep,
	// wake, unload). Off by default: in a pool of one model a sleeping
	// replica is still paid for — the scaler is the cost lever — and each
	// request placed on it waits for the wake. The controller now sleeps
	// replicas only in a pool held at its floor, so on the Azure code trace
	// turning this on changes nothing (docs/benchmarks.md "Control loop").
	// A wake starts the load at once (engine.Wake: the host tier's time,
	// about a second); a sleeping replica stays provisioned, its GPU
	// counted in GPU-hours. Control.SleepOnRelease turns it on.
	Warmth bool
	// Planner names the planner that sizes the pools: "" or "switchyard"
	// for internal/core/control's Controller, or a baseline of
	// baselines.PlannerNames (Dynamo's planner in throughput or load mode,
	// llm-d's Workload Variant Autoscaler, the HPA on KEDA's JetStream lag).
	// Every planner runs on the same fleet, started and drained the same
	// way, with the same cold-start costs, and with Control.SleepOnRelease
	// the same sleeping tier: a baseline's scale-down sleeps and its rise
	// wakes (control.WithSleepTier, applied by baselines.NewPlanner).
	Planner string
	// ShiftModels lets GPUs change model (control.Config.ShiftModels):
	// with no Pools, every GPU type of the fleet × every model it serves
	// becomes a pool, each type's GPUs their shared inventory, and the
	// controller moves GPUs between models instead of starting and
	// releasing them (shift.go). ParkedTier is where the fleet's other
	// models sit on each worker at the start (default host: each worker
	// started every model once and put all but one to sleep, as a vLLM
	// sleep-mode deployment does; page_cache or disk for a fleet that has
	// only the files).
	ShiftModels bool
	ParkedTier  string
	// OnDecision, when set, is called with every decision and the virtual
	// time since the first arrival: the decision log behind a run's
	// figures (why the fleet grew or held), for diagnosis.
	OnDecision func(since time.Duration, d control.Decision)
}

// AutoscaleStats is what the control loop did in one run.
type AutoscaleStats struct {
	Decisions int `json:"decisions"`
	// Started and Retired count workers added and drained to exit.
	Started int `json:"started"`
	Retired int `json:"retired"`
	// Replicas: provisioned replicas (serving, starting or draining);
	// MeanReplicas is time-weighted over the makespan.
	MinReplicas  int     `json:"min_replicas"`
	MaxReplicas  int     `json:"max_replicas"`
	MeanReplicas float64 `json:"mean_replicas"`
	// Changes counts decided changes by kind (replicas, spec, budget,
	// warmth, shed); ScaleUps the replica changes that raised a pool.
	Changes  map[string]int `json:"changes"`
	ScaleUps int            `json:"scale_ups"`
	// Sleeps and Wakes count warmth commands carried out: replicas put to
	// sleep (weights to host memory, the GPU still held and counted) and
	// woken. SleepingReplicaHours is the replica-hours spent asleep, part
	// of GPU-hours, not on top of them.
	Sleeps               int     `json:"sleeps,omitempty"`
	Wakes                int     `json:"wakes,omitempty"`
	SleepingReplicaHours float64 `json:"sleeping_replica_hours,omitempty"`
	// Switches counts GPUs moved from one model to another (ShiftModels),
	// WarmSwitches those whose new model woke from host memory;
	// SwitchSeconds is their total time from order to serving (drain and
	// load).
	Switches      int     `json:"switches,omitempty"`
	WarmSwitches  int     `json:"warm_switches,omitempty"`
	SwitchSeconds float64 `json:"switch_s,omitempty"`
	// Timeline is the provisioned replicas after every change in that
	// figure, for charts.
	Timeline []ReplicaPoint `json:"timeline"`
}

// ReplicaPoint is the provisioned replica count from a virtual instant on.
type ReplicaPoint struct {
	AtSeconds float64 `json:"t_s"`
	Replicas  int     `json:"replicas"`
	Desired   int     `json:"desired"`
}

// Control-loop events run after everything else at an instant, so a
// decision sees the state that instant's steps and heartbeats left.
const (
	evReady   = evRetry + 1 // a started worker has loaded its weights
	evControl = evRetry + 2 // one controller decision
)

type pool struct {
	control.Pool
	rep perf.Replica
	// link is the KV link the pool's workers name (Config.linkOf).
	link string
}

// starting is a worker provisioned but not yet serving: it loads its
// weights (process start, weight read, compile and graph capture) before
// it registers, as a vLLM server does before it accepts requests, and is
// paid for from the moment it was started.
type starting struct {
	pool    *pool
	id      string
	startAt int64
	done    bool
}

type autoscaler struct {
	cfg Autoscale
	// unserved counts requests turned away without a worker (Inputs.Unserved).
	unserved uint64
	ctl      control.Planner
	interval int64
	pools    []*pool
	byKey    map[string]*pool
	poolOf   []*pool // by worker index
	startAt  []int64 // by worker index: when it was provisioned
	endAt    []int64 // by worker index: retired at, -1 while provisioned
	drainAt  []int64 // by worker index: draining since, -1 if not
	starts   []starting
	recent   control.Recent
	margins  map[string]float64
	// nextID numbers started workers per GPU, across the pools of that
	// GPU (a prefill and a decode pool of h100s, or two models), as
	// buildFleet numbers the initial fleet, so no two share an id.
	nextID   map[string]int
	stats    AutoscaleStats
	first    int64
	lastRep  int
	lastAt   int64
	repSecs  float64 // replica-seconds provisioned, for the mean
	lastDes  int
	workers  []schemas.Heartbeat
	queued   map[string]int
	slo      map[string]control.Attainment
	starting map[string]int
	booked   map[string]int // by worker ID: bookings no heartbeat has absorbed (control.Inputs.Booked)
	// shelves and switches are, by worker index, the models parked on a
	// worker whose GPU changes model and its switch under way (shift.go);
	// byModel the router queue per model.
	shelves  []*engine.Shelf
	switches []*switchOrder
	byModel  map[string]int
}

// startAutoscale builds the controller over the fleet buildFleet made.
func (r *runner) startAutoscale() error {
	if err := r.newAutoscaler(); err != nil {
		return err
	}
	return r.as.adopt(r)
}

func (r *runner) newAutoscaler() error {
	as := *r.cfg.Autoscale
	if as.Min < 0 {
		as.Min = 0
	}
	if as.Max <= 0 {
		as.Max = 64
	}
	if as.SLOWindow <= 0 {
		as.SLOWindow = time.Minute
	}
	cc := as.Control
	if cc.SleepOnRelease {
		// Sleeping instead of releasing needs the sleep carried out.
		as.Warmth = true
	}
	if cc.Catalog == nil {
		cc.Catalog = r.cfg.Catalog
	}
	if len(cc.Pools) == 0 && as.ShiftModels {
		if err := r.shiftPools(&cc); err != nil {
			return err
		}
	}
	if len(cc.Pools) == 0 {
		for _, g := range r.cfg.GPUs {
			// A fleet entry's own model (a multi-model fleet pins each
			// model to its pools), else the run's.
			m := g.Model
			if m == "" {
				m = r.cfg.Model
			}
			rep, err := perf.NewReplica(r.cfg.Catalog, g.GPU, m, r.cfg.Dtype, max(g.TP, 1))
			if err != nil {
				return fmt.Errorf("sim: autoscale: %w", err)
			}
			// The canonical names, so the pool key matches the heartbeats'.
			cc.Pools = append(cc.Pools, control.Pool{GPU: rep.GPU.Name, Model: rep.Model.Name, Dtype: r.cfg.Dtype, TP: rep.TP,
				Min: min(as.Min, as.Max), Max: max(as.Max, g.Count), Role: g.Role})
		}
	}
	ctl, err := control.New(cc)
	if err != nil {
		return fmt.Errorf("sim: autoscale: %w", err)
	}
	a := &autoscaler{cfg: as, ctl: ctl, byKey: map[string]*pool{}, queued: map[string]int{}, nextID: map[string]int{},
		slo: map[string]control.Attainment{}, starting: map[string]int{}, margins: map[string]float64{},
		stats: AutoscaleStats{Changes: map[string]int{}}, recent: control.Recent{Window: as.SLOWindow}}
	a.cfg.Control = ctl.Config()
	if as.Planner != "" && as.Planner != control.PlannerSwitchyard {
		p, err := baselines.NewPlanner(as.Planner, a.cfg.Control)
		if err != nil {
			return fmt.Errorf("sim: autoscale: %w", err)
		}
		a.ctl = p
	}
	a.interval = int64(a.cfg.Control.Interval)
	for k, v := range a.cfg.Control.ShedMargins {
		a.margins[k] = v
	}
	for _, p := range a.cfg.Control.Pools {
		rep, err := perf.NewReplica(r.cfg.Catalog, p.GPU, p.Model, p.Dtype, max(p.TP, 1))
		if err != nil {
			return fmt.Errorf("sim: autoscale: %w", err)
		}
		if !fleetServes(r, rep.Model.Name) {
			return fmt.Errorf("sim: autoscale: pool %s serves %s, which no worker of the fleet serves", p.Key(), p.Model)
		}
		// A pool with a fixed role starts workers with it and a link (the
		// run's, else DefaultRoleLink), as buildFleet builds the initial ones.
		pl := &pool{Pool: p, rep: rep, link: r.cfg.linkOf(GPUSpec{GPU: p.GPU, Role: p.Role})}
		a.pools = append(a.pools, pl)
		a.byKey[p.Key()] = pl
	}
	r.as = a
	return nil
}

// fleetServes reports whether a worker of the initial fleet serves model.
func fleetServes(r *runner, model string) bool {
	for _, w := range r.ws {
		if w.rep.Model.Name == model {
			return true
		}
	}
	return len(r.ws) == 0
}

// adopt registers the run's initial workers (after buildFleet) and
// schedules the first decision.
func (a *autoscaler) adopt(r *runner) error {
	first := int64(r.tr.Requests[0].Arrival)
	for _, w := range r.ws {
		hb := schemas.Heartbeat{GPU: w.rep.GPU.Name, Role: w.role, Models: []schemas.ModelState{{Name: w.rep.Model.Name}}}
		pl := a.byKey[control.HeartbeatPool(&hb, func(k string) bool { return a.byKey[k] != nil })]
		if pl == nil {
			return fmt.Errorf("sim: autoscale: worker %s is in no configured pool", w.id)
		}
		a.nextID[pl.rep.GPU.Name]++
		a.poolOf = append(a.poolOf, pl)
		a.startAt = append(a.startAt, first)
		a.endAt = append(a.endAt, -1)
		a.drainAt = append(a.drainAt, -1)
	}
	if a.cfg.ShiftModels {
		if err := a.stageModels(r); err != nil {
			return err
		}
		a.switches = make([]*switchOrder, len(r.ws))
	}
	a.first, a.lastAt, a.lastRep = first, first, len(r.ws)
	a.stats.MinReplicas, a.stats.MaxReplicas = a.lastRep, a.lastRep
	a.stats.Timeline = append(a.stats.Timeline, ReplicaPoint{AtSeconds: 0, Replicas: a.lastRep, Desired: a.lastRep})
	r.h.push(first+a.interval, evControl, 0)
	return nil
}

// event handles the control loop's own events.
func (a *autoscaler) event(r *runner, ev event) {
	switch ev.kind {
	case evControl:
		a.decide(r)
		r.h.push(r.now+a.interval, evControl, 0)
	case evReady:
		if ev.a < 0 {
			a.switchEvent(r, ev.a)
			return
		}
		a.ready(r, int(ev.a))
	}
}

// provisioned is how many replicas are paid for now.
func (a *autoscaler) provisioned() int {
	n := 0
	for _, e := range a.endAt {
		if e < 0 {
			n++
		}
	}
	for _, s := range a.starts {
		if !s.done {
			n++
		}
	}
	return n
}

// track accumulates replica-seconds and the timeline on every change.
func (a *autoscaler) track(now int64) {
	n := a.provisioned()
	a.repSecs += float64(a.lastRep) * float64(now-a.lastAt) / 1e9
	a.lastAt = now
	if n == a.lastRep {
		return
	}
	a.lastRep = n
	a.stats.MinReplicas = min(a.stats.MinReplicas, n)
	a.stats.MaxReplicas = max(a.stats.MaxReplicas, n)
	a.stats.Timeline = append(a.stats.Timeline, ReplicaPoint{AtSeconds: float64(now-a.first) / 1e9, Replicas: n, Desired: a.lastDes})
}

// decide runs one controller decision on what the fleet reports and
// carries it out on the simulated fleet.
func (a *autoscaler) decide(r *runner) {
	in := a.inputs(r)
	d := a.ctl.Decide(in)
	a.stats.Decisions++
	if a.cfg.OnDecision != nil {
		a.cfg.OnDecision(time.Duration(r.now-a.first), d)
	}
	for _, ch := range d.Changes {
		a.stats.Changes[ch.Kind]++
		if from, to, ok := replicaStep(ch); ok && to > from {
			a.stats.ScaleUps++
		}
	}
	for _, s := range d.Spec {
		if w := a.live(r, s.Worker); w != nil {
			w.eng.SetSpecDecode(s.On)
		}
	}
	for _, b := range d.Budgets {
		if w := a.live(r, b.Worker); w != nil {
			w.eng.SetBudgets(b.MaxBatch, b.TokenBudget)
		}
	}
	if a.cfg.Warmth {
		for _, wd := range d.Warmth {
			a.applyWarmth(r, wd)
		}
	}
	for _, rd := range d.Roles {
		// The worker takes the dispatches of its new role from its next
		// heartbeat on and finishes what it holds, as the live worker does
		// on sy.ctl.role.<worker>.
		if w := a.live(r, rd.Worker); w != nil && schemas.ValidRole(rd.Role) {
			w.role = rd.Role
			r.heartbeat(w)
		}
	}
	for _, s := range d.Shed {
		a.margins[s.Class] = s.Margin
	}
	for _, sw := range d.Switches {
		a.orderSwitch(r, sw)
	}
	a.applyReplicas(r, d.Replicas)
	a.track(r.now)
}

// inputs gathers what the live controller reads: the workers' latest
// heartbeats, the router queue per class, attainment and the mix, held
// demand, and the workers still starting.
func (a *autoscaler) inputs(r *runner) control.Inputs {
	now := at(r.now)
	in := control.Inputs{Now: now, Queued: a.queued, SLO: a.slo, Starting: a.starting, Unserved: a.unserved}
	clear(a.queued)
	clear(a.slo)
	clear(a.starting)
	a.workers = a.workers[:0]
	for i, w := range r.ws {
		if a.endAt[i] < 0 {
			a.workers = append(a.workers, w.hb)
			// Asleep through the last interval (sampled at decisions): part
			// of its GPU-hours, which count every provisioned replica.
			if w.eng.Tier() == schemas.TierHost {
				a.stats.SleepingReplicaHours += float64(a.interval) / 1e9 / 3600
			}
		}
	}
	in.Workers = a.workers
	if a.booked == nil {
		a.booked = map[string]int{}
	}
	clear(a.booked)
	fl := r.core.Fleet()
	for i := range a.workers {
		if w := fl.Get(a.workers[i].WorkerID); w != nil && w.BookedRequests > 0 {
			a.booked[w.ID] = w.BookedRequests
		}
	}
	in.Booked = a.booked
	for _, p := range schemas.Priorities {
		a.queued[p] = r.core.QueuedClass(p)
	}
	in.SLO = a.recent.SLO(now, a.slo)
	in.Mix = a.recent.Mix()
	// What the router core holds for a pool's cold start, as the live
	// controller reads it from the routers' held_demand events (the
	// queue counts above leave it out, as the live controller takes it
	// out of the consumers' backlog).
	if held := r.core.HeldForWarmup(); len(held) > 0 {
		in.Held = make(map[string]control.HeldDemand, len(held))
		for k, h := range held {
			in.Held[k] = control.HeldDemand{Requests: h.Requests, Tokens: h.Tokens, ByClass: h.ByClass, Since: h.Since, Refused: h.Refused}
		}
	}
	for _, s := range a.starts {
		if !s.done {
			a.starting[s.pool.Key()]++
		}
	}
	if a.cfg.ShiftModels {
		in.QueuedByModel = a.queuedByModel(r)
	}
	return in
}

// applyWarmth carries out one weight-warmth command. A worker refuses to
// unload while it runs sequences, as the live worker's engine does; the
// controller retries on a later decision. A wake starts loading at once,
// from the tier the weights sit in.
func (a *autoscaler) applyWarmth(r *runner, wd control.WarmthDecision) {
	w := a.live(r, wd.Worker)
	if w == nil {
		return
	}
	switch {
	case wd.State == schemas.WeightHot:
		w.sleepPending = false
		if w.eng.Tier() != schemas.TierHBM {
			w.eng.Wake(at(r.now))
			a.stats.Wakes++
			r.heartbeat(w)
		}
	case wd.State == schemas.WeightSleeping && (w.busy || w.eng.HasWork()):
		// It sleeps once its sequences are done.
		w.sleepPending = true
	case wd.State == schemas.WeightSleeping:
		a.sleep(r, w)
	case w.eng.SetWeightState(wd.State) == nil:
		r.heartbeat(w)
	}
}

// applyReplicas tells the router of every pool, as the live router reads
// sy.ctl.replicas (it may hold work for a pool at zero), and moves each
// pool toward its desired replicas.
func (a *autoscaler) applyReplicas(r *runner, rds []control.ReplicaDecision) {
	a.lastDes = 0
	for _, rd := range rds {
		a.lastDes += rd.Desired
		r.apply(routing.Input{Kind: routing.InPool, Pool: &routing.PoolSpec{Key: rd.Pool, GPU: rd.GPU, Model: rd.Model, Dtype: rd.Dtype,
			TP: rd.TP, Max: rd.Max, Desired: rd.Desired, ColdStartSeconds: rd.ColdStartSeconds}})
		// GPUs that change model are a fixed inventory: switches are the
		// only moves, and no worker is started or released for them.
		if pl := a.byKey[rd.Pool]; pl != nil && !a.cfg.ShiftModels {
			a.reconcile(r, pl, rd.Desired)
		}
	}
}

// replicaStep reads a replica change's from and to counts.
func replicaStep(ch control.Change) (from, to int, ok bool) {
	if ch.Kind != control.KindReplicas {
		return 0, 0, false
	}
	f, err1 := strconv.Atoi(ch.From)
	t, err2 := strconv.Atoi(ch.To)
	return f, t, err1 == nil && err2 == nil
}

// live returns a provisioned, not draining worker by id.
func (a *autoscaler) live(r *runner, id string) *simWorker {
	i, ok := r.byWID[id]
	if !ok || a.endAt[i] >= 0 || a.drainAt[i] >= 0 {
		return nil
	}
	return r.ws[i]
}

// reconcile moves a pool toward desired replicas as the local scaler
// does: start workers for a shortfall; for a surplus drain the cheapest
// to lose (sleeping first, then the least loaded, then the newest) and
// leave workers still starting to join.
func (a *autoscaler) reconcile(r *runner, pl *pool, desired int) {
	var live []*simWorker
	for i, w := range r.ws {
		if a.poolOf[i] == pl && a.endAt[i] < 0 && a.drainAt[i] < 0 {
			live = append(live, w)
		}
	}
	pending := 0
	for _, s := range a.starts {
		if !s.done && s.pool == pl {
			pending++
		}
	}
	hbs := make([]schemas.Heartbeat, len(live))
	byID := make(map[string]*simWorker, len(live))
	for i, w := range live {
		hbs[i] = w.hb
		byID[w.hb.WorkerID] = w
	}
	start, drain := control.Reconcile(hbs, pending, desired)
	for ; start > 0; start-- {
		id := fmt.Sprintf("%s-%02d", pl.rep.GPU.Name, a.nextID[pl.rep.GPU.Name])
		a.nextID[pl.rep.GPU.Name]++
		a.starts = append(a.starts, starting{pool: pl, id: id, startAt: r.now})
		a.stats.Started++
		// It loads from the controller's start tier (local disk unless a
		// what-if names another), as the controller's lead time assumes.
		load := time.Duration(pl.rep.TierSeconds(a.cfg.Control.StartTier) * float64(time.Second))
		r.h.push(r.now+int64(load), evReady, int32(len(a.starts)-1))
	}
	for _, id := range drain {
		w := byID[id]
		a.drainAt[w.idx] = r.now
		// The draining heartbeat goes out at once: placement stops
		// choosing the worker before it stops taking deliveries.
		r.heartbeat(w)
	}
}

// ready registers a started worker: its engine exists from now on, hot,
// and it joins the fleet by heartbeat.
func (a *autoscaler) ready(r *runner, k int) {
	s := &a.starts[k]
	s.done = true
	n := len(r.ws)
	eng, err := engine.New(engine.Config{
		Replica: s.pool.rep, MaxBatch: r.cfg.MaxBatch, TokenBudget: r.cfg.TokenBudget,
		KVBlocks: r.cfg.KVBlocks, Spec: engine.SpecConfig{Seed: uint64(r.cfg.Seed) + uint64(n)},
		TargetStepCap: r.pol.EngineTargets,
	})
	if err != nil {
		// The same replica built the initial fleet's engines: unreachable
		// unless the configuration changed under the run.
		panic(fmt.Sprintf("sim: autoscale: %v", err))
	}
	w := &simWorker{id: s.id, idx: int32(n), pool: s.pool.rep.GPU.Name, eng: eng, rep: s.pool.rep,
		running: map[int32]int32{}, deliveredAt: map[int32]int64{}, role: s.pool.Role, link: s.pool.link}
	r.ws = append(r.ws, w)
	r.byWID[w.id] = w.idx
	a.poolOf = append(a.poolOf, s.pool)
	if a.cfg.ShiftModels {
		a.shelves = append(a.shelves, r.newShelf(w.idx))
		a.switches = append(a.switches, nil)
	}
	a.startAt = append(a.startAt, s.startAt)
	a.endAt = append(a.endAt, -1)
	a.drainAt = append(a.drainAt, -1)
	r.heartbeat(w)
	r.h.push(r.now+int64(r.cfg.HeartbeatInterval), evHeartbeat, w.idx)
}

// sleep puts w's weights in host memory, its GPU still provisioned.
func (a *autoscaler) sleep(r *runner, w *simWorker) {
	if a.switchPending(w.idx) {
		// Idle while draining for a switch: the switch, not a sleep.
		a.finishSwitch(r, w)
		return
	}
	w.sleepPending = false
	if w.eng.SetWeightState(schemas.WeightSleeping) == nil {
		a.stats.Sleeps++
		r.heartbeat(w)
	}
}

// beat runs on each of w's heartbeats; false means w has retired and
// sends no more. A draining worker retires once it holds no work and every
// dispatch sent before its draining heartbeat has been delivered.
func (a *autoscaler) beat(r *runner, w *simWorker) bool {
	i := w.idx
	if a.endAt[i] >= 0 {
		return false
	}
	if a.switchPending(i) {
		a.finishSwitch(r, w)
	}
	if a.drainAt[i] < 0 || w.busy || w.eng.HasWork() || r.now-a.drainAt[i] <= int64(r.cfg.DispatchLatency) {
		return true
	}
	a.endAt[i] = r.now
	a.stats.Retired++
	// It heartbeats no more; the router core lets a drained worker that
	// went quiet depart, as it does live.
	a.track(r.now)
	return false
}

// draining reports whether worker i announces itself draining.
// A worker draining for a switch says so too: routers stop placing its
// old model there.
func (a *autoscaler) draining(i int32) bool {
	return (int(i) < len(a.drainAt) && a.drainAt[i] >= 0) || a.switchPending(i)
}

// resolved feeds a request's outcome into the SLO window and the mix.
func (a *autoscaler) resolved(r *runner, i int32, status uint8) {
	q := &r.tr.Requests[i]
	st := &r.reqs[i]
	// The prompt tokens found cached where the prefill ran: a split
	// request's prefill worker's, a whole request's own worker's.
	cached := st.cached
	if st.phase == schemas.PhaseDecode {
		cached = st.prefillCached
	}
	a.recent.ObserveCached(at(r.now), q.Priority, status == stOK && st.sloMet, status == stOK, q.PromptTokens, q.OutputTokens, cached)
	// Shed, or expired in the queue, without a worker (control.Unserved).
	if status != stOK && r.reqs[i].placeAt == 0 {
		a.unserved++
	}
}

// shedMargins is the margins the controller set, or nil (the defaults).
func (r *runner) shedMargins() map[string]float64 {
	if r.as == nil {
		return nil
	}
	return r.as.margins
}

// provisionedSeconds is how long w was paid for inside the makespan
// [first, end]: all of it for a fixed fleet.
func (r *runner) provisionedSeconds(w *simWorker, first, end int64) float64 {
	if r.as == nil {
		return float64(end-first) / 1e9
	}
	s, e := r.as.startAt[w.idx], r.as.endAt[w.idx]
	if e < 0 || e > end {
		e = end
	}
	return float64(max(0, e-max(s, first))) / 1e9
}

// autoscaleResult adds what the never-ready starts cost and the stats.
func (r *runner) autoscaleResult(res *Result, first, end int64) {
	a := r.as
	if a == nil {
		return
	}
	for _, s := range a.starts {
		if s.done {
			continue
		}
		sec := float64(max(0, end-max(s.startAt, first))) / 1e9
		res.GPUHours += sec / 3600 * float64(s.pool.rep.TP)
		res.CostUSD += sec / 3600 * s.pool.rep.PricePerHour()
	}
	a.track(min(r.now, end))
	a.repSecs += float64(a.lastRep) * float64(max(0, end-a.lastAt)) / 1e9
	st := a.stats
	if span := float64(end-first) / 1e9; span > 0 {
		st.MeanReplicas = a.repSecs / span
	}
	res.Autoscale = &st
}
