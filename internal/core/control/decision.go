package control

import (
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// What one Decide reads (Inputs: heartbeats, queue, attainment, held
// demand) and what it answers (Decision: replicas, speculative decoding,
// budgets, warmth and shedding margins, each change with its reason).

// Attainment counts recent results of one class: how many met their SLO.
type Attainment struct{ Met, Total int }

// Ratio is Met/Total (1 when there is nothing to judge).
func (a Attainment) Ratio() float64 {
	if a.Total == 0 {
		return 1
	}
	return float64(a.Met) / float64(a.Total)
}

// Mix is the recent request shape: mean prompt and output tokens, and the
// mean of the squared prompt lengths. Attention makes a prompt's prefill
// cost grow with its square, so a mix with a long tail of prompts costs
// more than its mean prompt says; PromptTokensSquared 0 means no spread
// (every prompt PromptTokens long). CachedTokens is the mean of the prompt
// tokens a worker found already in its KV cache (for a split request, the
// prefill worker): the rest are what a prefill computes, which is what a
// prefill pool is sized by (phases.go); 0 counts every prompt token as
// uncached. PromptTokensCubed and PromptTokensFourth are the means of the
// prompt lengths' third and fourth powers: a prefill's time grows with
// the square of its prompt, so the second moment of prefill times — what
// a prefill queue's wait grows with — needs them (0: not measured).
type Mix struct {
	PromptTokens, OutputTokens, PromptTokensSquared, CachedTokens float64
	PromptTokensCubed, PromptTokensFourth                         float64
}

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
	// QueuedByModel is the router queue's depth per model, where the
	// caller knows it (the simulator does). With GPUs that change model
	// (Config.ShiftModels) it says which model the queue waits for; without
	// it the queue is split over the pools by capacity, as for scaling.
	QueuedByModel map[string]int
	// Starting is replicas per pool key that were started but have not
	// heartbeated yet; they count as provisioned.
	Starting map[string]int
	// Booked is, by worker ID, the requests routers dispatched to the
	// worker that its latest heartbeat does not show yet (the bookings a
	// heartbeat has not absorbed: fleet.Worker.BookedRequests). A request
	// dispatched at once leaves the router's queue before any heartbeat
	// counts it, so without them a burst's first decision reads only the
	// share the routers held: at a 120 req/s burst a router that placed
	// nearly everything at once read arrivals of 21/s. They count as
	// arrivals in the system, not as backlog.
	Booked map[string]int
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
	Kind   string // KindReplicas, KindSpec, KindBudget, KindWarmth, KindRole, KindSwitch, KindShed
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
	// Role is the pool's fixed role ("" for a pool of whole requests). A
	// pool with one is sized in its phase's tokens: TokenRate is the
	// uncached prompt tokens (prefill) or output tokens (decode) per second
	// it plans for, TokenCapacity one replica's at the phase's target.
	Role                     string
	TokenRate, TokenCapacity float64
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

// RoleDecision turns a worker of a pool of whole requests into one phase
// (schemas.RolePrefill) or back (schemas.RoleBoth); the worker applies it
// to the dispatches it takes and to its heartbeat's Role.
type RoleDecision struct {
	Worker string
	Pool   string
	Role   string
	Reason string
}

// SwitchDecision moves one GPU from one model to another (Config.ShiftModels,
// shift.go): the worker stops taking requests for From, finishes those it
// holds, puts From's weights to sleep in host memory and brings To's into
// HBM from the tier they sit in (FromTier: host when asleep there, a wake
// of about a second). Seconds is the switch's priced duration, drain
// included.
type SwitchDecision struct {
	Worker   string
	GPU      string
	From, To string
	FromTier string
	Seconds  float64
	Reason   string
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
	Roles    []RoleDecision
	Switches []SwitchDecision
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
	KindRole     = "role"
	KindShed     = "shed"
	KindSwitch   = "switch"
)

func (d *Decision) change(kind, target, from, to, reason string) {
	d.Changes = append(d.Changes, Change{Kind: kind, Target: target, From: from, To: to, Reason: reason})
}
