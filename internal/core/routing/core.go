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
	"maps"
	"slices"
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
	// Catalog is the catalog Cost and Policy read. When it can learn
	// (catalog.Learning), the core teaches it every model a heartbeat
	// describes (ModelState.Spec) as it applies the heartbeat — the
	// catalog's only change at run time reaches it as an Input, journaled
	// with the heartbeat — so a replay whose core is given a fresh
	// learning copy of the same configured catalog learns the same models
	// at the same input and prices every placement as the live router did.
	// Nil, or one that cannot learn, learns nothing.
	Catalog *catalog.Catalog
	// Queue is the wait queue's discipline for the Switchyard placer (the
	// zero value: weighted classes, EDF, adaptive LIFO, expiry; Weights
	// default to QueueWeights). A baseline that implements
	// baselines.Gatekeeper brings its own discipline and gate instead.
	Queue queue.Discipline
	// FixedError keeps the policy's prediction error as configured: the
	// core learns no spread per GPU kind and phase from results
	// (calibrate.go). The zero value learns.
	FixedError bool
}

// Core is the router's state machine. Not safe for concurrent use.
type Core struct {
	cfg     Config
	fleet   *fleet.Fleet
	q       *queue.Queue[*Held]
	held    map[string]*Held
	acts    []Action
	expired []queue.Item[*Held]
	// passBlocked counts, per priority rank, the requests a queue pass has
	// offered and left blocked so far: out of the queue for the pass, still
	// waiting in the router (higherWaiting).
	passBlocked []int
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
	// calib is the prediction error learned from results (calibrate.go).
	calib calibration
}

type replicaKind struct {
	gpu, dtype string
	tp         int
}

type inflight struct {
	worker    string
	adm       schemas.Admitted
	predicted float64
	placedAt  time.Time
	// phase is the leg in flight on worker (schemas.PhasePrefill or
	// PhaseDecode for a split request, "" for a whole one); a prefill
	// leg carries the decode leg planned with it (split.go).
	phase           string
	decodeWorker    string
	transfer        float64
	decodePredicted float64
	// gpu, ttft and tpot are the worker's GPU kind and the TTFT and TPOT
	// predicted at placement (whole requests), which calibrate compares
	// the result with.
	gpu        string
	ttft, tpot float64
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
		approxKV: map[string]bool{}, preciseKV: map[string]bool{}, gate: gate, pools: map[string]poolSeen{}, warm: map[string]*warmup{},
		passBlocked: make([]int, len(schemas.Priorities))}
}

// Fleet is the core's view of the fleet, for a caller that reads it
// between inputs (the simulator's autoscaler, benchmarks). Changing it
// outside Apply breaks replay.
func (c *Core) Fleet() *fleet.Fleet { return c.fleet }

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
		if in.Heartbeat != nil {
			c.heartbeat(in.Heartbeat, in.At)
		}
	case InKV:
		if in.KV != nil {
			c.kvEvent(in.KV, in.At)
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
		c.tick(in.At)
	case InDispatchFailed:
		// The dispatch never reached the stream: undo the booking and hold
		// the request again. A decode leg's attempt already stored its
		// prefill leg's dispatch, which would dedupe a second split of the
		// same attempt: it is re-placed as the next attempt instead, the
		// handle's message (handle) carrying it until that is stored.
		if f, ok := c.placedOn[in.ID]; ok && f.phase == schemas.PhaseDecode {
			c.replace(in.ID, f, schemas.CodeInternal, "the decode leg's dispatch was not stored", "", in.At, handle)
			break
		}
		c.unbook(in.ID)
		delete(c.placedOn, in.ID)
		if in.Admitted != nil {
			c.admit(*in.Admitted, handle, in.At)
		}
	case InAdopt:
		c.adopt(in.Adopted, in.At)
	case InPeerBooking:
		c.peerBookings(in.Bookings, in.At)
	case InFairShare:
		c.fairShare(in)
	case InPool:
		c.notePool(in.Pool, in.At)
	case InHandoff:
		c.handoff(in.Handoff, handle, in.At)
		c.placeReady(in.At)
	case InForget:
		for id := range c.held {
			c.q.Remove(id)
			delete(c.held, id)
		}
		clear(c.warm)
	}
	return c.acts
}

