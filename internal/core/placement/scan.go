package placement

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// The scan bounds workers cheaply and fully evaluates as few as it can.
// Every worker it reads gets the checks that need no cost (excluded,
// draining, stale: rejected with the reason) and a lower bound on its
// total_usd from its hot row (lowerBound). Workers are then evaluated from
// the lowest bound up, and once Options.Explain candidates are kept, any
// worker whose bound exceeds the Explain-th best total cannot enter the
// list and is skipped (Decision.Skipped). Evaluating the cheapest first is
// what makes that bar tight early: the workers whose filters would reject
// them (long queues, missed deadlines, cold loads) have high bounds, so
// they are skipped rather than evaluated and rejected one by one, which
// was the placement latency tail.
//
// Workers are taken a decode bucket of a cost class (GPU, TP) at a time,
// the bucket with the lowest bound first whatever its class, and within a
// bucket by group: the workers whose batch falls in one quarter of the
// bucket's octave. A group's bound is that of a hot, uncached worker with
// the best of each of its members' queue, batch and price, plus miss_usd
// at that worker's completion (groupBound); a bucket's is the same over
// all its groups. The workers holding a cached prefix of the request come
// before all buckets, one by one, since group bounds do not cover them.
// Once a bound exceeds the bar, none of the bucket's or group's workers
// can enter the list, and they are skipped without their rows being read:
// for an interactive request most of the fleet is GPUs too slow to
// compete, for a batch request GPUs too dear or too slow for its
// deadline, or batches too small to share a GPU cheaply or too big to
// join without delaying them.
//
// The trade: a skipped worker's filters never ran, so it is counted in
// Skipped, not listed in Rejections with a reason. Rejections hold every
// worker that a read found excluded, draining or stale, and every
// evaluated worker that a filter turned down. When fewer than Explain
// workers pass, nothing is skipped and every worker has its reason, so
// Unresolvable is judged on all of them as before.

// bounded is a worker's Idx with a lower bound on its total_usd.
type bounded struct {
	lb float64
	i  int32
}

// sortLimit caps how many workers left over after the cheapest ones are
// sorted by bound before evaluation; past it they are evaluated in Idx
// order, which costs more evaluations but never a long sort.
const sortLimit = 128

func (p *Placer) scan(d *Decision, r *Request, weight uint64, cutoff time.Time) {
	p.cutoffOffset, p.cutoffFast = 0, false
	if p.anchored {
		p.cutoffOffset, p.cutoffFast = p.clockOffset(cutoff)
	}
	p.bar = math.Inf(1)
	p.order, p.doomed = p.order[:0], p.doomed[:0]
	hot := p.view.hot
	members, groups, buckets := p.view.members, p.view.groups, p.view.buckets
	p.touchedIn = append(p.touchedIn[:0], make([]int32, len(members))...)
	p.touchedInBucket = append(p.touchedInBucket[:0], make([]int32, len(buckets))...)
	for _, wi := range p.touched {
		if int(wi) < len(hot) && hot[wi].flags&rowTouched != 0 {
			g := groupOf(&hot[wi])
			p.touchedIn[g]++
			p.touchedInBucket[g/bands]++
			p.bound(d, wi, r, cutoff)
		}
	}
	p.settle(d, p.order, r, weight)

	p.bucketOrder = p.bucketOrder[:0]
	for k := range p.classes {
		cl := &p.classes[k]
		for lo := range decodeBuckets {
			b := int32(k*decodeBuckets + lo)
			if buckets[b].n == 0 {
				continue
			}
			if cl.takes&p.rp.phase == 0 {
				// Its workers cannot take the phase: no cost-model calls
				// for them, and a bound that is skipped once the bar is
				// set (and until then reads them for their reason).
				buckets[b].bound = math.Inf(1)
				p.bucketOrder = append(p.bucketOrder, b)
				continue
			}
			if cl.epoch != p.epoch {
				p.prepare(cl, r)
			}
			buckets[b].bound = p.groupBound(cl, &buckets[b], lo)
			p.bucketOrder = append(p.bucketOrder, b)
		}
	}
	// Buckets go cheapest bound first, each settled before the next is
	// judged, so the bar has fallen as far as it can before a bucket is
	// read: taking a whole class at a time bounded every worker of the
	// best class one by one (at 10,000 workers, some 1,300 per placement
	// where a few hundred sit in buckets whose bound beats the final bar).
	// Within a bucket its groups go the same way. The next bucket is
	// picked by a pass over those left rather than by sorting them all
	// (a twelfth of a 1,000-worker placement), since after the first few
	// the rest are over the bar and skipped together.
	for k := range p.bucketOrder {
		next := k
		for j := k + 1; j < len(p.bucketOrder); j++ {
			if cheaperBucket(buckets, p.bucketOrder[j], p.bucketOrder[next]) {
				next = j
			}
		}
		p.bucketOrder[k], p.bucketOrder[next] = p.bucketOrder[next], p.bucketOrder[k]
		b := p.bucketOrder[k]
		if buckets[b].bound > p.bar {
			// Every bucket left is skipped whole: counted by bucket, not
			// group by group (a thirtieth of a 1,000-worker placement).
			for _, b := range p.bucketOrder[k:] {
				d.Skipped += int(buckets[b].n - p.touchedInBucket[b])
			}
			break
		}
		cl, lo := &p.classes[b/decodeBuckets], int(b%decodeBuckets)
		var order [bands]int32
		n := 0
		for g := b * bands; g < (b+1)*bands; g++ {
			if groups[g].n == 0 {
				continue
			}
			groups[g].bound = p.groupBound(cl, &groups[g], lo)
			at := n
			for ; at > 0 && groups[g].bound < groups[order[at-1]].bound; at-- {
				order[at] = order[at-1]
			}
			order[at] = g
			n++
		}
		for _, g := range order[:n] {
			if groups[g].bound > p.bar {
				p.skipGroups(d, g, g+1)
				continue
			}
			start := len(p.order)
			byQueue := p.view.byQueue[g][p.rp.rank]
			cut := p.queueCut(cl, &groups[g], lo, byQueue)
			touched := 0
			for _, i := range byQueue[:cut] {
				if hot[i].flags&rowTouched == 0 { // the others were bounded above
					p.bound(d, i, r, cutoff)
				} else {
					touched++
				}
			}
			d.Skipped += len(byQueue) - cut - (int(p.touchedIn[g]) - touched)
			p.settle(d, p.order[start:], r, weight)
		}
	}
	p.settleDoomed(d, r, weight)
}

