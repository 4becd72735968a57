// Package control owns Switchyard's control loop: the pure decisions that
// trade latency, cost and throughput from live telemetry. Given worker
// heartbeats, the router's queue depth per class, recent SLO attainment per
// class and the request mix, Decide returns desired replicas per pool (GPU
// generation × model), speculative decoding on or off per worker, batch and
// token budgets per worker, weight warmth per worker (hot, sleeping, cold)
// and shedding margins per class — each change with its reason.
//
// Every output is damped: replica changes wait out cooldowns, scale down
// only to the highest recommendation of a stabilization window (as the
// Kubernetes HPA does), move at most a bounded step and stay within
// [Min, Max]; per-worker switches use hysteresis bands and minimum dwell
// times. Scaling forecasts demand (EWMA level plus trend, Holt's method)
// over the time a new replica needs to load its weights, so a scale-up or a
// scale-from-zero is ready when the load it anticipates arrives.
//
// The package is a deterministic function of (configuration, the sequence
// of Inputs): no clock, no I/O. services/controller runs it live over NATS
// every interval; internal/driver/sim runs it in virtual time.
package control

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

type poolState struct {
	Pool
	rep      perf.Replica
	desired  int
	started  bool
	lastUp   time.Time
	lastDown time.Time
	lastAny  time.Time
	firstAt  time.Time
	recs     []rec // raw recommendations inside the stabilization windows
	fc       holt
	lastSeen float64   // completed + in-system + queued, for the arrival rate
	sloUpAt  time.Time // the last replica added for missed SLOs
	arrivals []arrival // per interval, the last lead time's
	calib    float64   // share of the modelled capacity SLO misses leave
	// shortAt is the last decision at which the pool had fewer replicas
	// serving than it had asked for (some still loading their weights).
	shortAt time.Time
	levels  []level // per replica level, the recent gaps in demand for it
	// highShareSeen and highPenalty are the high classes' share of recent
	// results and their mean miss penalty, for pricing a sudden return.
	highShareSeen, highPenalty float64
	lastAt                     time.Time
	haveLast                   bool
	// sleepWant is how many of the pool's replicas the scaler keeps asleep
	// instead of releasing them (Config.SleepOnRelease, sleep.go).
	sleepWant int
	// demandWokeAt is when the router last woke one of the pool's
	// sleepers by placing work on it (decideWarmth).
	demandWokeAt time.Time
	// phase is a pool with a fixed role's share of the role pools' flow at
	// this decision (phases.go); roleAt the last role change decided in a
	// pool of whole requests (decideRoles).
	phase  phaseDemand
	roleAt time.Time
	// shift is the group of pools sharing this pool's GPUs when GPUs
	// change model (shift.go); capU, reqSeconds and the seen counts are
	// this decision's planned capacity per replica, a request's time in
	// the system, and the requests completed, in the system and queued.
	shift                              *shiftGroup
	capU, reqSeconds                   float64
	seenDone, seenInSystem, seenQueued float64
	// gen is the group of pools serving this pool's model on other GPU
	// generations (generations.go), which sizes them together;
	// arrivedNow this decision's arrivals (arrivedOK once measured).
	gen        *genGroup
	arrivedNow arrival
	arrivedOK  bool
}

type rec struct {
	at time.Time
	n  int
}

type workerState struct {
	specAt     time.Time
	budget     [2]int
	budgetAt   time.Time
	idleSince  time.Time
	sleepSince time.Time
	// sawAsleep is a heartbeat that reported the worker asleep since it
	// was last hot; demandWoke a worker woken by a request placed on it
	// while it slept (no wake commanded): its level was needed, so it is
	// not put back to sleep until it has idled SleepAfter.
	sawAsleep, demandWoke bool
	// intent is the weight state last commanded, trusted over a lagging
	// heartbeat until the heartbeat shows it or intentTTL passes.
	intent   string
	intentAt time.Time
	counted  uint64
	seen     bool
	// role is the role last commanded (decideRoles), trusted over a
	// lagging heartbeat as intent is.
	role   string
	roleAt time.Time
	// switchTo is the model a switch commanded (shift.go) brings in,
	// trusted until the heartbeat shows it or switchFor plus switchTTL
	// passes.
	switchTo  string
	switchAt  time.Time
	switchFor time.Duration
}

