package routing

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/breaker"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/internal/core/queue"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Placing: the queue pass that expires what can no longer meet its
// deadline and offers the rest to the policy, in queue order.

// placeReady expires requests that can no longer meet their deadline,
// then places queued requests in queue order. A request that cannot be
// placed yet stays queued (delayed, never dropped); one that never can is
// failed as unplaceable.
func (c *Core) placeReady(now time.Time) {
	c.releaseWarm(now)
	if c.q.Len() == 0 {
		return
	}
	clear(c.passBlocked)
	c.expired = c.q.Pass(now, c.cfg.MaxBlocked, c.expired[:0], func(it queue.Item[*Held]) queue.Outcome {
		out := c.place(it, now)
		if r := schemas.PriorityRank(it.Payload.Adm.Priority); out == queue.Blocked && r >= 0 {
			c.passBlocked[r]++
		}
		return out
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
	req.HigherWaiting = c.higherWaiting(h.Adm.Priority)
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
		//
		// Workers behind an open breaker count while they heartbeat (they
		// may recover), and for DeadAfter once they fall silent (an engine
		// restarting answers in seconds); past that, a model whose only
		// workers are silent is answered now, not held to its deadline.
		if (dec.Unresolvable || c.fleet.Len() == 0 || breakerExcluded) && !c.servesLive(h.Adm.Model, now) &&
			!(breakerExcluded && c.silentFor(h.Adm.Model, now) <= DeadAfter) && c.holdOrRefuse(h, it.Enqueued, now) {
			return queue.Answered
		}
		// A worker behind an open breaker may come back: waiting helps.
		if dec.Unresolvable && c.fleet.Len() > 0 && !breakerExcluded {
			c.fail(h, schemas.Errf(schemas.CodeUnplaceable, "model", "no GPU in the fleet can serve model %q: %s", h.Adm.Model, Explain(dec, &h.Adm, now)))
			return queue.Answered
		}
		if h.WaitingSince.IsZero() { // the reason is worded once, not on every pass
			c.delayed(h, it.ID, now, Explain(dec, &h.Adm, now))
		}
		return queue.Blocked
	}
	if dec.Split() {
		c.placeSplit(it.ID, h, dec, now)
		return queue.Placed
	}
	// Book only the prompt tokens the cached prefix does not cover: the
	// booking stands until a heartbeat absorbs it, and booking cached
	// tokens made the worker holding a prefix look busiest.
	prefill, output, blocks := dec.Booking(h.Adm.PromptTokens, h.Adm.Request.MaxTokens)
	c.fleet.Reserve(dec.Worker.ID, it.ID, h.Adm.Priority, prefill, output, blocks, now)
	a := Action{Kind: ActDispatch, ID: it.ID, Held: h, Worker: dec.Worker.ID, GPU: dec.Worker.GPU, Policy: dec.Policy,
		Terms: dec.Terms, Rejected: len(dec.Rejections), Considered: dec.Considered, Skipped: dec.Skipped,
		Booking: PeerBooking{ID: it.ID, Worker: dec.Worker.ID, Class: h.Adm.Priority, Prefill: prefill, Output: output, Blocks: blocks}}
	a.Attempt = h.Adm.Attempt
	c.explain(&a, dec)
	delete(c.held, it.ID)
	c.placedOn[it.ID] = &inflight{worker: a.Worker, adm: h.Adm, predicted: dec.Terms.CompletionSeconds, placedAt: now,
		gpu: a.GPU, ttft: dec.Terms.TTFTSeconds, tpot: dec.Terms.TPOTSeconds}
	if c.approxKV[a.Worker] {
		c.fleet.Prefix().Stored(dec.Worker.Idx, h.Adm.BlockHashes)
	}
	if c.breakers.State(a.Worker) != breaker.Closed {
		c.breakers.Allow(a.Worker, now) // commit the half-open probe
	}
	c.acts = append(c.acts, a)
	return queue.Placed
}

// DeadAfter is how long every worker serving a model may be silent before
// the router answers requests for it unplaceable instead of holding them:
// the admitter's bound for a live worker (fleetlearn.DefaultStale), so
// the router refuses what is held when the admitter starts refusing what
// arrives. Shorter, and a worker or engine restart (a second or two) would
// fail the requests that arrived meanwhile.
const DeadAfter = 10 * time.Second

// higherWaiting is how many requests of classes above class wait in the
// router now: queued, or offered and left blocked earlier in this pass.
func (c *Core) higherWaiting(class string) int {
	n := 0
	for r := range min(schemas.PriorityRank(class), len(c.passBlocked)) {
		n += c.q.LenClass(schemas.Priorities[r]) + c.passBlocked[r]
	}
	return n
}

// silentFor is how long since the router last heard from any worker that
// advertises model (not draining); effectively forever when none does.
func (c *Core) silentFor(model string, now time.Time) time.Duration {
	var last time.Time
	for _, w := range c.fleet.Workers() {
		if w == nil || w.Draining || w.LastSeen.IsZero() {
			continue
		}
		if _, ok := w.Model(model, ""); ok && w.LastSeen.After(last) {
			last = w.LastSeen
		}
	}
	if last.IsZero() {
		return time.Duration(math.MaxInt64)
	}
	return now.Sub(last)
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

// explainWorkers bounds how many rejected workers Explain names.
const explainWorkers = 3

// Explain is Summarize plus, for the first few workers turned down on time
// (deadline_busy, deadline_unreachable) or warmth (cannot_run, hbm_busy),
// what they advertise for the model: its weight state and load_s, and the
// time left to the deadline. A request held because a worker guesses a
// long cold load must say so: a 24 s guess for a model that loads in half
// a second held every request for it unplaced, with nothing in any log
// saying why (issue 31).
func Explain(dec *placement.Decision, a *schemas.Admitted, now time.Time) string {
	sum := Summarize(dec)
	var b strings.Builder
	n := 0
	for _, rj := range dec.Rejections {
		if n == explainWorkers {
			break
		}
		switch rj.Reason {
		case placement.ReasonDeadlineBusy, placement.ReasonDeadlineUnreachable, placement.ReasonCannotRun, placement.ReasonHBMBusy:
		default:
			continue
		}
		if rj.Worker == nil {
			continue
		}
		n++
		if b.Len() == 0 {
			b.WriteString(sum)
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s", rj.Worker.ID, rj.Reason)
		if m, ok := rj.Worker.Model(a.Model, ""); ok {
			state := m.State
			if state == "" {
				state = schemas.WeightHot
			}
			fmt.Fprintf(&b, ": model %s %s", a.Model, state)
			if state != schemas.WeightHot {
				fmt.Fprintf(&b, ", load_s %.2f advertised", m.LoadSeconds)
			}
		} else {
			fmt.Fprintf(&b, ": model %s not advertised", a.Model)
		}
		if !a.Deadline.IsZero() {
			fmt.Fprintf(&b, ", %.2fs to the deadline", a.Deadline.Sub(now).Seconds())
		}
	}
	if b.Len() == 0 {
		return sum
	}
	b.WriteString(")")
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
