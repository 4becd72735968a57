// Package routing owns the router's decision state machine: the fleet
// view, the deadline-aware wait queue and the placement policy, advanced
// only by Inputs (a heartbeat, a KV event, an admitted request, a released
// booking, a cancel, a clock tick) and answering with Actions (dispatch to
// a worker, fail with a result, note a delay, ask for a KV snapshot).
//
// It is pure and deterministic: the same Inputs in the same order give the
// same Actions. The router shell journals every Input before applying it,
// so `switchyard replay` can feed a recorded window through a fresh Core
// and reproduce each placement exactly — or, with another policy, answer
// "what if".
package routing

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/baselines"
	"github.com/switchyard-ai/switchyard/internal/core/breaker"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/internal/core/retry"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Input kinds.
const (
	InHeartbeat      = "hb"
	InKV             = "kv"
	InAdmitted       = "admit"
	InReleased       = "release"
	InCancel         = "cancel"
	InTick           = "tick"
	InDispatchFailed = "dispatch_failed"
	InForget         = "forget"
	// InAdopt hands a new leader the requests an earlier router dispatched
	// that have no final result yet, read back from the workers' dispatch
	// consumers, so it can re-place them if their worker is dead.
	InAdopt = "adopt"
)

// Input is one thing that happened to the router, with the time it
// happened. It is what the journal records.
type Input struct {
	Kind      string             `json:"kind"`
	At        time.Time          `json:"at"`
	Heartbeat *schemas.Heartbeat `json:"hb,omitempty"`
	KV        *schemas.KVEvent   `json:"kv,omitempty"`
	Admitted  *schemas.Admitted  `json:"admitted,omitempty"`
	Cancel    *schemas.Cancel    `json:"cancel,omitempty"`
	// Result is the final result that releases a request (its outcome
	// feeds the worker's circuit breaker).
	Result *ResultSummary `json:"result,omitempty"`
	// Adopted lists in-flight dispatches to take over (InAdopt).
	Adopted []schemas.Dispatch `json:"adopted,omitempty"`
	// Bookings are another router's bookings (InPeerBooking).
	Bookings []PeerBooking `json:"bookings,omitempty"`
	// Fair is another router's fairness report (InFairShare; ID names it).
	Fair *queue.Report `json:"fair,omitempty"`
	// Pool is a pool the controller scales (InPool, warmup.go).
	Pool *PoolSpec `json:"pool,omitempty"`
	// ID names the request of a release or a failed dispatch, or the peer
	// of a fairness report.
	ID string `json:"id,omitempty"`
}

// ResultSummary is what the router needs from a final result.
type ResultSummary struct {
	Status   string  `json:"status"`
	Code     string  `json:"code,omitempty"`
	WorkerID string  `json:"worker_id,omitempty"`
	WorkMs   float64 `json:"work_ms,omitempty"` // time on the worker: total minus queue
}

// Summarize reduces a result to what the router journals.
func SummarizeResult(r *schemas.Result) *ResultSummary {
	s := &ResultSummary{Status: r.Status, WorkerID: r.WorkerID, WorkMs: r.Timing.TotalMs - r.Timing.QueueMs}
	if r.Error != nil {
		s.Code = r.Error.Code
	}
	return s
}

// Action kinds.
const (
	ActDispatch = "dispatch"
	ActFail     = "fail"
	ActDelayed  = "delayed"
	ActSnapshot = "snapshot"
	// ActDuplicate means an admitted request was already held: the shell
	// acks the duplicate delivery and does nothing else.
	ActDuplicate = "duplicate"
	// ActEvent is a decision to record as an event (breaker transitions,
	// retries); Event holds it.
	ActEvent = "event"
)

// Action is what the shell must do.
type Action struct {
	Kind string
	ID   string
	// Held is the request the action is about (dispatch, fail, delayed).
	Held *Held
	// Worker is the dispatch target, or the worker to snapshot.
	Worker string
	GPU    string
	Policy string
	Terms  placement.Terms
	// Candidates summarises the best few candidates, for the placement
	// event's explanation.
	Candidates []Candidate
	// Rejected, Considered and Skipped count workers filtered out, passed,
	// and pruned by the placer's lower bound.
	Rejected, Considered, Skipped int
	Err                           *schemas.Error
	Reason                        string
	Event                         *schemas.Event
	// Booking is what a dispatch booked on Worker, for the shell to share
	// with peer routers (InPeerBooking).
	Booking PeerBooking
}

