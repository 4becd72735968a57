package routing

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Scale from zero: a request for a model no live worker serves is held —
// out of the wait queue, counted apart from it — while a pool the
// controller can scale warms a replica for it, provided the cold start and
// the request's own service fit its deadline. One that no pool can serve,
// or whose deadline is shorter than the cold start, is answered at once
// with unplaceable and the reason.
//
// The pools come from the controller's desired-replica messages
// (sy.ctl.replicas.<pool>), which the router shell turns into InPool
// inputs: journaled like every input, so replay sees the same pools, and
// the simulator feeds its controller's decisions the same way.

// InPool tells the router about one pool the controller scales (Input.Pool).
const InPool = "pool"

// PoolStaleAfter is how long a pool stays a candidate for holding requests
// after the controller last spoke of it. The controller repeats every pool
// each interval (2 s by default); a pool it has not mentioned for this long
// has no controller to scale it, and holding work for it would only wait
// out the deadline.
const PoolStaleAfter = 15 * time.Second

// HeldDemandRefresh is how often the router repeats the held demand of a
// pool while it holds requests for it, so a controller that (re)starts
// learns it without waiting for a change, and one that stops hearing it
// can tell the router is gone.
const HeldDemandRefresh = 2 * time.Second

// Event kinds of the warm-up path.
const (
	// EventHeldForWarmup records one request held for a pool's cold start.
	EventHeldForWarmup = "held_for_warmup"
	// EventHeldDemand is a pool's held demand as a whole (requests, tokens,
	// by class), emitted when it changes and every HeldDemandRefresh while
	// it is not zero; the controller sizes the pool from it.
	EventHeldDemand = "held_demand"
)

// PoolSpec is one scalable pool as the controller describes it: what a new
// replica runs and how long its cold start takes.
type PoolSpec struct {
	Key   string `json:"key"`
	GPU   string `json:"gpu"`
	Model string `json:"model"`
	Dtype string `json:"dtype,omitempty"`
	TP    int    `json:"tp,omitempty"`
	// Max is the most replicas the pool may have; 0 means it cannot serve.
	Max     int `json:"max"`
	Desired int `json:"desired"`
	// ColdStartSeconds is how long a replica started now takes to serve:
	// its weights' cold load (perf.Replica.LoadSeconds), as placement
	// prices a cold start.
	ColdStartSeconds float64 `json:"cold_start_s"`
}

// HeldDemand is the work a router holds for one pool's cold start.
type HeldDemand struct {
	Pool     string `json:"pool"`
	Model    string `json:"model"`
	Requests int    `json:"requests"`
	// Tokens is prompt plus max output tokens, summed.
	Tokens  int            `json:"tokens"`
	ByClass map[string]int `json:"by_class"`
	// Since is when the first of them was held.
	Since time.Time `json:"since"`
	// Refused counts, over the router's life, the requests for this pool's
	// model answered unplaceable because their deadline was shorter than
	// the cold start: demand the pool would have served warm, so the
	// controller still warms it for the next ones.
	Refused int `json:"refused"`
}

type poolSeen struct {
	spec PoolSpec
	at   time.Time
	// refused is HeldDemand.Refused; sent and sentAt the demand last
	// emitted as a held_demand event, and when.
	refused int
	sent    HeldDemand
	sentAt  time.Time
}

// warmup is what the core holds for one pool's cold start.
type warmup struct {
	pool  PoolSpec
	since time.Time
	// items are the held requests' queue entries, in hold order, to go
	// back into the queue once a replica serving the model heartbeats.
	items []warmItem
}

type warmItem struct {
	h       *Held
	enqueue time.Time
}

// notePool records a pool the controller described.
func (c *Core) notePool(p *PoolSpec, now time.Time) {
	if p == nil || p.Key == "" || p.Model == "" {
		return
	}
	spec := *p
	if spec.ColdStartSeconds <= 0 && c.cfg.Cost != nil {
		// A controller that does not say: price it as placement prices a
		// cold start on this kind of replica.
		dtype := spec.Dtype
		if dtype == "" {
			dtype = catalog.DtypeBF16
		}
		spec.ColdStartSeconds = c.cfg.Cost.LoadSeconds(spec.GPU, spec.Model, dtype, max(1, spec.TP), schemas.WeightCold)
	}
	seen := c.pools[spec.Key]
	seen.spec, seen.at = spec, now
	c.pools[spec.Key] = seen
	if w := c.warm[spec.Key]; w != nil {
		w.pool = spec
	}
}

// freshPools counts the pools heard of within PoolStaleAfter.
func (c *Core) freshPools(now time.Time) int {
	n := 0
	for _, p := range c.pools {
		if now.Sub(p.at) <= PoolStaleAfter {
			n++
		}
	}
	return n
}

