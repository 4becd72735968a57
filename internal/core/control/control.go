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
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Pool is one autoscaled group of identical replicas.
type Pool struct {
	GPU   string // catalog GPU name
	Model string // catalog model name
	Dtype string // default bf16
	TP    int    // default 1
	// Min and Max bound the desired replicas; Min 0 allows scale to zero.
	Min, Max int
}

// Key is the pool's name: "<gpu>:<model>" with dots replaced so it is one
// NATS subject token (model names such as llama-3.1-8b contain dots).
func (p Pool) Key() string { return PoolKey(p.GPU, p.Model) }

// PoolKey names the pool of gpu × model.
func PoolKey(gpu, model string) string {
	return strings.ToLower(gpu) + ":" + strings.ReplaceAll(model, ".", "_")
}

// Config configures a Controller. Zero fields take the defaults documented
// on each.
type Config struct {
	Pools   []Pool
	Catalog *catalog.Catalog
	// Interval is how often Decide is called (default 2 s). Forecast
	// horizons and the per-decision step limits are in these units.
	Interval time.Duration

	// ITLTarget is the inter-token latency the batch sizing protects: the
	// tightest TPOT objective of the classes served (default 50 ms, the
	// critical class's).
	ITLTarget time.Duration
	// TargetUtilization is the share of a replica's modelled capacity the
	// scaler plans to use (default 1: the headroom for bursts and arrival
	// noise is planned explicitly, by the burst rate and HeadroomZ).
	TargetUtilization float64
	// DrainTarget is how fast a backlog should be worked off: a queue of
	// Q requests asks for Q/DrainTarget requests per second of capacity on
	// top of the arrival rate (default 10 s).
	DrainTarget time.Duration
	// SLOTarget is the attainment the high-priority classes must keep
	// (default 0.99); below it the controller adds a replica and refuses to
	// scale down. MinSLOSamples is the fewest results in the window before
	// attainment is trusted (default 20).
	SLOTarget     float64
	MinSLOSamples int
	// SLOWindow is how far back the caller's attainment looks (default
	// 60 s, control.Recent's): after adding a replica for misses, the
	// controller waits for the misses it already counted to leave it.
	SLOWindow time.Duration
	// MissCapacityCut is the factor a high-priority miss episode applies
	// to the capacity planned per replica (default 0.85, floor 0.4 of the
	// model); CalibrationRecover the time constant of its recovery toward
	// the model while the SLO holds (default 30 min).
	MissCapacityCut    float64
	CalibrationRecover time.Duration
	// HighClasses are the classes held to SLOTarget (default critical and
	// interactive).
	HighClasses []string
	// HeadroomForAll buys burst and noise headroom for every class's
	// arrivals rather than only the HighClasses' share of them (the
	// default), trading GPU-hours for lower classes' attainment in bursts.
	HeadroomForAll bool
	// PlanHighOnly sizes pools for the HighClasses' share of the traffic
	// alone: the lower classes run on whatever capacity that leaves and are
	// shed by admission when there is none — the cheapest fleet that holds
	// the SLO, as a fixed fleet sized for the high classes does. Off by
	// default: the fleet is sized to serve every class.
	PlanHighOnly bool

	// Damping. UpCooldown is the least time between two scale-ups (default
	// 10 s); DownCooldown the least time after any change before a
	// scale-down when DownWindow is set (default 30 s); DownWindow, when
	// set, a fixed stabilization window whose highest recommendation
	// bounds a scale-down, as the HPA's (by default there is none: each
	// replica is released once it has been unneeded for the hold its
	// level's recent returns of demand ask for, release.go);
	// ZeroWindow the idle time before a pool with Min 0 goes to zero
	// (default 5 min). MaxUpStep is the most replicas added per decision
	// (default max(4, current)); MaxDownStep the most removed (default 1).
	// Tolerance is the relative gap ignored (default 0.1).
	UpCooldown, DownCooldown, DownWindow, ZeroWindow time.Duration
	MaxUpStep, MaxDownStep                           int
	Tolerance                                        float64
	// DownLeadTimes is the prior hold, in lead times, of a replica no
	// longer needed before the pool has seen demand return (default 1:
	// until a return has been seen, it is taken as gradual, which a re-buy
	// a lead time later serves). Once one has, the hold is fitted to the
	// returns (release.go).
	DownLeadTimes float64
	// MissPenalty is the USD a missed request of each class costs, which
	// prices a sudden return of demand against the GPU-time of holding a
	// replica through a quiet spell (default placement.DefaultMissPenalty,
	// the router's own values).
	MissPenalty map[string]float64

	// Forecast smoothing per interval: level (default one interval over
	// the pool's lead time, 0.064 for llama-3.1-8b on an H100) and trend
	// (default 0.2) gains of Holt's method, and the trend's damping per
	// interval when forecasting over the lead time (default 0.8; 1 is
	// undamped).
	LevelGain, TrendGain, TrendDamping float64
	// HeadroomZ and BurstWindow size the headroom for arrival noise: the
	// scaler plans for the forecast rate plus HeadroomZ standard
	// deviations of a Poisson rate measured over BurstWindow (defaults
	// 2.33, the 99th percentile, and 10 s). A negative HeadroomZ plans for
	// the mean.
	HeadroomZ   float64
	BurstWindow time.Duration
	// QueueBudget is how long a burst's requests may wait for capacity:
	// the fleet is sized so that every arrival of the last lead time would
	// have been served within it (default 1 s, the critical class's base
	// TTFT objective).
	QueueBudget time.Duration

	// Spec is the speculative decoding the workers run when it is on; the
	// on/off decision compares its modelled throughput with plain decoding.
	Spec engine.SpecConfig
	// SpecOnGain and SpecOffGain are the hysteresis band: spec turns on
	// when it is modelled to yield ≥ SpecOnGain× plain decoding's tokens
	// per second (default 1.15) and off below SpecOffGain× (default 1.0).
	// SpecDwell is the least time between two switches of one worker
	// (default 10 s).
	SpecOnGain, SpecOffGain float64
	SpecDwell               time.Duration

	// BudgetDwell is the least time between two budget changes of one
	// worker (default 30 s).
	BudgetDwell time.Duration

	// SleepAfter is how long a surplus worker stays idle and hot before it
	// is put to sleep (default 30 s); UnloadAfter how long a sleeping one
	// stays unneeded before its weights are dropped to cold (default 10 min).
	SleepAfter, UnloadAfter time.Duration

	// ShedMargins are the admitter's shedding margins per class in normal
	// operation (default admission.DefaultMargins' values); ShedTightened
	// those used while the high classes miss their SLO and a pool is at
	// Max (default standard 1.5, batch 2.5). ShedRecover is how long
	// attainment must hold before margins relax again (default 60 s).
	ShedMargins, ShedTightened map[string]float64
	ShedRecover                time.Duration
}