// settleDoomed evaluates the workers settle deferred for their +Inf
// bound if the whole scan left fewer than Explain candidates (so that
// each gets its reason, and Unresolvable and the relaxed pass are judged
// on them), and otherwise counts them as skipped. Evaluated as they came,
// while the bar was still +Inf, they were 4 of the 21 evaluations per
// placement on the synthetic 1,000-worker fleet (mostly ttft_target and
// priority_reserve rejections among the prefix holders, bounded before
// any group), all wasted once later groups filled the list.
func (p *Placer) settleDoomed(d *Decision, r *Request, weight uint64) {
	for _, b := range p.doomed {
		p.visit(d, b, r, weight)
	}
}

// cheaperBucket orders buckets by bound, then index.
func cheaperBucket(buckets []group, a, b int32) bool {
	return buckets[a].bound < buckets[b].bound || buckets[a].bound == buckets[b].bound && a < b
}

// skipGroups counts the workers of groups [from, to) as skipped, but for
// those holding a cached prefix, which were bounded on their own.
func (p *Placer) skipGroups(d *Decision, from, to int32) {
	for g := from; g < to; g++ {
		d.Skipped += len(p.view.members[g]) - int(p.touchedIn[g])
	}
}

// bound rejects the worker at Idx i if it is excluded, cannot take the
// request's phase, is draining or stale, and otherwise appends it with its
// lower bound to p.order.
func (p *Placer) bound(d *Decision, i int32, r *Request, cutoff time.Time) {
	h := &p.view.hot[i]
	switch {
	case h.flags&rowExcluded != 0:
		p.reject(d, i, ReasonExcluded)
	case p.classes[h.class].takes&p.rp.phase == 0:
		p.reject(d, i, ReasonRoleMismatch) // unresolvable: before the busy reasons
	case h.flags&rowDraining != 0:
		p.reject(d, i, ReasonDraining)
	case h.flags&rowHeard == 0 || p.stale(h, i, cutoff):
		p.reject(d, i, ReasonStale)
	default:
		cl := &p.classes[h.class]
		if cl.epoch != p.epoch {
			p.prepare(cl, r)
		}
		if cl.rowsEpoch != p.epoch {
			p.prepareRows(cl, r)
		}
		lb, _, _, _ := p.lowerBound(h, cl, i, r)
		p.order = append(p.order, bounded{lb: lb, i: i})
	}
}

