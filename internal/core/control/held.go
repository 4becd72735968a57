package control

import (
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Scale from zero for held demand. A router holds a request for a model no
// live worker serves while a pool that can serve it warms a replica
// (internal/core/routing, warmup.go), and says how much it holds per pool
// (the held_demand event; services/controller gathers it into
// Inputs.Held). That demand is the pool's own — it is added to the pool's
// share of the backlog, not spread over the pools by capacity as the rest
// of the queue is — so the pool at zero orders the replicas the burst
// needs in one decision (scale.go's scale from zero).
//
// Once, for the whole burst: a pool at zero whose held burst still grows
// waits for it to stop growing, at most heldSettle intervals from its
// first request, then orders for all of it. No cascade: while the
// replicas ordered for held demand are still starting and none of the
// pool's replicas is live, the pool orders no more. Without that guard a burst seen growing over several decisions
// would order replicas decision after decision for the same requests —
// each order a cold start late for them — as llm-d's Workload Variant
// Autoscaler guards against; once a replica joins, the router places the
// held requests and what is left is ordinary backlog the next decisions
// size as usual.

// HeldDemand is what routers hold for one pool's cold start.
type HeldDemand struct {
	Requests int
	// Tokens is prompt plus max output tokens, summed.
	Tokens  int
	ByClass map[string]int
	// Since is when the first of them was held.
	Since time.Time
	// Refused counts, cumulatively, the requests for the pool's model
	// refused because their deadline was shorter than its cold start:
	// those since the last decision count as the pool's backlog too, so a
	// pool at zero that only ever sees tight deadlines still warms.
	Refused int
}

// heldMark is a pool's held demand at the last decision.
type heldMark struct{ requests, refused int }

// heldBacklog is the backlog a pool's held demand adds: the requests held
// now and those refused since the last decision.
func (c *Controller) heldBacklog(key string, h HeldDemand) float64 {
	return float64(max(0, h.Requests) + c.refusedSince(key, h))
}

func (c *Controller) refusedSince(key string, h HeldDemand) int {
	// A count that went down is a router that restarted: count from it.
	return max(0, h.Refused-c.heldSeen[key].refused)
}

// heldSettle is how many intervals after the first held request a pool at
// zero may wait for a still-growing burst before ordering: a burst that
// arrives over a second or two is then ordered for once, whole, at the
// price of at most that much of the cold start.
const heldSettle = 2

// heldGuard remembers, for one decision of one pool, the state a scale-up
// must not move while the guard holds.
type heldGuard struct {
	// settling: at zero, the held burst still grows; starting: replicas
	// ordered for it are starting and none is live.
	settling, starting bool
	held               HeldDemand
	refused            int // since the last decision
	was                int
	desired            int
	lastUp, lastAny    time.Time
	changes            int
	pending            int
	interval           time.Duration
}

// guardHeld reads whether the pool's scale-ups are held this decision.
func (c *Controller) guardHeld(ps *poolState, hbs []*schemas.Heartbeat, in Inputs, d *Decision) heldGuard {
	key := ps.Key()
	g := heldGuard{held: in.Held[key], was: c.heldSeen[key].requests, desired: ps.desired, lastUp: ps.lastUp, lastAny: ps.lastAny,
		changes: len(d.Changes), pending: in.Starting[key], interval: c.cfg.Interval}
	g.refused = c.refusedSince(key, g.held)
	if g.held.Requests > 0 || g.held.Refused > 0 {
		c.heldSeen[key] = heldMark{requests: g.held.Requests, refused: g.held.Refused}
	} else {
		delete(c.heldSeen, key)
	}
	live := 0
	for _, hb := range hbs {
		if !hb.Draining {
			live++
		}
	}
	if (g.held.Requests == 0 && g.refused == 0) || live > 0 {
		return g
	}
	// Desired above zero with nothing live means replicas were ordered and
	// are starting, whether or not the caller counts them (KEDA's replicas
	// are not reported back as Starting).
	g.starting = ps.started && ps.desired > 0
	g.settling = !g.starting && g.held.Requests > g.was && g.refused == 0 && !g.held.Since.IsZero() &&
		in.Now.Sub(g.held.Since) < heldSettle*c.cfg.Interval
	return g
}

// apply undoes a scale-up the guard holds back and says why, and names
// the held demand in the reason of a scale-up it lets through.
func (g heldGuard) apply(c *Controller, ps *poolState, rd ReplicaDecision, d *Decision) ReplicaDecision {
	rd.Dtype, rd.TP, rd.Max = ps.Dtype, ps.TP, ps.Max
	rd.ColdStartSeconds = c.startSeconds(ps)
	rd.Held = g.held.Requests
	if g.held.Requests == 0 && g.refused == 0 {
		return rd
	}
	var parts []string
	if g.held.Requests > 0 {
		parts = append(parts, fmt.Sprintf("%d requests (%d tokens) held for a cold start", g.held.Requests, g.held.Tokens))
	}
	if g.refused > 0 {
		parts = append(parts, fmt.Sprintf("%d refused since the last decision for a deadline shorter than the cold start", g.refused))
	}
	what := strings.Join(parts, ", ")
	if (g.starting || g.settling) && ps.desired > g.desired {
		ps.desired, ps.lastUp, ps.lastAny = g.desired, g.lastUp, g.lastAny
		d.Changes = d.Changes[:g.changes]
		rd.Desired = g.desired
		if g.starting {
			rd.Reason = fmt.Sprintf("scale-up held: %d replicas already ordered for the %s (%d reported starting, none live yet); more ordered now would serve a cold start later than those, for the same requests",
				g.desired, what, g.pending)
		} else {
			rd.Reason = fmt.Sprintf("scale from zero waits: the %s still grow (%d at the last decision); the order is sized for the whole burst within %d intervals of its first request",
				what, g.was, heldSettle)
		}
		return rd
	}
	if len(d.Changes) > g.changes {
		ch := &d.Changes[len(d.Changes)-1]
		if ch.Kind == KindReplicas && ch.Target == ps.Key() {
			ch.Reason = what + "; " + ch.Reason
			rd.Reason = ch.Reason
		}
	}
	return rd
}