func (c *Config) fill() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	deff := func(f *float64, v float64) {
		if *f <= 0 {
			*f = v
		}
	}
	if c.Catalog == nil {
		c.Catalog = catalog.Default()
	}
	def(&c.Interval, 2*time.Second)
	def(&c.ITLTarget, 50*time.Millisecond)
	deff(&c.TargetUtilization, 1)
	def(&c.DrainTarget, 10*time.Second)
	deff(&c.SLOTarget, 0.99)
	def(&c.SLOWindow, time.Minute)
	if c.MissCapacityCut <= 0 || c.MissCapacityCut >= 1 {
		c.MissCapacityCut = 0.85
	}
	def(&c.CalibrationRecover, 30*time.Minute)
	if c.MinSLOSamples <= 0 {
		c.MinSLOSamples = 20
	}
	if len(c.HighClasses) == 0 {
		c.HighClasses = []string{schemas.PriorityCritical, schemas.PriorityInteractive}
	}
	def(&c.UpCooldown, 10*time.Second)
	def(&c.DownCooldown, 30*time.Second)
	def(&c.ZeroWindow, 5*time.Minute)
	if c.MaxDownStep <= 0 {
		c.MaxDownStep = 1
	}
	deff(&c.Tolerance, 0.1)
	deff(&c.TrendGain, 0.2)
	if c.TrendDamping == 0 {
		c.TrendDamping = 0.8
	}
	deff(&c.DownLeadTimes, 1)
	if c.MissPenalty == nil {
		c.MissPenalty = maps.Clone(placement.DefaultMissPenalty)
	}
	if c.HeadroomZ == 0 {
		c.HeadroomZ = 2.33
	}
	def(&c.BurstWindow, 10*time.Second)
	def(&c.QueueBudget, time.Second)
	if c.Spec.K <= 0 {
		c.Spec.K = 3
	}
	if c.Spec.Acceptance <= 0 || c.Spec.Acceptance >= 1 {
		c.Spec.Acceptance = 0.7
	}
	if c.Spec.DraftLayers == 0 {
		c.Spec.DraftLayers = 1
	}
	deff(&c.SpecOnGain, 1.15)
	deff(&c.SpecOffGain, 1.0)
	def(&c.SpecDwell, 10*time.Second)
	def(&c.BudgetDwell, 30*time.Second)
	def(&c.SleepAfter, 30*time.Second)
	def(&c.UnloadAfter, 10*time.Minute)
	if c.ShedMargins == nil {
		c.ShedMargins = map[string]float64{
			schemas.PriorityCritical: 1.0, schemas.PriorityInteractive: 1.0,
			schemas.PriorityStandard: 1.2, schemas.PriorityBatch: 1.5,
		}
	}
	if c.ShedTightened == nil {
		c.ShedTightened = map[string]float64{
			schemas.PriorityCritical: 1.0, schemas.PriorityInteractive: 1.0,
			schemas.PriorityStandard: 1.5, schemas.PriorityBatch: 2.5,
		}
	}
	def(&c.ShedRecover, 60*time.Second)
}