// heartbeat applies one worker's heartbeat: the models it describes are
// taught to the catalog first (learn), so this very input's placements
// already price them; then the fleet view and the worker's breaker, and
// what waits may fit now.
func (c *Core) heartbeat(hb *schemas.Heartbeat, now time.Time) {
	c.learn(hb, now)
	id := hb.WorkerID
	approx := hb.Backend == "openai" && !c.preciseKV[id]
	if c.fleet.ApplyHeartbeat(hb, now) && !approx {
		c.acts = append(c.acts, Action{Kind: ActSnapshot, Worker: id})
	}
	if approx {
		c.approxKV[id] = true
	}
	// The receive time, not the worker's clock, decides staleness.
	if t, ok := c.breakers.Heartbeat(id, now, now); ok {
		c.transition(t)
	}
	// A heartbeat is news of capacity: what waits may fit now.
	c.placeReady(now)
}

// kvEvent applies one worker's KV event to the prefix index.
func (c *Core) kvEvent(ev *schemas.KVEvent, now time.Time) {
	if !c.preciseKV[ev.WorkerID] {
		// A worker that sends KV events (a sim engine, or a real one
		// relaying vLLM's) is indexed from them, never guessed at.
		delete(c.approxKV, ev.WorkerID)
		c.preciseKV[ev.WorkerID] = true
	}
	if c.fleet.ApplyKV(ev, now) {
		c.acts = append(c.acts, Action{Kind: ActSnapshot, Worker: ev.WorkerID})
	}
}

// tick is the clock: every half second the breakers, overdue and departed
// work are swept; every tick what waits is offered again.
func (c *Core) tick(now time.Time) {
	if now.Sub(c.lastSweep) >= time.Second/2 {
		c.lastSweep = now
		for _, t := range c.breakers.Tick(now) {
			c.transition(t)
		}
		c.reapOverdue(now)
		c.forgetDeparted(now)
	}
	c.placeReady(now)
	c.heldDemandEvents(now)
}

// adopt takes over in-flight dispatches an earlier router made (InAdopt).
func (c *Core) adopt(adopted []schemas.Dispatch, now time.Time) {
	for i := range adopted {
		d := &adopted[i]
		id := d.Admitted.Request.ID
		if f, known := c.placedOn[id]; known && f.adm.Attempt >= d.Admitted.Attempt {
			continue
		}
		if _, held := c.held[id]; held {
			continue
		}
		c.placedOn[id] = &inflight{worker: d.WorkerID, adm: d.Admitted, predicted: d.PredictedSeconds, placedAt: d.PlacedAt,
			phase: d.Phase, decodeWorker: d.DecodeWorker, transfer: d.TransferSeconds}
	}
	// A worker that went silent before this router took over had its
	// loss handled when nothing was adopted yet: what it held is
	// re-placed now, as if the loss were seen with the work in hand.
	lost := map[string]bool{}
	for i := range adopted {
		w := adopted[i].WorkerID
		c.breakers.Expect(w, now)
		if c.breakers.Silent(w) {
			lost[w] = true
		}
	}
	for _, w := range slices.Sorted(maps.Keys(lost)) {
		c.workerLost(w, now)
	}
}

func (c *Core) admit(adm schemas.Admitted, handle any, now time.Time) {
	id := adm.Request.ID
	if old, dup := c.held[id]; dup {
		// Held is the request as held; Handle is the duplicate delivery's.
		// The shell tells a redelivery of the held message (which must not
		// be acked: the request lives only here) from a second message.
		c.acts = append(c.acts, Action{Kind: ActDuplicate, ID: id, Held: old, Handle: handle})
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