// Candidate is one candidate's breakdown, copied out of the placer's scratch.
type Candidate struct {
	Worker string          `json:"worker"`
	GPU    string          `json:"gpu"`
	Terms  placement.Terms `json:"terms"`
}

// Held is an admitted request the router holds until it is placed or
// answered. Handle is the shell's (its unacked message); the core never
// touches it.
type Held struct {
	Adm          schemas.Admitted
	Handle       any
	WaitingSince time.Time
	Reason       string
}

// Config configures a Core.
type Config struct {
	Policy placement.Policy
	// Cost predicts the minimum service time used for queue expiry.
	Cost         placement.CostModel
	Fleet        fleet.Options
	QueueWeights map[string]int
	// MaxBlocked bounds how many requests one pass tries after the first
	// that cannot be placed yet (a smaller one may still fit).
	MaxBlocked int
	// ExplainTop is how many candidates a dispatch action explains.
	ExplainTop int
	// Breaker and Retry configure circuit breakers and retry budgets;
	// zero values take their packages' defaults.
	Breaker breaker.Config
	Retry   retry.Config
	// Queue is the wait queue's discipline for the Switchyard placer (the
	// zero value: weighted classes, EDF, adaptive LIFO, expiry; Weights
	// default to QueueWeights). A baseline that implements
	// baselines.Gatekeeper brings its own discipline and gate instead.
	Queue queue.Discipline
}

// Core is the router's state machine. Not safe for concurrent use.
type Core struct {
	cfg     Config
	fleet   *fleet.Fleet
	q       *queue.Queue[*Held]
	held    map[string]*Held
	acts    []Action
	expired []queue.Item[*Held]
	// placedOn remembers each dispatched request until its result
	// releases it: for outstanding-work policies, breaker outcomes, and
	// re-placing the work of a worker that died.
	placedOn map[string]*inflight
	breakers *breaker.Set
	budget   *retry.Budget
	// suspect are workers whose breaker is not closed, kept sorted.
	suspect   []string
	exclude   []string
	lastSweep time.Time
	// approxKV are workers that publish no KV events (a real server behind
	// the openai backend): the router assumes a dispatched prompt's blocks
	// are cached there, and the index's per-worker LRU cap ages them out.
	approxKV map[string]bool
	// preciseKV are workers that have sent KV events: indexed from them.
	preciseKV map[string]bool
	// gate is a baseline's own flow control, nil for the Switchyard placer.
	gate baselines.Gatekeeper
	// combos is minServiceParts' scratch: the distinct (GPU, TP, dtype)
	// replica kinds serving a model.
	combos []replicaKind
	// pools are the scalable pools the controller described, by key, and
	// warm the requests held for a pool's cold start (warmup.go).
	pools map[string]poolSeen
	warm  map[string]*warmup
}

type replicaKind struct {
	gpu, dtype string
	tp         int
}

// ForgetAfter is how long a worker may stay silent before the router drops
// it from its fleet view, breakers and prefix index. Workers come and go
// with autoscaling, each under a new id; without forgetting, every one ever
// seen would stay in the view (failing closed, but costing every placement
// a look) and keep a breaker. By then anything dispatched to it has been
// re-placed or reaped.
const ForgetAfter = 10 * time.Minute

// OverdueGrace is how long past its deadline a dispatched request may go
// without a result before the router answers it with deadline_exceeded: a
// worker that is alive but wedged must not leave a client waiting forever.
const OverdueGrace = 5 * time.Second

type inflight struct {
	worker    string
	adm       schemas.Admitted
	predicted float64
	placedAt  time.Time
}

// Completer is implemented by policies that keep router-side state about
// in-flight requests (the least-loaded and cache-aware baselines).
type Completer interface {
	Done(requestID, workerID string)
}