// settle evaluates the bounded workers in batch from the lowest bound up
// and skips those that cannot beat the bar. The Explain cheapest (twice
// that, so that a few rejections still leave enough to set the bar) go
// first; the rest are then sorted, if few, and evaluated while their
// bounds are under the bar, which only falls. Those bounded at +Inf,
// which a filter turns down or whose cost is not finite, are left to
// settleDoomed.
func (p *Placer) settle(d *Decision, batch []bounded, r *Request, weight uint64) {
	k := min(max(2*p.opts.Explain, 4), 32)
	p.cheapest = p.cheapest[:0]
	for _, b := range batch {
		if n := len(p.cheapest); n < k || b.lb < p.cheapest[n-1].lb {
			p.cheapest = insertAscending(p.cheapest, b, k)
		}
	}
	for _, b := range p.cheapest {
		if b.lb > p.bar || b.lb == math.Inf(1) {
			break // the rest are higher: the pass below skips or defers them
		}
		p.done[b.i] = true
		p.visit(d, b, r, weight)
	}
	p.rest = p.rest[:0]
	for _, b := range batch {
		switch {
		case p.done[b.i]:
		case b.lb > p.bar:
			d.Skipped++
		case b.lb == math.Inf(1):
			p.doomed = append(p.doomed, b)
		default:
			p.rest = append(p.rest, b)
		}
	}
	if len(p.rest) <= sortLimit {
		slices.SortFunc(p.rest, byBound)
	}
	for _, b := range p.rest {
		p.visit(d, b, r, weight)
	}
	for _, b := range p.cheapest {
		p.done[b.i] = false
	}
}

// groupBound is a cost no worker of group gr (class cl, decode bucket lo;
// a group or a whole bucket) without a cached prefix can go under: a hot
// one with the group's shortest queue, fewest others in its batch,
// fastest decode, widest decode sharing and lowest price, each taken over
// the members apart; shaved as lowerBound is. NaN never skips a group.
func (p *Placer) groupBound(cl *class, gr *group, lo int) float64 {
	return p.groupBoundAt(cl, gr, lo, gr.minQueue[p.rp.rank])
}

// queueCut is how many of byQueue (group gr's members by queue, for the
// request's class rank) the scan must read: those before the first whose
// queue alone, with the group's best of everything else, bounds over the
// bar. The bound only rises with the queue, so the rest cannot beat the
// bar either. A binary search, after one look at the longest queue, which
// in most groups read is under the bar.
func (p *Placer) queueCut(cl *class, gr *group, lo int, byQueue []int32) int {
	n := len(byQueue)
	if n < queueCutMin || !(p.bar < math.Inf(1)) {
		return n
	}
	hot, rank := p.view.hot, p.rp.rank
	over := func(j int) bool { return p.groupBoundAt(cl, gr, lo, int(hot[byQueue[j]].queue[rank])) > p.bar }
	if !over(n - 1) {
		return n
	}
	lo2, hi := 0, n-1 // over(hi) holds
	for lo2 < hi {
		mid := int(uint(lo2+hi) >> 1)
		if over(mid) {
			hi = mid
		} else {
			lo2 = mid + 1
		}
	}
	return lo2
}

// queueCutMin is the smallest group worth a queue cut: below it, reading
// every member costs no more than the search (at 1,000 workers a group
// has about six).
const queueCutMin = 8