// Controller holds the damping state between decisions. It is not safe
// for concurrent use.
type Controller struct {
	cfg     Config
	pools   []*poolState
	byKey   map[string]*poolState
	workers map[string]*workerState
	shed    map[string]float64
	okSince time.Time
	tight   bool
	// unserved is Inputs.Unserved at the last decision.
	unserved     uint64
	haveUnserved bool
	// heldSeen is each pool's held demand at the last decision (held.go).
	heldSeen map[string]heldMark
	// phases measures the flow through the pools with a fixed role.
	phases phaseGroup
	// groups are the pools sharing one GPU type's GPUs when GPUs change
	// model, flows each model's fast demand level (shift.go).
	groups []*shiftGroup
	flows  map[string]*modelFlow
	// gens are the pools of one model on several GPU generations, sized
	// together for the cheapest fleet that serves their demand.
	gens []*genGroup
}

// New builds a Controller.
func New(cfg Config) (*Controller, error) {
	cfg.fill()
	c := &Controller{cfg: cfg, byKey: map[string]*poolState{}, workers: map[string]*workerState{}, shed: map[string]float64{}, heldSeen: map[string]heldMark{},
		flows: map[string]*modelFlow{}}
	for _, p := range cfg.Pools {
		if p.Dtype == "" {
			p.Dtype = catalog.DtypeBF16
		}
		if p.TP <= 0 {
			p.TP = 1
		}
		if p.Max <= 0 || p.Min < 0 || p.Min > p.Max {
			return nil, fmt.Errorf("control: pool %s: bounds min %d max %d", p.Key(), p.Min, p.Max)
		}
		rep, err := perf.NewReplica(cfg.Catalog, p.GPU, p.Model, p.Dtype, p.TP)
		if err != nil {
			return nil, fmt.Errorf("control: pool %s: %w", p.Key(), err)
		}
		if _, dup := c.byKey[p.Key()]; dup {
			return nil, fmt.Errorf("control: pool %s configured twice", p.Key())
		}
		if s := rep.TierSeconds(cfg.StartTier); math.IsInf(s, 1) {
			return nil, fmt.Errorf("control: pool %s: start tier %q is not a catalog weight tier", p.Key(), cfg.StartTier)
		}
		ps := &poolState{Pool: p, rep: rep}
		c.pools = append(c.pools, ps)
		c.byKey[p.Key()] = ps
	}
	if len(c.pools) == 0 {
		return nil, errors.New("control: no pools")
	}
	if err := c.buildShiftGroups(); err != nil {
		return nil, err
	}
	c.buildGenGroups()
	for k, v := range cfg.ShedMargins {
		c.shed[k] = v
	}
	return c, nil
}

// Config returns the filled configuration.
func (c *Controller) Config() Config { return c.cfg }