// New returns an empty Core.
func New(cfg Config) *Core {
	if cfg.Policy == nil {
		cfg.Policy = placement.New(cfg.Cost, placement.Options{})
	}
	if cfg.MaxBlocked <= 0 {
		cfg.MaxBlocked = 16
	}
	if cfg.ExplainTop <= 0 {
		cfg.ExplainTop = 8
	}
	disc := cfg.Queue
	if disc.Weights == nil {
		disc.Weights = cfg.QueueWeights
	}
	gate, _ := cfg.Policy.(baselines.Gatekeeper)
	if gate != nil {
		disc = gate.QueueDiscipline()
		// The systems the baselines re-implement eject endpoints that fail
		// or go silent (readiness), never one that is merely slow.
		cfg.Breaker.IgnoreLatency = true
	}
	return &Core{cfg: cfg, fleet: fleet.New(cfg.Fleet), q: queue.NewWith[*Held](disc), held: map[string]*Held{},
		placedOn: map[string]*inflight{}, breakers: breaker.NewSet(cfg.Breaker), budget: retry.NewBudget(cfg.Retry),
		approxKV: map[string]bool{}, preciseKV: map[string]bool{}, gate: gate, pools: map[string]poolSeen{}, warm: map[string]*warmup{}}
}

// Fleet is the core's view of the fleet, for a caller that reads it
// between inputs (the simulator's autoscaler, benchmarks). Changing it
// outside Apply breaks replay.
func (c *Core) Fleet() *fleet.Fleet { return c.fleet }

// InFlight is the number of dispatched requests without a final result.
func (c *Core) InFlight() int { return len(c.placedOn) }

// Policy names the placement policy.
func (c *Core) Policy() string { return c.cfg.Policy.Name() }

// HeldCount returns the number of requests held.
func (c *Core) HeldCount() int { return len(c.held) }

// Queued is the number of requests waiting for placement.
func (c *Core) Queued() int { return c.q.Len() }

// QueuedClass is the number waiting in one class.
func (c *Core) QueuedClass(class string) int { return c.q.LenClass(class) }

// Each calls fn for every held request (for in-progress acks).
func (c *Core) Each(fn func(*Held)) {
	for _, h := range c.held {
		fn(h)
	}
}

// Apply advances the state machine by one input. The returned actions are
// valid until the next call. handle is attached to an admitted request.
func (c *Core) Apply(in Input, handle any) []Action {
	c.acts = c.acts[:0]
	switch in.Kind {
	case InHeartbeat:
		if in.Heartbeat == nil {
			break
		}
		id := in.Heartbeat.WorkerID
		approx := in.Heartbeat.Backend == "openai" && !c.preciseKV[id]
		if c.fleet.ApplyHeartbeat(in.Heartbeat, in.At) && !approx {
			c.acts = append(c.acts, Action{Kind: ActSnapshot, Worker: id})
		}
		if approx {
			c.approxKV[id] = true
		}
		// The receive time, not the worker's clock, decides staleness.
		if t, ok := c.breakers.Heartbeat(in.Heartbeat.WorkerID, in.At, in.At); ok {
			c.transition(t)
		}
		// A heartbeat is news of capacity: what waits may fit now.
		c.placeReady(in.At)
	case InKV:
		if in.KV != nil && !c.preciseKV[in.KV.WorkerID] {
			// A worker that sends KV events (a sim engine, or a real one
			// relaying vLLM's) is indexed from them, never guessed at.
			delete(c.approxKV, in.KV.WorkerID)
			c.preciseKV[in.KV.WorkerID] = true
		}
		if in.KV != nil && c.fleet.ApplyKV(in.KV, in.At) {
			c.acts = append(c.acts, Action{Kind: ActSnapshot, Worker: in.KV.WorkerID})
		}
	case InAdmitted:
		if in.Admitted != nil {
			c.admit(*in.Admitted, handle, in.At)
		}
	case InReleased:
		c.release(in.ID, in.Result, in.At)
		c.placeReady(in.At) // the finished request freed its worker
	case InCancel:
		c.cancel(in.Cancel)
	case InTick:
		if in.At.Sub(c.lastSweep) >= time.Second/2 {
			c.lastSweep = in.At
			for _, t := range c.breakers.Tick(in.At) {
				c.transition(t)
			}
			c.reapOverdue(in.At)
			c.forgetDeparted(in.At)
		}
		c.placeReady(in.At)
		c.heldDemandEvents(in.At)
	case InDispatchFailed:
		// The dispatch never reached the stream: undo the booking and hold
		// the request again.
		c.fleet.Unreserve(in.ID)
		delete(c.placedOn, in.ID)
		if in.Admitted != nil {
			c.admit(*in.Admitted, handle, in.At)
		}
	case InAdopt:
		for i := range in.Adopted {
			d := &in.Adopted[i]
			id := d.Admitted.Request.ID
			if f, known := c.placedOn[id]; known && f.adm.Attempt >= d.Admitted.Attempt {
				continue
			}
			if _, held := c.held[id]; held {
				continue
			}
			c.placedOn[id] = &inflight{worker: d.WorkerID, adm: d.Admitted, predicted: d.PredictedSeconds, placedAt: d.PlacedAt}
		}
		// A worker that went silent before this router took over had its
		// loss handled when nothing was adopted yet: what it held is
		// re-placed now, as if the loss were seen with the work in hand.
		lost := map[string]bool{}
		for i := range in.Adopted {
			w := in.Adopted[i].WorkerID
			c.breakers.Expect(w, in.At)
			if c.breakers.Silent(w) {
				lost[w] = true
			}
		}
		for _, w := range slices.Sorted(maps.Keys(lost)) {
			c.workerLost(w, in.At)
		}
	case InPeerBooking:
		c.peerBookings(in.Bookings, in.At)
	case InFairShare:
		c.fairShare(in)
	case InPool:
		c.notePool(in.Pool, in.At)
	case InForget:
		for id := range c.held {
			c.q.Remove(id)
			delete(c.held, id)
		}
		clear(c.warm)
	}
	return c.acts
}

