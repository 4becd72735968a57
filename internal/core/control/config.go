package control

import (
	"maps"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/schemas"
)

// What the controller is configured with: the pools it scales and the
// bounds, windows and targets of every loop, with their defaults.

// Pool is one autoscaled group of identical replicas.
type Pool struct {
	GPU   string // catalog GPU name
	Model string // catalog model name
	Dtype string // default bf16
	TP    int    // default 1
	// Min and Max bound the desired replicas; Min 0 allows scale to zero.
	Min, Max int
	// Role fixes the phase the pool's replicas serve in disaggregated
	// serving (schemas.RolePrefill or RoleDecode): such a pool is sized for
	// its phase alone (phases.go). "" or schemas.RoleBoth is a pool of
	// whole requests, sized as before.
	Role string
}

// Key is the pool's name: "<gpu>:<model>" with dots replaced so it is one
// NATS subject token (model names such as llama-3.1-8b contain dots), and
// ":<role>" after it for a pool with a fixed role, so that a prefill and a
// decode pool of one GPU and model are two pools.
func (p Pool) Key() string { return RolePoolKey(p.GPU, p.Model, p.Role) }

// RolePoolKey names the pool of gpu × model × role: PoolKey for a pool of
// whole requests, PoolKey ":" role for one with a fixed role.
func RolePoolKey(gpu, model, role string) string {
	if FixedRole(role) {
		return PoolKey(gpu, model) + ":" + role
	}
	return PoolKey(gpu, model)
}

// FixedRole reports whether role limits a worker to one phase.
func FixedRole(role string) bool { return role == schemas.RolePrefill || role == schemas.RoleDecode }