// servesLive reports whether a live (fresh, not draining) worker lists model.
func (c *Core) servesLive(model string, now time.Time) bool {
	for _, w := range c.fleet.Workers() {
		if w == nil || w.Draining || !w.Fresh(now, c.fleet.Staleness()) {
			continue
		}
		if _, ok := w.Model(model, ""); ok {
			return true
		}
	}
	return false
}

// warmPool is the fresh scalable pool serving model that would serve
// first: the least cold start left (a pool already warming for other held
// requests is that much nearer), ties by key.
func (c *Core) warmPool(model string, now time.Time) (PoolSpec, float64, bool) {
	var best PoolSpec
	bestLeft, found := 0.0, false
	for _, key := range slices.Sorted(maps.Keys(c.pools)) {
		p := c.pools[key]
		if p.spec.Model != model || p.spec.Max <= 0 || now.Sub(p.at) > PoolStaleAfter {
			continue
		}
		left := c.coldLeft(p.spec, now)
		if !found || left < bestLeft {
			best, bestLeft, found = p.spec, left, true
		}
	}
	return best, bestLeft, found
}

// coldLeft is how much of a pool's cold start is still to run: all of it
// for a pool nothing is held for yet, less the time since the first hold
// for one that is warming (the controller orders the replica when it sees
// that first held demand).
func (c *Core) coldLeft(p PoolSpec, now time.Time) float64 {
	left := p.ColdStartSeconds
	if w := c.warm[p.Key]; w != nil {
		left -= now.Sub(w.since).Seconds()
	}
	return max(0, left)
}

// warmService is the request's fastest service on a fresh replica of the
// pool: nothing cached, alone.
func (c *Core) warmService(p PoolSpec, a *schemas.Admitted) float64 {
	if c.cfg.Cost == nil {
		return 0
	}
	dtype, tp := p.Dtype, max(1, p.TP)
	if dtype == "" {
		dtype = catalog.DtypeBF16
	}
	s := c.cfg.Cost.PrefillSeconds(p.GPU, a.Model, dtype, tp, a.PromptTokens, 0) +
		c.cfg.Cost.DecodeSeconds(p.GPU, a.Model, dtype, tp, a.Request.MaxTokens, 1, a.PromptTokens)
	if s != s || s < 0 { // NaN or nonsense from an unknown kind
		return 0
	}
	return s
}

// holdOrRefuse decides for a request the policy found no worker for and no
// live worker serves: hold it for a pool's cold start (true), or answer it
// at once as unplaceable (true, with the fail action appended). It returns
// false when there is nothing to decide yet — no fleet and no pools heard
// of: the router has just started and waits for the first heartbeats.
func (c *Core) holdOrRefuse(h *Held, enqueued, now time.Time) bool {
	a := &h.Adm
	p, left, ok := c.warmPool(a.Model, now)
	if !ok {
		if c.fleet.Len() == 0 && c.freshPools(now) == 0 {
			return false
		}
		silent := ""
		if d := c.silentFor(a.Model, now); d < ForgetAfter {
			silent = fmt.Sprintf("; the workers serving it have been silent for %.1fs (an engine down?)", d.Seconds())
		}
		c.fail(h, schemas.Errf(schemas.CodeUnplaceable, "model",
			"no live worker serves model %q and no scalable pool can warm one (%d workers, %d pools known)%s", a.Model, c.fleet.Len(), c.freshPools(now), silent))
		return true
	}
	service := c.warmService(p, a)
	if !a.Deadline.IsZero() {
		budget := a.Deadline.Sub(now).Seconds()
		if budget < left+service {
			seen := c.pools[p.Key]
			seen.refused++
			c.pools[p.Key] = seen
			c.fail(h, schemas.Errf(schemas.CodeUnplaceable, "deadline",
				"no live worker serves model %q; pool %s can warm one, but its cold start (%.1fs left) plus the request's service (%.2fs) is longer than its deadline (%.1fs away)",
				a.Model, p.Key, left, service, budget))
			return true
		}
	}
	w := c.warm[p.Key]
	if w == nil {
		w = &warmup{pool: p, since: now}
		c.warm[p.Key] = w
	}
	w.items = append(w.items, warmItem{h: h, enqueue: enqueued})
	h.WaitingSince, h.Reason = now, fmt.Sprintf("held for the cold start of pool %s (%.1fs left)", p.Key, left)
	ev := &schemas.Event{Kind: EventHeldForWarmup, At: now, RequestID: a.Request.ID, Tenant: a.Tenant,
		Reason: fmt.Sprintf("no live worker serves model %q: held for the cold start of pool %s (%.1fs left, %.2fs of service, deadline %s)",
			a.Model, p.Key, left, service, deadlineIn(a.Deadline, now)),
		Fields: map[string]any{"pool": p.Key, "model": a.Model, "class": a.Priority, "cold_start_left_s": left, "service_s": service}}
	c.acts = append(c.acts, Action{Kind: ActEvent, ID: a.Request.ID, Event: ev})
	return true
}

func deadlineIn(d, now time.Time) string {
	if d.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%.1fs away", d.Sub(now).Seconds())
}