// groupBoundAt is groupBound for a member whose queue, for the request's
// class rank, is queuedTokens, and the group's best of everything else;
// +Inf when that queue is over the request's queue ceiling, as lowerBound
// has it.
func (p *Placer) groupBoundAt(cl *class, gr *group, lo int, queuedTokens int) float64 {
	if cl.takes&p.rp.phase == 0 {
		return math.Inf(1) // bound turns every member down (and cl is not prepared)
	}
	decode := p.groupDecode(cl, gr, lo)
	price := min(cl.pricePerSecond, gr.minOwnPricePerSecond)
	if p.rp.sharedPrefill && gr.minPrefills != notShared {
		// The members hold none of the prompt (those that do are bounded
		// one by one), and a member's own count is at least the least.
		queuedTokens = sharedQueue(queuedTokens, gr.minPrefills, p.rp.promptTokens)
	}
	queue := 0.0
	if queuedTokens > 0 {
		queue = float64(queuedTokens) * cl.queueRate
	}
	if queue > p.rp.boundQueueCeiling {
		return math.Inf(1) // lowerBound has every such member at +Inf
	}
	prefill := cl.prefillFull
	gpu := (prefill + decode*gr.minInvBatch) * price
	comp := queue + prefill + decode
	b := (comp*p.rp.timeValue + gr.minOthers*prefill*p.rp.delayValue + gpu) * (1 - 1e-12)
	if !(b >= 0) || price < 0 {
		return math.Inf(-1)
	}
	// miss_usd at the group's shortest completion and latest deadline,
	// as refinedBound adds it per worker: P(miss) only rises as completion
	// does and as the deadline comes closer, and the effective deadline
	// only comes closer as prefill and decode grow. For a request with a
	// tight deadline that term is most of its cost, and without it a
	// group of workers too slow to make the deadline comfortably bounded
	// as if they could (batch requests at 10,000 workers read some 3,000
	// workers one by one to evaluate 50).
	if p.rp.boundDeadlines {
		if comp > p.rp.hardIn {
			return math.Inf(1) // every member misses: their bounds are +Inf
		}
		if deadline := effectiveDeadline(p, nil, prefill, decode); deadline < math.Inf(1) {
			b += missProbability(p.opts.PredictionError, deadline-comp, comp) * p.rp.missPenalty * (1 - 1e-12)
		}
	}
	// Every member must miss a target: as lowerBound has it.
	if p.rp.boundTargets {
		ttft := queue + prefill
		if gr.minOthers > 0 {
			ttft += chunkShare(p, cl, nil, 0, decode)
		}
		if ttft > p.rp.ttftIn || decode*p.rp.invOutput > p.rp.tpotTarget {
			return math.Inf(1)
		}
	}
	return b
}

// groupDecode is a decode_s no member of group gr (class cl, decode
// bucket lo) goes under, as Placer.decode prices it: the table at the
// group's batch plus the least KV beyond it that a member's batch holds,
// and, where decode may be priced from the floor (a critical request's,
// on every worker), the least of that and the floor plus the least KV a
// member holds. Every step is monotone in the member's figures, and exact
// where they are integers, so no member's decode is under it. Without the
// KV terms a critical request's groups were bounded at the decode alone,
// which a long prompt's busy groups are far over, and it bounded twice as
// many workers one by one as the other classes.
func (p *Placer) groupDecode(cl *class, gr *group, lo int) float64 {
	if cl.evalEpoch != p.epoch {
		p.prepareEval(cl, &p.req)
	}
	decode := interpLeast(&cl.decodeAt, lo, gr)
	if !(cl.perCtxToken > 0) {
		return decode // as Placer.decode: the table alone
	}
	k := float64(p.req.OutputTokens) * cl.perCtxToken
	ctx := float64(cl.ctx)
	if extra := gr.minHeld + ctx - (gr.maxOthers+1)*ctx; extra > 0 {
		decode += k * extra
	}
	if p.rp.heldKVDecode {
		p.fillFloorAt(cl, &p.req, uint8(lo), gr.maxFrac > 0)
		decode = min(decode, interpLeast(&cl.decodeFloor, lo, gr)+k*gr.minHeld)
	}
	return decode
}

// interpLeast is the least of interp(t, lo, frac) over the group's
// fractions: it is linear in the fraction, so one of the two extremes.
func interpLeast(t *[decodeBuckets]float64, lo int, gr *group) float64 {
	a := t[lo]
	if gr.maxFrac > 0 && lo+1 < decodeBuckets {
		span := t[lo+1] - a
		a = min(a+gr.minFrac*span, a+gr.maxFrac*span)
	}
	return a
}

// visit fully evaluates b's worker unless its bound, refined with the
// deadline-miss term, cannot beat the bar. The refinement is left out of
// the first pass because it costs a normalTail per worker, and kept for
// the few workers about to be evaluated because a full evaluation costs
// several times more: for tight deadlines miss_usd is what separates
// workers whose other terms are close.
func (p *Placer) visit(d *Decision, b bounded, r *Request, weight uint64) {
	if b.lb > p.bar || p.bar < math.Inf(1) && p.refinedBound(b.i, r) > p.bar {
		d.Skipped++
		return
	}
	p.consider(d, b.i, r, weight)
}