func (c *Core) admit(adm schemas.Admitted, handle any, now time.Time) {
	id := adm.Request.ID
	if _, dup := c.held[id]; dup {
		c.acts = append(c.acts, Action{Kind: ActDuplicate, ID: id, Held: &Held{Adm: adm, Handle: handle}})
		return
	}
	h := &Held{Adm: adm, Handle: handle}
	c.held[id] = h
	if adm.Attempt == 0 {
		c.budget.Request(adm.Tenant, now)
	}
	if err := c.q.Push(c.item(h, now)); err != nil {
		c.fail(h, schemas.Errf(schemas.CodeInvalidPriority, "priority", "%v", err))
		return
	}
	c.placeReady(now)
}

func (c *Core) cancel(cn *schemas.Cancel) {
	if cn == nil {
		return
	}
	h := c.held[cn.RequestID]
	if h == nil || h.Adm.Tenant != cn.Tenant {
		return
	}
	c.q.Remove(cn.RequestID)
	c.fail(h, schemas.Errf(schemas.CodeCancelled, "", "cancelled before placement: %s", cn.Reason))
}

// fail hands a request back to the shell for an error result. The core
// lets go of it at once; if the result cannot be published the shell leaves
// the message unacked and JetStream delivers it again as a new admission.
func (c *Core) fail(h *Held, e *schemas.Error) {
	delete(c.held, h.Adm.Request.ID)
	c.acts = append(c.acts, Action{Kind: ActFail, ID: h.Adm.Request.ID, Held: h, Err: e, Reason: e.Message})
}

// placeReady expires requests that can no longer meet their deadline,
// then places queued requests in queue order. A request that cannot be
// placed yet stays queued (delayed, never dropped); one that never can is
// failed as unplaceable.
func (c *Core) placeReady(now time.Time) {
	c.releaseWarm(now)
	if c.q.Len() == 0 {
		return
	}
	c.expired = c.q.Pass(now, c.cfg.MaxBlocked, c.expired[:0], func(it queue.Item[*Held]) queue.Outcome {
		return c.place(it, now)
	})
	for _, it := range c.expired {
		h := it.Payload
		if c.held[it.ID] != h {
			continue
		}
		c.fail(h, schemas.Errf(schemas.CodeDeadlineExceeded, "", "its deadline cannot be met any more after %s queued; not computed",
			now.Sub(h.Adm.SubmittedAt).Round(time.Millisecond)))
	}
	clear(c.expired)
}