// releaseWarm puts the requests held for a pool back into the queue once a
// live worker serves their model, and answers those whose deadline can no
// longer be met even if a replica joined now. It runs before every
// placement pass, so held requests are placed on the heartbeat that brings
// their replica.
func (c *Core) releaseWarm(now time.Time) {
	if len(c.warm) == 0 {
		return
	}
	for _, key := range slices.Sorted(maps.Keys(c.warm)) {
		w := c.warm[key]
		live := c.servesLive(w.pool.Model, now)
		kept := w.items[:0]
		for _, wi := range w.items {
			h := wi.h
			id := h.Adm.Request.ID
			if c.held[id] != h {
				continue // cancelled or answered while held
			}
			if live {
				h.WaitingSince, h.Reason = time.Time{}, ""
				it := c.item(h, now)
				it.Enqueued = wi.enqueue
				if err := c.q.Push(it); err != nil {
					c.fail(h, schemas.Errf(schemas.CodeInvalidPriority, "priority", "%v", err))
				}
				continue
			}
			if !h.Adm.Deadline.IsZero() && h.Adm.Deadline.Sub(now).Seconds() < c.coldLeft(w.pool, now)+c.warmService(w.pool, &h.Adm) {
				c.fail(h, schemas.Errf(schemas.CodeDeadlineExceeded, "",
					"held %s for the cold start of pool %s; no replica serving model %q joined in time for its deadline; not computed",
					now.Sub(wi.enqueue).Round(time.Millisecond), w.pool.Key, h.Adm.Model))
				continue
			}
			kept = append(kept, wi)
		}
		clear(w.items[len(kept):])
		w.items = kept
		if len(w.items) == 0 {
			delete(c.warm, key)
			c.emitHeldDemand(key, now)
		}
	}
}

// emitHeldDemand records a pool's held demand as an event when it changed
// since the last one, or HeldDemandRefresh after it while requests are
// held.
func (c *Core) emitHeldDemand(key string, now time.Time) {
	seen, ok := c.pools[key]
	if !ok {
		return
	}
	d := c.demandOf(key)
	if d.Requests == seen.sent.Requests && d.Tokens == seen.sent.Tokens && d.Refused == seen.sent.Refused &&
		(d.Requests == 0 || now.Sub(seen.sentAt) < HeldDemandRefresh) {
		return
	}
	seen.sent, seen.sentAt = d, now
	c.pools[key] = seen
	c.acts = append(c.acts, Action{Kind: ActEvent, Event: &schemas.Event{Kind: EventHeldDemand, At: now,
		Reason: fmt.Sprintf("%d requests (%d tokens) held for the cold start of pool %s; %d refused for a deadline shorter than it", d.Requests, d.Tokens, d.Pool, d.Refused),
		Fields: map[string]any{"pool": d.Pool, "model": d.Model, "requests": d.Requests, "tokens": d.Tokens, "by_class": d.ByClass,
			"since": d.Since, "refused": d.Refused, "cold_start_s": seen.spec.ColdStartSeconds}}})
}

// demandOf is what the router holds for one pool, and has refused for it.
func (c *Core) demandOf(key string) HeldDemand {
	seen := c.pools[key]
	d := HeldDemand{Pool: key, Model: seen.spec.Model, ByClass: map[string]int{}, Refused: seen.refused}
	w := c.warm[key]
	if w == nil {
		return d
	}
	d.Since = w.since
	for _, wi := range w.items {
		if c.held[wi.h.Adm.Request.ID] != wi.h {
			continue
		}
		d.Requests++
		d.Tokens += wi.h.Adm.PromptTokens + wi.h.Adm.Request.MaxTokens
		d.ByClass[wi.h.Adm.Priority]++
	}
	return d
}

// heldDemandEvents emits the held demand of every pool that changed (or
// is due a refresh). It runs on clock ticks only, so a burst held over
// many admissions between two ticks is one event, not one per request:
// the controller then orders replicas for the burst once.
func (c *Core) heldDemandEvents(now time.Time) {
	for _, key := range slices.Sorted(maps.Keys(c.pools)) {
		c.emitHeldDemand(key, now)
	}
}

// HeldForWarmup returns, by pool key, the demand held for each pool's cold
// start and the requests refused for want of it (pools with neither are
// left out).
func (c *Core) HeldForWarmup() map[string]HeldDemand {
	out := map[string]HeldDemand{}
	for k := range c.pools {
		if d := c.demandOf(k); d.Requests > 0 || d.Refused > 0 {
			out[k] = d
		}
	}
	return out
}

// Warming reports whether any request is held for a cold start: the shell
// keeps ticking then, so the held demand goes out promptly.
func (c *Core) Warming() bool { return len(c.warm) > 0 }

// HeldForWarmupCount is the number of requests held for cold starts.
func (c *Core) HeldForWarmupCount() int {
	n := 0
	for k := range c.warm {
		n += c.demandOf(k).Requests
	}
	return n
}
