package placement

import "github.com/switchyard-ai/switchyard/internal/core/tokens"

// Axis: memory headroom (row AxisHeadroom in axes.go).
//
// Why: a request that does not fit in free KV blocks makes the engine
// preempt running sequences, which then recompute their prefill; and a
// model that is not loaded needs free HBM for its weights.
//
// Reads: the worker's KV blocks total and free and its free HBM
// (heartbeat), net of the router's own bookings (fleet.Reserve,
// Worker.BookedBlocks), the blocks each class holds (heartbeat
// kv_blocks_by_class), and the blocks the request needs beyond its
// cached prefix (the KV axis's blocks).
//
// Filters: would_preempt and hbm_busy, both busy-now. Term: among
// workers that fit, a fuller cache is likelier to preempt under the next
// burst: preempt_s is that probability times the seconds a preempted
// request loses (its prefill plus decode), with the risk rising
// quadratically from Options.HeadroomKnee to a full cache.
//
// The engine lets a waiting sequence preempt strictly lower classes
// (internal/core/engine), so for the classes in Options.Reclaim (critical by
// default) blocks those classes hold count too: a request that fits in
// free plus reclaimable blocks, net of bookings, passes, leaves the cache
// full (which is the fill KVCeiling and preempt_s then see), and pays
// reclaim_usd for its victims' recompute: reclaim_s, the reclaimed blocks'
// tokens at the request's own per-token prefill rate — the engine preempts
// whole sequences, so at least those tokens are recomputed, and the rate
// of a prompt long enough to need reclaiming is on the high side per token
// — priced at the next lower class's value of time (no victim's second is
// worth more) plus the GPU's price. So such a worker wins only when no
// cheaper one can take the request; before, a long critical prompt under
// overload found every worker full of lower classes' KV and could not be
// placed at all.
//
// Trade-offs: the fill is a heartbeat old, corrected only by the router's
// own bookings, so other routers' placements and the engine's own growth
// (decode adds blocks) since then are not seen; the knee and the
// quadratic are a shape chosen for ranking, not a fitted probability.
// Nothing of the axis is in the scan's lower bound (its terms only add),
// so it never prunes, only filters and ranks what is evaluated.
//
// Disabled: no KV or HBM filter and no preemption or reclaim term (the
// router places as if memory were unlimited; the engine preempts).

func headroomFilter(p *Placer, c *cand, r *Request, weight uint64) Reason {
	w := c.row
	if w.kvTotal > 0 {
		c.usedFrac = 1 - float64(w.free-c.t.Blocks)/float64(w.kvTotal)
	}
	if !p.on[axHeadroom] {
		return ReasonNone
	}
	if short := c.t.Blocks - w.free; w.kvTotal > 0 && short > 0 {
		if !p.rp.reclaim || short > int(w.lower[p.rp.rank]) {
			return ReasonWouldPreempt
		}
		// Bookings may have overdrawn the free blocks already; this
		// request reclaims only its own.
		c.reclaim = min(short, c.t.Blocks)
		c.usedFrac = 1
	}
	if weight > 0 && needsHBMForWeights(c) && weight > w.hbmFree {
		return ReasonHBMBusy
	}
	return ReasonNone
}

func headroomTerm(p *Placer, c *cand, r *Request) {
	if !p.on[axHeadroom] {
		return
	}
	if c.reclaim > 0 {
		reclaimTerm(p, c, r)
	}
	if c.usedFrac <= p.opts.HeadroomKnee {
		return
	}
	x := (c.usedFrac - p.opts.HeadroomKnee) / (1 - p.opts.HeadroomKnee)
	if x > 1 {
		x = 1
	}
	c.t.PreemptSeconds = x * x * (c.t.PrefillSeconds + c.t.DecodeSeconds)
}

// reclaimTerm prices the preemption a reclaiming request causes (see the
// axis comment).
func reclaimTerm(p *Placer, c *cand, r *Request) {
	t := &c.t
	bs := c.row.blockSize
	if bs <= 0 {
		bs = tokens.BlockSize
	}
	perToken := max(c.c.queueRate, c.c.prefillFull/float64(r.PromptTokens))
	t.ReclaimBlocks = c.reclaim
	t.ReclaimSeconds = float64(c.reclaim*bs) * perToken
	t.ReclaimUSD = t.ReclaimSeconds * (p.rp.reclaimValue + pricePerHour(p, c)/3600)
}

// needsHBMForWeights: sleeping weights sit in host memory and need HBM to
// wake; cold and absent ones need it to load.
func needsHBMForWeights(c *cand) bool {
	if !c.res.resident {
		return true
	}
	switch c.res.state {
	case stateSleeping, stateCold, stateAbsent:
		return true
	}
	return false
}