// place offers one queued request to the policy: dispatch it, fail it as
// unplaceable, or leave it blocked for a later pass.
func (c *Core) place(it queue.Item[*Held], now time.Time) queue.Outcome {
	h := it.Payload
	if c.held[it.ID] != h {
		return queue.Answered // cancelled or answered while queued
	}
	req := placement.FromAdmitted(&h.Adm, "", h.Adm.WorkflowStartedAt)
	if c.gate != nil {
		v := c.gate.Gate(c.fleet, &req, it.Enqueued, c.q.LenClass(h.Adm.Priority)+1, now)
		if v.Reject != nil {
			c.fail(h, v.Reject)
			return queue.Answered
		}
		if v.Hold {
			c.delayed(h, it.ID, now, v.String())
			return queue.Blocked
		}
	}
	breakerExcluded := c.excludeSuspects(&req, now)
	dec := c.cfg.Policy.Place(c.fleet, &req, now)
	if !dec.OK() {
		// No live worker serves the model: hold it for a pool's cold start
		// (out of the queue, so it neither blocks the pass nor counts as
		// queued work), or answer it now if no pool can warm one in time.
		if !breakerExcluded && (dec.Unresolvable || c.fleet.Len() == 0) && !c.servesLive(h.Adm.Model, now) &&
			c.holdOrRefuse(h, it.Enqueued, now) {
			return queue.Answered
		}
		// A worker behind an open breaker may come back: waiting helps.
		if dec.Unresolvable && c.fleet.Len() > 0 && !breakerExcluded {
			c.fail(h, schemas.Errf(schemas.CodeUnplaceable, "model", "no GPU in the fleet can serve model %q: %s", h.Adm.Model, Summarize(dec)))
			return queue.Answered
		}
		c.delayed(h, it.ID, now, Summarize(dec))
		return queue.Blocked
	}
	// Book only the prompt tokens the cached prefix does not cover: the
	// booking stands until a heartbeat absorbs it, and booking cached
	// tokens made the worker holding a prefix look busiest.
	prefill, output, blocks := dec.Booking(h.Adm.PromptTokens, h.Adm.Request.MaxTokens)
	c.fleet.Reserve(dec.Worker.ID, it.ID, h.Adm.Priority, prefill, output, blocks, now)
	a := Action{Kind: ActDispatch, ID: it.ID, Held: h, Worker: dec.Worker.ID, GPU: dec.Worker.GPU, Policy: dec.Policy,
		Terms: dec.Terms, Rejected: len(dec.Rejections), Considered: dec.Considered, Skipped: dec.Skipped,
		Booking: PeerBooking{ID: it.ID, Worker: dec.Worker.ID, Class: h.Adm.Priority, Prefill: prefill, Output: output, Blocks: blocks}}
	for i, cd := range dec.Candidates {
		if i == c.cfg.ExplainTop {
			break
		}
		a.Candidates = append(a.Candidates, Candidate{Worker: cd.Worker.ID, GPU: cd.Worker.GPU, Terms: cd.Terms})
	}
	delete(c.held, it.ID)
	c.placedOn[it.ID] = &inflight{worker: a.Worker, adm: h.Adm, predicted: dec.Terms.CompletionSeconds, placedAt: now}
	if c.approxKV[a.Worker] {
		c.fleet.Prefix().Stored(dec.Worker.Idx, h.Adm.BlockHashes)
	}
	if c.breakers.State(a.Worker) != breaker.Closed {
		c.breakers.Allow(a.Worker, now) // commit the half-open probe
	}
	c.acts = append(c.acts, a)
	return queue.Placed
}

// delayed notes, once per request, that it waits and why.
func (c *Core) delayed(h *Held, id string, now time.Time, reason string) {
	if !h.WaitingSince.IsZero() {
		return
	}
	h.WaitingSince, h.Reason = now, reason
	c.acts = append(c.acts, Action{Kind: ActDelayed, ID: id, Held: h, Reason: reason})
}

// Summarize says why a placement found no worker, by reason counts.
func Summarize(dec *placement.Decision) string {
	var b strings.Builder
	for reason, n := range dec.Counts {
		if n > 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d %s", n, placement.Reason(reason))
		}
	}
	if b.Len() == 0 {
		return "no live workers"
	}
	return b.String()
}