// refinedBound is lowerBound plus miss_usd at the bound's completion:
// P(miss) only rises as completion does (see missProbability), so that
// too is no more than the worker's own. (The targets' P(miss) would bound
// the same way, but priced here they pruned no evaluation on the synthetic
// fleets and cost two tails a visit.)
func (p *Placer) refinedBound(i int32, r *Request) float64 {
	h := &p.view.hot[i]
	lb, completion, deadline, _ := p.lowerBound(h, &p.classes[h.class], i, r)
	if deadline < math.Inf(1) && lb < math.Inf(1) {
		lb += missProbability(p.opts.PredictionError, deadline-completion, completion) * p.rp.missPenalty * (1 - 1e-12)
	}
	return lb
}

func byBound(a, b bounded) int {
	if c := cmp.Compare(a.lb, b.lb); c != 0 {
		return c
	}
	return cmp.Compare(a.i, b.i)
}

// insertAscending inserts b into the ascending list s, keeping at most k.
func insertAscending(s []bounded, b bounded, k int) []bounded {
	n := len(s)
	if n < k {
		s = append(s, b)
	} else {
		n--
	}
	for n > 0 && b.lb < s[n-1].lb {
		s[n] = s[n-1]
		n--
	}
	s[n] = b
	return s
}

// lowerBound is a cost no lower than the worker's total_usd could be,
// from its hot row, the KV it holds (view.held) and the model's residency
// alone: queue_s, load_s, prefill_s and decode_s are computed as evaluate
// computes them (decode_s by the same function, Placer.decode), and the
// terms left out only add (preempt_s and miss_usd are non-negative). It is
// shaved by a part in 10^12 so that rounding can never skip the true best.
// It also returns the completion, effective deadline and first token it
// bounded with.
// A worker that those terms alone already put over its queue ceiling,
// past its hard deadline or over a TTFT or TPOT target the latency axis
// filters on, or whose model cannot be loaded, will be
// rejected by a filter whatever the rest says, so its bound is +Inf: it is
// evaluated, and its reason recorded, only if too few workers pass to fill
// the list.
func (p *Placer) lowerBound(h *hotRow, cl *class, i int32, r *Request) (lb, completion, deadline, ttft float64) {
	cached := cachedTokens(p, h, i, r)
	queue := queueSeconds(p, h, cl, cached)
	prefill := prefillSeconds(p, cl, r, cached)
	decode := p.decode(cl, r, h, p.view.held[i], cached)
	load := warmLoad(cl, p.residencyAt(i, r))
	comp := queue + load + prefill + decode
	deadline = math.Inf(1)
	if p.rp.boundDeadlines {
		deadline = effectiveDeadline(p, r, prefill, decode)
	}
	// The same terms as total, with its divisions turned into multiplies
	// by reciprocals kept in the row and class: a rounding difference the
	// shave covers.
	gpu := (load + prefill + decode*h.invBatch) * positiveOr(h.ownPricePerSecond, cl.pricePerSecond)
	lb = (comp*p.rp.timeValue + h.others*(prefill+load)*p.rp.delayValue + gpu) * (1 - 1e-12)
	// Which workers are doomed follows no order, so these are selects
	// rather than branches the CPU would mispredict. A load that cannot
	// happen made lb +Inf or NaN already; NaN becomes +Inf too, since
	// such a worker is never picked.
	lb = infIf(queue > p.rp.boundQueueCeiling, lb)
	lb = infIf(comp > p.rp.hardIn && p.rp.boundDeadlines, lb)
	// A worker that must miss the TTFT or TPOT target: ttft_s and tpot_s
	// are at least these (the latency axis adds to both).
	ttft = queue + load + prefill
	if p.rp.boundTargets {
		if h.others > 0 { // its chunks share steps with the batch's decodes: as targetTerms adds
			ttft += chunkShare(p, cl, r, cached, decode)
		}
		lb = infIf(ttft > p.rp.ttftIn || decode*p.rp.invOutput > p.rp.tpotTarget, lb)
	}
	return infIf(!(lb < math.Inf(1)), lb), comp, deadline, ttft
}

const infBits = 0x7FF0000000000000

// infIf is +Inf when cond holds, else x; written on the bits so that the
// compiler emits a conditional move instead of a branch.
func infIf(cond bool, x float64) float64 {
	b := math.Float64bits(x)
	if cond {
		b = infBits
	}
	return math.Float64frombits(b)
}

// positiveOr is v when it is positive, else x, as a conditional move.
func positiveOr(v, x float64) float64 {
	b := math.Float64bits(x)
	if v > 0 {
		b = math.Float64bits(v)
	}
	return math.Float64frombits(b)
}