// Attainment counts recent results of one class: how many met their SLO.
type Attainment struct{ Met, Total int }

// Ratio is Met/Total (1 when there is nothing to judge).
func (a Attainment) Ratio() float64 {
	if a.Total == 0 {
		return 1
	}
	return float64(a.Met) / float64(a.Total)
}

// Mix is the recent request shape: mean prompt and output tokens.
type Mix struct{ PromptTokens, OutputTokens float64 }

// Inputs is what the controller sees at one decision.
type Inputs struct {
	Now time.Time
	// Workers is the latest heartbeat of every live worker (stale ones
	// already dropped by the caller).
	Workers []schemas.Heartbeat
	// Queued is admitted requests not yet dispatched, per class (the
	// router consumers' pending plus ack-pending counts), less those held
	// for a pool's cold start, which Held carries by pool.
	Queued map[string]int
	// Held is the demand routers hold for a pool's cold start, by pool key
	// (held.go): requests for a model no live worker serves.
	Held map[string]HeldDemand
	// SLO is attainment per class over a recent window.
	SLO map[string]Attainment
	// Mix is the recent request shape (zero: 1024 in, 256 out).
	Mix Mix
	// Starting is replicas per pool key that were started but have not
	// heartbeated yet; they count as provisioned.
	Starting map[string]int
	// Unserved counts, cumulatively, the requests answered without
	// reaching a worker because of load: shed at admission or expired in
	// the router's queue (see Unserved). They are demand the workers'
	// completions never show: a fleet too small for its load would
	// otherwise read its own served rate as the arrival rate and never
	// grow to meet it.
	Unserved uint64
}

// Unserved reports whether a result counts toward Inputs.Unserved: a
// request shed, or failed on its deadline, without a worker.
func Unserved(status, code, workerID string) bool {
	if workerID != "" {
		return false
	}
	return status == schemas.StatusShed || (status == schemas.StatusFailed && code == schemas.CodeDeadlineExceeded)
}

// Change is one decided change, with its reason.
type Change struct {
	Kind   string // KindReplicas, KindSpec, KindBudget, KindWarmth, KindShed
	Target string // pool key, worker id or class
	From   string
	To     string
	Reason string
}

// ReplicaDecision is one pool's scaling state after a decision.
type ReplicaDecision struct {
	Pool    string
	GPU     string
	Model   string
	Desired int
	// Current is the provisioned replicas seen (live plus starting).
	Current int
	// Raw is the undamped recommendation.
	Raw int
	// ArrivalRate and Forecast are requests per second now and at the
	// load-time horizon; Capacity is one replica's planned requests per
	// second at TargetUtilization.
	ArrivalRate, Forecast, Capacity float64
	Backlog                         int
	Reason                          string
	// Dtype, TP, Max and ColdStartSeconds describe the pool to routers
	// (ReplicasMsg): what a new replica runs, how many may run, and how
	// long one started now takes to serve (its cold weight load). Held is
	// the requests held for its cold start.
	Dtype            string
	TP, Max          int
	ColdStartSeconds float64
	Held             int
}

// SpecDecision is a speculative-decoding switch for one worker.
type SpecDecision struct {
	Worker string
	On     bool
	// Gain is the modelled tokens/s of spec over plain decoding at the
	// worker's current batch.
	Gain   float64
	Batch  int
	Reason string
}

// BudgetDecision sets one worker's batch and token budgets.
type BudgetDecision struct {
	Worker      string
	MaxBatch    int
	TokenBudget int
	Reason      string
}

// WarmthDecision moves one worker's model weights.
type WarmthDecision struct {
	Worker string
	Model  string
	State  string // schemas.WeightHot, WeightSleeping or WeightCold
	Reason string
}

