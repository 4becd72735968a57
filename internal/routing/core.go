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
	"math"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/baselines"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/fleet"
	"github.com/switchyard-ai/switchyard/internal/placement"
	"github.com/switchyard-ai/switchyard/internal/queue"
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
	// ID names the request of a release or a failed dispatch.
	ID string `json:"id,omitempty"`
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
	Rejected   int
	Err        *schemas.Error
	Reason     string
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
}

// Core is the router's state machine. Not safe for concurrent use.
type Core struct {
	cfg     Config
	fleet   *fleet.Fleet
	q       *queue.Queue[*Held]
	held    map[string]*Held
	acts    []Action
	blocked []queue.Item[*Held]
	// placedOn remembers where each dispatched request went until its
	// result releases it, for policies that count outstanding work.
	placedOn map[string]string
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
	return &Core{cfg: cfg, fleet: fleet.New(cfg.Fleet), q: queue.New[*Held](cfg.QueueWeights), held: map[string]*Held{},
		placedOn: map[string]string{}}
}

// Fleet exposes the fleet view (read-only use).
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
		if in.Heartbeat != nil && c.fleet.ApplyHeartbeat(in.Heartbeat, in.At) {
			c.acts = append(c.acts, Action{Kind: ActSnapshot, Worker: in.Heartbeat.WorkerID})
		}
	case InKV:
		if in.KV != nil && c.fleet.ApplyKV(in.KV, in.At) {
			c.acts = append(c.acts, Action{Kind: ActSnapshot, Worker: in.KV.WorkerID})
		}
	case InAdmitted:
		if in.Admitted != nil {
			c.admit(*in.Admitted, handle, in.At)
		}
	case InReleased:
		c.fleet.Unreserve(in.ID)
		if w, ok := c.placedOn[in.ID]; ok {
			delete(c.placedOn, in.ID)
			if d, ok := c.cfg.Policy.(Completer); ok {
				d.Done(in.ID, w)
			}
		}
	case InCancel:
		c.cancel(in.Cancel)
	case InTick:
		c.placeReady(in.At)
	case InDispatchFailed:
		// The dispatch never reached the stream: undo the booking and hold
		// the request again.
		c.fleet.Unreserve(in.ID)
		delete(c.placedOn, in.ID)
		if in.Admitted != nil {
			c.admit(*in.Admitted, handle, in.At)
		}
	case InForget:
		for id := range c.held {
			c.q.Remove(id)
			delete(c.held, id)
		}
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
	for _, it := range c.q.Expire(now, nil) {
		h := it.Payload
		if c.held[it.ID] != h {
			continue
		}
		c.fail(h, schemas.Errf(schemas.CodeDeadlineExceeded, "", "its deadline cannot be met any more after %s queued; not computed",
			now.Sub(h.Adm.SubmittedAt).Round(time.Millisecond)))
	}
	c.blocked = c.blocked[:0]
	for {
		it, ok, _ := c.q.PopReady(now, nil)
		if !ok {
			break
		}
		h := it.Payload
		if c.held[it.ID] != h {
			continue
		}
		req := placement.FromAdmitted(&h.Adm, "", time.Time{})
		dec := c.cfg.Policy.Place(c.fleet, &req, now)
		if !dec.OK() {
			if dec.Unresolvable && c.fleet.Len() > 0 {
				c.fail(h, schemas.Errf(schemas.CodeUnplaceable, "model", "no GPU in the fleet can serve model %q: %s", h.Adm.Model, Summarize(dec)))
				continue
			}
			if h.WaitingSince.IsZero() {
				h.WaitingSince = now
				h.Reason = Summarize(dec)
				c.acts = append(c.acts, Action{Kind: ActDelayed, ID: it.ID, Held: h, Reason: h.Reason})
			}
			c.blocked = append(c.blocked, it)
			if len(c.blocked) >= c.cfg.MaxBlocked {
				break
			}
			continue
		}
		c.fleet.Reserve(dec.Worker.ID, it.ID, h.Adm.PromptTokens, h.Adm.Request.MaxTokens, dec.Terms.Blocks, now)
		a := Action{Kind: ActDispatch, ID: it.ID, Held: h, Worker: dec.Worker.ID, GPU: dec.Worker.GPU, Policy: dec.Policy,
			Terms: dec.Terms, Rejected: len(dec.Rejections)}
		for i, cd := range dec.Candidates {
			if i == c.cfg.ExplainTop {
				break
			}
			a.Candidates = append(a.Candidates, Candidate{Worker: cd.Worker.ID, GPU: cd.Worker.GPU, Terms: cd.Terms})
		}
		delete(c.held, it.ID)
		c.placedOn[it.ID] = a.Worker
		c.acts = append(c.acts, a)
	}
	for _, it := range c.blocked {
		c.q.Push(it)
	}
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

// item is h's queue entry. Its minimum service time is the prediction on
// the fastest GPU generation in the fleet with nothing cached or queued:
// if even that cannot finish by the deadline, nothing can.
func (c *Core) item(h *Held, now time.Time) queue.Item[*Held] {
	return queue.Item[*Held]{ID: h.Adm.Request.ID, Priority: h.Adm.Priority, Deadline: h.Adm.Deadline,
		MinService: c.minService(&h.Adm), Enqueued: now, Payload: h}
}

func (c *Core) minService(a *schemas.Admitted) time.Duration {
	if c.cfg.Cost == nil {
		return 0
	}
	best := math.Inf(1)
	for _, w := range c.fleet.Workers() {
		if w == nil {
			continue
		}
		t := c.cfg.Cost.PrefillSeconds(w.GPU, a.Model, "bf16", max(1, w.TP), a.PromptTokens, 0) +
			c.cfg.Cost.DecodeSeconds(w.GPU, a.Model, "bf16", max(1, w.TP), a.Request.MaxTokens, 1, a.PromptTokens)
		best = math.Min(best, t)
	}
	if math.IsInf(best, 1) || math.IsNaN(best) {
		return 0
	}
	return time.Duration(best * float64(time.Second))
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
// seven-axis placer with the catalog's weight sizes) or any baseline. The
// live router and replay both build their policy here, so a replay with the
// recorded name runs exactly the recorded policy.
func PolicyNamed(name string, cat *catalog.Catalog, cost placement.CostModel) (placement.Policy, error) {
	if name == "" || name == "switchyard" {
		return placement.New(cost, placement.Options{WeightBytes: CatalogWeights(cat)}), nil
	}
	return baselines.New(name, cost)
}