// item is h's queue entry. Its minimum service time is the expiry bar.
func (c *Core) item(h *Held, now time.Time) queue.Item[*Held] {
	return queue.Item[*Held]{ID: h.Adm.Request.ID, Priority: h.Adm.Priority, Tenant: h.Adm.Tenant, Cost: FairCost(&h.Adm),
		Deadline: h.Adm.Deadline, MinService: c.expiryBar(&h.Adm), Enqueued: now, Payload: h}
}

// expiryBar is the fastest the request could possibly be served: on the
// fastest kind of replica serving its model, alone, with all of its
// prompt but the last token already cached. A request that cannot finish
// by its deadline even so can be answered now; any looser bar (assuming
// nothing cached, as a retry must) would expire requests a worker holding
// their prefix could still serve in time.
func (c *Core) expiryBar(a *schemas.Admitted) time.Duration {
	p, d := c.minServiceParts(a, true)
	return time.Duration((p + d) * float64(time.Second))
}

// CatalogWeights sizes model weights from the catalog, for placement's
// fits-in-HBM and headroom checks.
func CatalogWeights(cat *catalog.Catalog) func(model, dtype string) uint64 {
	return func(model, dtype string) uint64 {
		m, ok := cat.Model(model)
		if !ok {
			return 0
		}
		return uint64(float64(m.Params) * catalog.DtypeBytes(dtype))
	}
}

// PolicyNamed returns a fresh placement policy by name: "switchyard" (the
// seven-axis placer with the catalog's weight sizes), "switchyard-no-<axis>"
// (the same with one axis switched off, for ablations), or any baseline.
// The live router, replay and the simulator all build their policy here,
// so a replay with the recorded name runs exactly the recorded policy and
// a simulated figure is the shipped policy's.
func PolicyNamed(name string, cat *catalog.Catalog, cost placement.CostModel) (placement.Policy, error) {
	if name == "" || name == "switchyard" {
		return placement.New(cost, placement.Options{WeightBytes: CatalogWeights(cat)}), nil
	}
	if axis, ok := strings.CutPrefix(name, "switchyard-no-"); ok {
		if !slices.Contains(placement.Axes, axis) {
			return nil, fmt.Errorf("routing: unknown axis %q (want one of %s)", axis, strings.Join(placement.Axes, ", "))
		}
		return placement.New(cost, placement.Options{WeightBytes: CatalogWeights(cat), Disabled: map[string]bool{axis: true}}), nil
	}
	return baselines.New(name, cost)
}

// MaxEjectFraction caps how much of the fleet breakers may take out of
// placement at once (Envoy's max_ejection_percent idea): when most of the
// fleet looks sick the likelier culprit is shared (the bus, the load), and
// ejecting everyone would turn a slowdown into an outage.
const MaxEjectFraction = 0.5

// excludeSuspects adds workers whose breaker refuses traffic to the
// request's exclusions, reporting whether any was added.
func (c *Core) excludeSuspects(req *placement.Request, now time.Time) bool {
	if len(c.suspect) == 0 {
		return false
	}
	limit := max(1, int(float64(c.fleet.Len())*MaxEjectFraction))
	c.exclude = append(c.exclude[:0], req.Exclude...)
	added := 0
	for _, w := range c.suspect {
		if added == limit {
			break
		}
		if !c.breakers.Allowed(w, now) {
			c.exclude = append(c.exclude, w)
			added++
		}
	}
	req.Exclude = c.exclude
	return added > 0
}

// transition records a breaker state change; a worker whose breaker opened
// because it went silent has lost its in-flight work with its KV cache,
// so that work is re-placed under the retry budget.
func (c *Core) transition(t breaker.Transition) {
	if t.To == breaker.Open && t.Cause == breaker.CauseStale && c.departed(t.Worker) {
		// A worker that drained and then went quiet has left (scaled
		// down), not failed: forget it rather than open its breaker.
		c.acts = append(c.acts, Action{Kind: ActEvent, Worker: t.Worker, Event: &schemas.Event{
			Kind: "worker_departed", At: t.At, WorkerID: t.Worker, Reason: "drained, then stopped heartbeating"}})
		c.forget(t.Worker)
		c.refreshSuspects()
		return
	}
	c.refreshSuspects()
	c.acts = append(c.acts, Action{Kind: ActEvent, Worker: t.Worker, Event: &schemas.Event{
		Kind: t.EventKind(), At: t.At, WorkerID: t.Worker, Reason: t.Reason,
		Fields: map[string]any{"from": t.From.String(), "to": t.To.String(), "cause": string(t.Cause)}}})
	if t.To == breaker.Open && t.Cause == breaker.CauseStale {
		c.workerLost(t.Worker, t.At)
	}
}