// Decide makes one decision. Call it every Interval with the freshest
// inputs; it is deterministic in the sequence of inputs.
func (c *Controller) Decide(in Inputs) Decision {
	d := Decision{At: in.Now}
	if in.Mix.PromptTokens <= 0 {
		in.Mix.PromptTokens = 1024
	}
	if in.Mix.OutputTokens <= 0 {
		in.Mix.OutputTokens = 256
	}
	byPool := map[string][]*schemas.Heartbeat{}
	live := map[string]bool{}
	for i := range in.Workers {
		hb := &in.Workers[i]
		live[hb.WorkerID] = true
		if k := c.heartbeatPool(hb); k != "" {
			byPool[k] = append(byPool[k], hb)
		}
	}
	for id := range c.workers {
		if !live[id] {
			delete(c.workers, id)
		}
	}
	if len(c.groups) > 0 {
		// Workers switching into a pool are replicas on their way to it.
		in.Starting = c.switchingIn(byPool, in)
	}
	high := c.highAttainment(in.SLO)
	highMiss := high.Total >= c.cfg.MinSLOSamples && high.Ratio() < c.cfg.SLOTarget
	atMax := false
	queued := 0
	for _, n := range in.Queued {
		queued += n
	}
	shares := c.queueShares(byPool, in, queued)
	// Held requests wait for one pool's model: they are its demand alone,
	// and so are those refused since the last decision for a deadline
	// shorter than its cold start.
	for key, h := range in.Held {
		if c.byKey[key] != nil {
			shares[key] += c.heldBacklog(key, h)
		}
	}
	// Requests turned away since the last decision are split over the
	// pools as the queue is.
	var unserved float64
	if c.haveUnserved && in.Unserved >= c.unserved {
		unserved = float64(in.Unserved - c.unserved)
	}
	c.unserved, c.haveUnserved = in.Unserved, true
	unservedShares := c.queueShares(byPool, in, 1)
	// Pools with a fixed role share one flow of requests, each its phase
	// of it (phases.go).
	var phased map[string]phaseDemand
	if c.hasPhases() {
		phased = c.phaseDemands(byPool, in, shares, unserved, unservedShares)
	}
	// Every pool's recommendation first, then the pools of one model on
	// several GPU generations sized together (generations.go), then each
	// pool damped toward its size.
	guards := make([]heldGuard, len(c.pools))
	reads := make([]poolRead, len(c.pools))
	for i, ps := range c.pools {
		guards[i] = c.guardHeld(ps, byPool[ps.Key()], in, &d)
		queuedHere := shares[ps.Key()]
		if pd, ok := phased[ps.Key()]; ok {
			ps.phase, queuedHere = pd, pd.queued
		}
		reads[i] = c.readPool(ps, byPool[ps.Key()], in, queuedHere, unserved*unservedShares[ps.Key()], highMiss)
	}
	for _, g := range c.gens {
		c.sizeGenerations(g, reads, in)
	}
	for i, ps := range c.pools {
		g := guards[i]
		g.changes = len(d.Changes)
		rd := c.finishPool(ps, reads[i], in, highMiss, &d)
		rd = g.apply(c, ps, rd, &d)
		if rd.Desired >= ps.Max && highMiss {
			atMax = true
		}
		d.Replicas = append(d.Replicas, rd)
	}
	c.decideShifts(byPool, in, &d)
	ws := slices.Clone(in.Workers)
	sort.Slice(ws, func(i, j int) bool { return ws[i].WorkerID < ws[j].WorkerID })
	highQueued := 0
	for _, cl := range c.cfg.HighClasses {
		highQueued += in.Queued[cl]
	}
	for i := range ws {
		hb := &ws[i]
		st := c.workers[hb.WorkerID]
		if st == nil {
			st = &workerState{}
			c.workers[hb.WorkerID] = st
		}
		ps := c.byKey[c.heartbeatPool(hb)]
		rep, ok := c.replicaFor(hb, ps)
		if !ok || hb.Draining {
			continue
		}
		if c.roleOf(hb, in.Now) == schemas.RolePrefill {
			// A prefill worker's sequences end at their first token: it
			// has no decodes for speculation to speed up or for a smaller
			// budget to protect, and PrefillCapacity plans it at the
			// default token budget.
			continue
		}
		c.decideSpec(hb, st, rep, in, &d)
		c.decideBudget(hb, st, rep, in, highQueued > 0 || highMiss, &d)
	}
	c.decideRoles(byPool, in, &d)
	c.decideWarmth(ws, byPool, &d, in)
	c.decideShed(in.Now, highMiss, atMax, high, &d)
	return d
}

// heartbeatPool is the configured pool a heartbeat's worker belongs to
// (HeartbeatPool), or its GPU × model key when none is configured.
func (c *Controller) heartbeatPool(hb *schemas.Heartbeat) string {
	return HeartbeatPool(hb, func(k string) bool { return c.byKey[k] != nil })
}

func (c *Controller) replicaFor(hb *schemas.Heartbeat, ps *poolState) (perf.Replica, bool) {
	if ps != nil {
		return ps.rep, true
	}
	if len(hb.Models) == 0 {
		return perf.Replica{}, false
	}
	m := hb.Models[0]
	rep, err := perf.NewReplica(c.cfg.Catalog, hb.GPU, m.Name, m.Dtype, max(hb.TP, 1))
	return rep, err == nil
}

func (c *Controller) highAttainment(slo map[string]Attainment) Attainment {
	var a Attainment
	for _, cl := range c.cfg.HighClasses {
		a.Met += slo[cl].Met
		a.Total += slo[cl].Total
	}
	return a
}

func ftoa(f float64) string { return fmt.Sprintf("%.3g", f) }

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

func ceilDiv(x, y float64) int {
	if y <= 0 {
		return 0
	}
	return int(math.Ceil(x/y - 1e-9))
}