// ShedDecision sets the admitter's shedding margin for one class.
type ShedDecision struct {
	Class  string
	Margin float64
	Reason string
}

// Decision is the outcome of one Decide. Replicas holds every configured
// pool; the other lists hold only changes.
type Decision struct {
	At       time.Time
	Replicas []ReplicaDecision
	Spec     []SpecDecision
	Budgets  []BudgetDecision
	Warmth   []WarmthDecision
	Shed     []ShedDecision
	Changes  []Change
}

// Desired returns the desired replicas of a pool key (-1 if unknown).
func (d *Decision) Desired(pool string) int {
	for _, r := range d.Replicas {
		if r.Pool == pool {
			return r.Desired
		}
	}
	return -1
}

// Change kinds, also the sy.ctl.<kind> subject token.
const (
	KindReplicas = "replicas"
	KindSpec     = "spec"
	KindBudget   = "budget"
	KindWarmth   = "warmth"
	KindShed     = "shed"
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
	levels   []level   // per replica level, the recent gaps in demand for it
	// highShareSeen and highPenalty are the high classes' share of recent
	// results and their mean miss penalty, for pricing a sudden return.
	highShareSeen, highPenalty float64
	lastAt                     time.Time
	haveLast                   bool
}

type rec struct {
	at time.Time
	n  int
}

type workerState struct {
	spec       bool
	specKnown  bool
	specAt     time.Time
	budget     [2]int
	budgetAt   time.Time
	idleSince  time.Time
	sleepSince time.Time
	// intent is the weight state last commanded, trusted over a lagging
	// heartbeat until the heartbeat shows it or intentTTL passes.
	intent   string
	intentAt time.Time
	counted  uint64
	seen     bool
}

// Controller holds the damping state between decisions. It is not safe
// for concurrent use.
type Controller struct {
	cfg     Config
	pools   []*poolState
	byKey   map[string]*poolState
	workers map[string]*workerState
	shed    map[string]float64
	shedAt  time.Time
	okSince time.Time
	tight   bool
	// unserved is Inputs.Unserved at the last decision.
	unserved     uint64
	haveUnserved bool
	// heldSeen is each pool's held demand at the last decision (held.go).
	heldSeen map[string]heldMark
}

// New builds a Controller.
func New(cfg Config) (*Controller, error) {
	cfg.fill()
	c := &Controller{cfg: cfg, byKey: map[string]*poolState{}, workers: map[string]*workerState{}, shed: map[string]float64{}, heldSeen: map[string]heldMark{}}
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
		ps := &poolState{Pool: p, rep: rep}
		c.pools = append(c.pools, ps)
		c.byKey[p.Key()] = ps
	}
	if len(c.pools) == 0 {
		return nil, errors.New("control: no pools")
	}
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
		if k := heartbeatPool(hb); k != "" {
			byPool[k] = append(byPool[k], hb)
		}
	}
	for id := range c.workers {
		if !live[id] {
			delete(c.workers, id)
		}
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
	for _, ps := range c.pools {
		g := c.guardHeld(ps, byPool[ps.Key()], in, &d)
		rd := c.scale(ps, byPool[ps.Key()], in, shares[ps.Key()], unserved*unservedShares[ps.Key()], highMiss, &d)
		rd = g.apply(ps, rd, &d)
		if rd.Desired >= ps.Max && highMiss {
			atMax = true
		}
		d.Replicas = append(d.Replicas, rd)
	}
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
		ps := c.byKey[heartbeatPool(hb)]
		rep, ok := c.replicaFor(hb, ps)
		if !ok || hb.Draining {
			continue
		}
		c.decideSpec(hb, st, rep, in, &d)
		c.decideBudget(hb, st, rep, in, highQueued > 0 || highMiss, &d)
	}
	c.decideWarmth(ws, byPool, &d, in)
	c.decideShed(in.Now, highMiss, atMax, high, &d)
	return d
}

func heartbeatPool(hb *schemas.Heartbeat) string {
	if len(hb.Models) == 0 || hb.GPU == "" {
		return ""
	}
	return PoolKey(hb.GPU, hb.Models[0].Name)
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

func (d *Decision) change(kind, target, from, to, reason string) {
	d.Changes = append(d.Changes, Change{Kind: kind, Target: target, From: from, To: to, Reason: reason})
}

func ftoa(f float64) string { return fmt.Sprintf("%.3g", f) }

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

func ceilDiv(x, y float64) int {
	if y <= 0 {
		return 0
	}
	return int(math.Ceil(x/y - 1e-9))
}