// workerLost re-places, exactly once each, the requests dispatched to a
// worker that stopped heartbeating — if the retry budget allows and the
// deadline still covers a full re-prefill plus decode; otherwise the
// request fails fast with the reason. A late result from the lost worker
// is dropped by the result ledger.
func (c *Core) workerLost(worker string, now time.Time) {
	var ids []string
	for id, f := range c.placedOn {
		if f.worker == worker {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids) // deterministic order for replay
	for _, id := range ids {
		f := c.placedOn[id]
		delete(c.placedOn, id)
		c.fleet.Unreserve(id)
		if d, ok := c.cfg.Policy.(Completer); ok {
			d.Done(id, worker)
		}
		adm := f.adm
		prefill, decode := c.minServiceParts(&adm, false)
		dec := c.budget.Decide(retry.Input{Tenant: adm.Tenant, Now: now, Deadline: adm.Deadline, Attempt: adm.Attempt,
			PrefillSeconds: prefill, DecodeSeconds: decode})
		ev := &schemas.Event{Kind: "retry", At: now, RequestID: id, Tenant: adm.Tenant, WorkerID: worker, Reason: dec.Reason,
			Fields: map[string]any{"retry": dec.Retry, "attempt": adm.Attempt + 1, "remaining_s": dec.Remaining, "needed_s": dec.Needed, "scope": dec.Scope}}
		c.acts = append(c.acts, Action{Kind: ActEvent, ID: id, Worker: worker, Event: ev})
		if !dec.Retry {
			c.fail(&Held{Adm: adm}, dec.Error())
			continue
		}
		adm.Attempt++
		adm.ExcludeWorkers = append(append([]string(nil), adm.ExcludeWorkers...), worker)
		h := &Held{Adm: adm}
		c.held[id] = h
		c.q.Push(c.item(h, now))
	}
}

// release handles a request's final result: the booking ends, the policy
// learns the worker is free, and the outcome feeds that worker's breaker.
func (c *Core) release(id string, res *ResultSummary, now time.Time) {
	c.fleet.Unreserve(id)
	f, ok := c.placedOn[id]
	if !ok {
		return
	}
	delete(c.placedOn, id)
	if d, ok := c.cfg.Policy.(Completer); ok {
		d.Done(id, f.worker)
	}
	if res == nil || res.WorkerID == "" {
		return
	}
	o := breaker.Outcome{ObservedSeconds: res.WorkMs / 1000, PredictedSeconds: f.predicted}
	if res.Status != schemas.StatusOK && blamesWorker(res.Code) {
		o.Code = res.Code
	}
	if res.Status != schemas.StatusOK && o.Code == "" {
		return // the request's own fault or a cancel: says nothing about the GPU
	}
	if t, ok := c.breakers.Observe(res.WorkerID, o, now); ok {
		c.transition(t)
	}
}

// blamesWorker says which failure codes are the worker's fault.
func blamesWorker(code string) bool {
	switch code {
	case schemas.CodeWorkerFailed, schemas.CodeBackendError, schemas.CodeInternal:
		return true
	}
	return false
}

// minServiceParts predicts prefill and decode seconds on the fastest kind
// of replica serving a's model, with the dtype that replica serves it in:
// with everything but the last prompt token cached (cachedPrefix, the
// expiry bar's best case) or with nothing cached (a retry, which re-pays
// the prefill on a worker that never saw the prompt). When no worker lists
// the model, every worker is considered at bf16, as a cold load would run.
func (c *Core) minServiceParts(a *schemas.Admitted, cachedPrefix bool) (prefill, decode float64) {
	if c.cfg.Cost == nil {
		return 0, 0
	}
	c.combos = c.combos[:0]
	for pass := 0; pass < 2 && len(c.combos) == 0; pass++ {
		for _, w := range c.fleet.Workers() {
			if w == nil {
				continue
			}
			k := replicaKind{gpu: w.GPU, tp: max(1, w.TP), dtype: catalog.DtypeBF16}
			if pass == 0 {
				m, ok := w.Model(a.Model, "")
				if !ok {
					continue
				}
				if m.Dtype != "" {
					k.dtype = m.Dtype
				}
			}
			if !slices.Contains(c.combos, k) {
				c.combos = append(c.combos, k)
			}
		}
	}
	best := math.Inf(1)
	for _, k := range c.combos {
		var p float64
		if cachedPrefix && a.PromptTokens > 1 {
			p = c.cfg.Cost.PrefillSeconds(k.gpu, a.Model, k.dtype, k.tp, 1, a.PromptTokens-1)
		} else {
			p = c.cfg.Cost.PrefillSeconds(k.gpu, a.Model, k.dtype, k.tp, a.PromptTokens, 0)
		}
		d := c.cfg.Cost.DecodeSeconds(k.gpu, a.Model, k.dtype, k.tp, a.Request.MaxTokens, 1, a.PromptTokens)
		if p+d < best {
			best, prefill, decode = p+d, p, d
		}
	}
	if math.IsInf(best, 1) || math.IsNaN(best) {
		return 0, 0
	}
	return prefill, decode
}

// reapOverdue fails dispatched requests that are OverdueGrace past their
// deadline with no result. The ledger keeps this and a late worker result
// from both becoming final.
func (c *Core) reapOverdue(now time.Time) {
	var ids []string
	for id, f := range c.placedOn {
		if !f.adm.Deadline.IsZero() && now.Sub(f.adm.Deadline) > OverdueGrace {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		f := c.placedOn[id]
		delete(c.placedOn, id)
		c.fleet.Unreserve(id)
		if d, ok := c.cfg.Policy.(Completer); ok {
			d.Done(id, f.worker)
		}
		c.fail(&Held{Adm: f.adm}, schemas.Errf(schemas.CodeDeadlineExceeded, "", "no result from worker %s by %s past the deadline", f.worker, OverdueGrace))
		// An overdue request says the worker is slow, not that it failed:
		// it still heartbeats (a silent one is the staleness check's). It
		// counts as a latency outcome, so a worker wedged while the rest
		// keep up opens, and an overloaded fleet does not eject itself.
		o := breaker.Outcome{PredictedSeconds: f.predicted}
		if !f.placedAt.IsZero() {
			o.ObservedSeconds = now.Sub(f.placedAt).Seconds()
		}
		// A policy that predicts nothing (a baseline) learns nothing here.
		if o.PredictedSeconds > 0 && o.ObservedSeconds > 0 {
			if t, ok := c.breakers.Observe(f.worker, o, now); ok {
				c.transition(t)
			}
		}
	}
}

// forgetDeparted drops workers silent for longer than ForgetAfter.
func (c *Core) forgetDeparted(now time.Time) {
	var gone []string
	for _, w := range c.fleet.Workers() {
		if w != nil && !w.LastSeen.IsZero() && now.Sub(w.LastSeen) > ForgetAfter {
			gone = append(gone, w.ID)
		}
	}
	sort.Strings(gone) // deterministic for replay
	for _, id := range gone {
		c.forget(id)
	}
	if len(gone) > 0 {
		c.refreshSuspects()
	}
}

// departed reports whether a worker's last heartbeat said it was draining
// and nothing dispatched to it is still out.
func (c *Core) departed(worker string) bool {
	w := c.fleet.Get(worker)
	if w == nil || !w.Draining {
		return false
	}
	for _, f := range c.placedOn {
		if f.worker == worker {
			return false
		}
	}
	return true
}

// forget drops a worker from the fleet view, breakers and KV bookkeeping.
func (c *Core) forget(id string) {
	c.fleet.Remove(id)
	c.breakers.Forget(id)
	delete(c.approxKV, id)
	delete(c.preciseKV, id)
}

// refreshSuspects lists the workers whose breaker is not closed.
func (c *Core) refreshSuspects() {
	c.suspect = c.suspect[:0]
	for _, st := range c.breakers.States() {
		if st.State != breaker.Closed {
			c.suspect = append(c.suspect, st.Worker)
		}
	}
}