// HeartbeatPool is the key of the pool a heartbeat's worker belongs to
// among the configured ones (configured reports whether a key is one): the
// pool of its GPU, model and role where that is configured, else the pool
// of its GPU and model. The fallback is what keeps a worker the controller
// turned from both to one role (RoleDecision) in the pool it was started
// in. "" when the heartbeat names no GPU or model.
func HeartbeatPool(hb *schemas.Heartbeat, configured func(key string) bool) string {
	if len(hb.Models) == 0 || hb.GPU == "" {
		return ""
	}
	if FixedRole(hb.Role) {
		if k := RolePoolKey(hb.GPU, hb.Models[0].Name, hb.Role); configured == nil || configured(k) {
			return k
		}
	}
	return PoolKey(hb.GPU, hb.Models[0].Name)
}

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
	// critical class's). A decode pool is sized to keep it (phases.go).
	ITLTarget time.Duration
	// TTFTTarget is the first-token objective a prefill pool is sized to
	// keep: TTFTBase plus PerPromptToken per prompt token, as the classes'
	// objectives are written (default the tightest of the HighClasses' in
	// placement.DefaultTargets: the critical class's 1 s + 100 µs/token).
	TTFTTarget placement.ClassTargets
	// AssignRoles lets the controller turn workers of a pool of whole
	// requests (role both, with a KV link) into prefill workers when the
	// uncached prompt tokens grow long enough to split, and back when they
	// shrink (phases.go, RoleDecision). Off by default: it needs workers
	// that carry out sy.ctl.role commands.
	AssignRoles bool
	// RoleDwell is the least time between two role changes in one pool
	// (default 60 s): a worker turned to prefill still finishes the
	// decodes it holds, so flapping would leave both roles half-served.
	RoleDwell time.Duration
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
	// model) — an episode judged at the size the controller asked for and
	// beyond what a fleet at SLOTarget misses by chance (scale.go);
	// CalibrationRecover the time constant of its recovery toward the
	// model while the SLO holds (default 30 min).
	MissCapacityCut    float64
	CalibrationRecover time.Duration
	// HighClasses are the classes held to SLOTarget (default critical and
	// interactive).
	HighClasses []string
	// HeadroomForAll buys burst and noise headroom for every class's
	// arrivals rather than only the HighClasses' share of them (the
	// default), trading GPU-hours for lower classes' attainment in bursts.
	HeadroomForAll bool
	// ClassWeights are the router's class-queue weights (default
	// queue.DefaultWeights, the router's own): sizing for the high classes
	// counts the share of the starts the lower classes take while every
	// class queues (queueshare.go).
	ClassWeights map[string]int
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
	// gains of Holt's method, and the trend's damping per interval when
	// forecasting over the lead time (default 0.8; 1 is undamped). The
	// trend gain, when not set, is the one at which the level gain's
	// recursion is critically damped (criticalTrendGain, about 0.0165 at
	// a level gain of 0.064): a larger one makes the forecast ring and,
	// after a fall, read below the demand still arriving. A TrendGain set
	// here is used as given, whatever the level gain.
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

	// StartTier is the weight tier a replica the scaler starts loads from
	// (a catalog weight tier; default schemas.TierDisk, local NVMe: the
	// 29.4 s cold start of llama-3.1-8b on an H100). Every lead time — the
	// forecast's horizon, the release holds, the cold start routers are
	// told — is this tier's load plus one interval. A faster tier here is a
	// what-if: the bound a faster cold start would set (docs/benchmarks.md).
	StartTier string
	// SleepOnRelease buys the return of a replica past its release hold in
	// the cheapest tier that arrives in time: when its level's recent
	// returns (before its first, the quiet before its first demand) say
	// that sleeping until they come costs less than the re-buys it would
	// save (sleep.go), the replica is put to sleep (weights to host
	// memory, a wake of about a second) instead of being released (a cold
	// start to get it back), and it is released once no return still to
	// come is worth its sleep. Only for fleets that carry out warmth
	// commands (off by default; `sim --sleep-on-release`).
	SleepOnRelease bool
	// ShiftModels lets GPUs change model (shift.go): pools of whole
	// requests on one GPU type (and TP) serving different models share that
	// type's Inventory, and the controller moves a GPU from a model whose
	// demand fell to one whose demand rose — the old model drained and put
	// to sleep in host memory, the new one woken (or loaded from the tier
	// its weights sit in) — instead of starting and releasing replicas. Such
	// pools are sized by the switches alone. Off by default: it needs
	// workers that carry out switch commands (the simulator's do).
	ShiftModels bool
	// Inventory is the GPUs of each type (catalog GPU name) the pools of
	// that type share when ShiftModels is on; every such type needs one.
	Inventory map[string]int
	// SleepPrice is the share of a replica's GPU price its sleep costs
	// (default 1 when the catalog's host tier holds the GPU, as vLLM's
	// sleep mode does: the device stays allocated and paid for). Below 1
	// only where the HBM a sleeping replica frees serves other work.
	SleepPrice float64

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
	if c.TTFTTarget.TTFTBase <= 0 {
		c.TTFTTarget = tightestTTFT(c.HighClasses)
	}
	def(&c.RoleDwell, time.Minute)
	def(&c.UpCooldown, 10*time.Second)
	def(&c.DownCooldown, 30*time.Second)
	def(&c.ZeroWindow, 5*time.Minute)
	if c.MaxDownStep <= 0 {
		c.MaxDownStep = 1
	}
	deff(&c.Tolerance, 0.1)
	if c.TrendDamping == 0 {
		c.TrendDamping = 0.8
	}
	deff(&c.DownLeadTimes, 1)
	if c.ClassWeights == nil {
		c.ClassWeights = maps.Clone(queue.DefaultWeights)
	}
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
	if c.StartTier == "" {
		c.StartTier = schemas.TierDisk
	}
	if c.SleepPrice <= 0 {
		c.SleepPrice = 1
		if t, ok := c.Catalog.Tier(schemas.TierHost); ok && !t.GPUHeld {
			c.SleepPrice = 0
		}
	}
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
