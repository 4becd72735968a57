package placement

import (
	"cmp"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// view is the placer's struct-of-arrays copy of the fleet: per worker, the
// few fields placement reads, packed in two dense arrays by Idx. A
// placement walks every worker, and reading each one's fleet.Worker (a few
// hundred bytes on its own heap object, its class strings and its models on
// others) cost a cache miss or more per worker per placement; the rows are
// contiguous, so the walk streams through them. The copy is refreshed from
// fleet.Versions: only slots that changed since the last placement are
// re-read, which between two placements of the live router is the one
// worker the last booking touched plus those that sent a heartbeat.
type view struct {
	fleet   *fleet.Fleet
	version uint64   // the fleet.Version the rows were brought up to
	vers    []uint64 // by Idx: the fleet.Versions entry each row was copied at
	hot     []hotRow
	cold    []coldRow
	// held is, by Idx, the tokens of KV the worker's batch holds (its
	// blocks in use times the block size), as decodeTerm reads it from the
	// cold row, or -1 where the worker reports no KV capacity. The bound
	// prices decode_s from it as decodeTerm does: without it, with the
	// roofline predictor, the KV a busy batch holds beyond the table's
	// was most of the gap between bound and total, and a placement
	// evaluated 90-145 workers to keep 8. A column of its own rather than
	// a field of the hot row, which is one cache line already.
	held []float64
	// members lists, by group (see groupOf), the live rows of the group
	// in ascending Idx, so the scan can pass over a group whose bound
	// cannot beat the bar without reading its rows; groups summarises
	// each, and buckets each decode bucket of a class: its groups
	// together (see bucketOf).
	members [][]int32
	// byQueue lists each group's members again for each class rank k,
	// by queue[k] (then Idx): the scan reads a group's members only up to
	// the first whose queue alone puts the group's bound over the bar.
	// Within a group the queue is what spreads the bounds most (the batch
	// is banded and the price is the class's), and a batch request at
	// 10,000 workers read some 300 workers one by one, nearly all of them
	// in groups whose bound was within 2 % of the bar.
	byQueue [][fleet.NumClasses][]int32
	groups  []group
	buckets []group
	dirty   []int32 // groups whose members changed since summarize
	// prefillers and decoders count the live rows that can take a
	// prefill leg and a decode leg (their class's takes), kept by copyRow,
	// so Place knows in two loads that a fleet without links cannot
	// split and pays nothing for the chance.
	prefillers, decoders int32
}

// A group is the workers of one cost class whose batch falls in one band:
// a quarter of a decode bucket (an octave of batch sizes), summarised for
// the scan's group bound. Within a class the batch is what moves a
// worker's bound most and both ways (its decode share of the GPU falls as
// the batch grows, its own decode and the delay it imposes rise), and a
// bound from the best of each over a whole octave was loose by a sixth
// for batch requests: at 10,000 workers they bounded some 1,100 workers
// one by one, the whole of the best GPU's busiest buckets, to evaluate 15.
// The same summary over a whole bucket (view.buckets) is what the scan
// orders and first skips by, so a placement bounds a few dozen buckets,
// not four times as many groups.
type group struct {
	minOwnPricePerSecond float64 // +Inf if no member has its own price (or the GPU axis is off)
	minInvBatch          float64
	minOthers            float64
	// maxOthers and minHeld bound the KV term of the members' decode_s
	// (Placer.decode): what a batch holds beyond its size times the
	// request's context is at least minHeld less maxOthers+1 contexts.
	// minHeld is over the members' view.held, 0 for one without KV.
	maxOthers, minHeld float64
	minQueue           [fleet.NumClasses]int // by rank, as hotRow.queue
	minPrefills        uint8                 // as hotRow.prefills
	// minFrac and maxFrac bound the members' decodeFrac: decode time is
	// linear in it between the bucket's ends, so its least is at one of
	// them. maxFrac > 0 when some member interpolates past the bucket.
	minFrac, maxFrac float64
	n                int32 // members
	dirty            bool
	bound            float64 // groupBound for this placement
}

// bands is the number of groups a decode bucket is split into.
const bands = 4

// emptyGroup is the summary of no workers, which any member lowers.
func emptyGroup() group {
	gr := group{minOwnPricePerSecond: math.Inf(1), minInvBatch: 1, minOthers: math.Inf(1), minHeld: math.Inf(1), minFrac: 1, minPrefills: notShared}
	for k := range gr.minQueue {
		gr.minQueue[k] = math.MaxInt
	}
	return gr
}

// merge lowers gr's summary by o's.
func (gr *group) merge(o *group) {
	gr.minOwnPricePerSecond = min(gr.minOwnPricePerSecond, o.minOwnPricePerSecond)
	gr.minInvBatch = min(gr.minInvBatch, o.minInvBatch)
	gr.minOthers = min(gr.minOthers, o.minOthers)
	gr.maxOthers, gr.minHeld = max(gr.maxOthers, o.maxOthers), min(gr.minHeld, o.minHeld)
	for k := range gr.minQueue {
		gr.minQueue[k] = min(gr.minQueue[k], o.minQueue[k])
	}
	gr.minPrefills = min(gr.minPrefills, o.minPrefills)
	gr.minFrac, gr.maxFrac = min(gr.minFrac, o.minFrac), max(gr.maxFrac, o.maxFrac)
	gr.n += o.n
}

// groupOf is the group of a live row.
func groupOf(h *hotRow) int32 { return bucketOf(h)*bands + int32(h.band) }

// bucketOf is the decode bucket of a live row's class: an index into
// view.buckets, and groupOf/bands.
func bucketOf(h *hotRow) int32 { return h.class*decodeBuckets + int32(h.decodeLo) }

// hotRow is what every worker's lower bound needs: read for all of them.
// It is 64 bytes, one cache line, so bounding a worker touches one line
// of it rather than two (a 96-byte row always spanned two; at 10,000 workers
// the rows are past the L2 cache, and the 64-byte row took the
// fastest-per-request p99 from about 28 to 26 µs): the time a worker was
// last heard is kept as an offset from the placer's clock anchor, and
// queues as saturating 32-bit counts, each with its exact value in the
// cold row.
type hotRow struct {
	// seen is fleet.Worker.LastSeen as an offset in nanoseconds from
	// Placer.anchor, valid when flags has rowClockFast (see fresh); the
	// time itself is coldRow.seen.
	seen int64
	// queue[k] is the prompt tokens queued (heartbeat) and booked of class
	// ranks 0..k: what a request of rank k waits behind (see queueTerm),
	// capped at math.MaxInt32. Capped low, it is still under the queue the
	// full evaluation reads (coldRow.queue), so the bounds built on it stay
	// bounds.
	queue [fleet.NumClasses]int32
	// others is batch-1 and invBatch 1/batch (see coldRow.batch), as
	// floats for the bound.
	others, invBatch float64
	// ownPricePerSecond is the worker's own price in $/s when the GPU
	// axis uses it (see gpuCostTerm), else 0.
	ownPricePerSecond float64
	// decodeFrac and decodeLo place batch between the decode buckets (see
	// decodePoint), so the per-worker decode is one interpolation.
	decodeFrac float64
	class      int32 // index into Placer.classes
	decodeLo   uint8
	band       uint8 // which quarter of the bucket batch lies in (see group)
	flags      rowFlags
	// prefills is the prompts a request queued there would share its
	// prefill steps with (see sharedQueue): the sequences prefilling and
	// waiting plus those booked, on an engine that shares its steps,
	// capped at maxPrefills; notShared where the engine runs them one
	// after another.
	prefills uint8
}

// The hot row's prefills beyond a count: notShared for an engine that
// does not share its prefill steps, maxPrefills the largest count kept
// (more read as that many, so a bound from it stays a bound).
const (
	notShared   = math.MaxUint8
	maxPrefills = notShared - 1
)

// coldRow is read only for workers that survive the lower bound.
type coldRow struct {
	w                 *fleet.Worker
	seen              time.Time             // fleet.Worker.LastSeen, monotonic reading and all
	queue             [fleet.NumClasses]int // hotRow.queue, uncapped
	hbmTotal, hbmFree uint64
	free, kvTotal     int // KV blocks; free is net of bookings
	blockSize         int
	batch             int     // running + booked sequences + 1: the batch the request would join
	price             float64 // the worker's own $/hour, 0 if it gave none
	// lower[k] is the KV blocks held by classes of rank above k, which
	// the engine preempts for a request of rank k (see the headroom axis).
	lower [fleet.NumClasses]int32
	// neighbours is the sequences running or booked on the worker, by
	// class rank (see the interference axis).
	neighbours [fleet.NumClasses]float32
	// gpu, arch, tp, role and link are what class and fp8 were derived
	// from, so a heartbeat that keeps them skips the class lookup; link is
	// also where a decode leg's transfer to this worker ends.
	gpu, arch  string
	tp         int
	role, link string
}

type rowFlags uint8

const (
	rowLive     rowFlags = 1 << iota // a worker occupies the slot
	rowHeard                         // at least one heartbeat (LastSeen set)
	rowDraining                      // the worker is draining
	rowFP8                           // its architecture runs FP8 weights
	// rowClockFast: hotRow.seen holds LastSeen's offset from the anchor,
	// taken on the same clock reading as the anchor's (see fresh).
	rowClockFast
	// Set for one placement only:
	rowTouched  // holds a cached prefix of the request (its lens entry is set)
	rowExcluded // the request's retry must avoid it
)

// A worker is fresh when it was heard from at or after the placement's
// cutoff: !LastSeen.Before(cutoff). time.Time compares on the monotonic
// clock when both times carry a reading of it (the live router's, from
// time.Now) and on the wall clock otherwise (replay and the simulator),
// and a time.Time is 24 bytes. The hot row keeps the 8-byte offset
// LastSeen.Sub(anchor) instead, which Sub computes on the monotonic clock
// exactly when both carry it: so when LastSeen, the anchor and the cutoff
// all carry a monotonic reading, or none does, comparing the offsets is
// the same comparison Before makes. A row or a cutoff for which that does
// not hold, or whose offset saturated, is judged by coldRow.seen.Before.

// hasMonotonic reports whether t carries a monotonic clock reading: Round(0)
// strips it, so only then does the copy differ.
func hasMonotonic(t time.Time) bool { return t != t.Round(0) }

// clockOffset is t.Sub(p.anchor) and whether comparing it stands for
// comparing t (see above), anchoring the placer's clock on the first time
// it is asked about.
func (p *Placer) clockOffset(t time.Time) (int64, bool) {
	if !p.anchored {
		p.anchor, p.anchorMono, p.anchored = t, hasMonotonic(t), true
	}
	if hasMonotonic(t) != p.anchorMono {
		return 0, false
	}
	d := int64(t.Sub(p.anchor))
	return d, d != math.MinInt64 && d != math.MaxInt64 // Sub saturates
}

// stale is whether the worker at Idx i was last heard before the cutoff,
// whose offset scan has put in p.cutoffOffset (valid if p.cutoffFast).
func (p *Placer) stale(h *hotRow, i int32, cutoff time.Time) bool {
	if p.cutoffFast && h.flags&rowClockFast != 0 {
		return h.seen < p.cutoffOffset
	}
	return p.view.cold[i].seen.Before(cutoff)
}

// refresh brings the view up to f's current state. It re-reads only slots
// whose fleet version moved, and nothing at all when the fleet's version
// has not; a different fleet than last time is copied whole.
func (p *Placer) refresh(f *fleet.Fleet) {
	v := &p.view
	if v.fleet != f {
		v.fleet, v.version = f, 0
		v.vers, v.hot, v.cold, v.held = v.vers[:0], v.hot[:0], v.cold[:0], v.held[:0]
		v.prefillers, v.decoders = 0, 0
		for g := range v.members {
			v.members[g] = v.members[g][:0]
			for k := range v.byQueue[g] {
				v.byQueue[g][k] = v.byQueue[g][k][:0]
			}
			p.changed(int32(g))
		}
		// Cached residencies carry the old fleet's versions.
		clear(p.modelIdx)
		p.resCols = p.resCols[:0]
	} else if v.version == f.Version() {
		return
	}
	vers, workers := f.Versions(), f.Workers()
	for len(v.vers) < len(vers) {
		v.vers = append(v.vers, 0)
		v.hot = append(v.hot, hotRow{})
		v.cold = append(v.cold, coldRow{})
		v.held = append(v.held, -1)
	}
	for i, ver := range vers {
		if ver != v.vers[i] {
			p.copyRow(int32(i), workers[i])
			v.vers[i] = ver
		}
	}
	v.version = f.Version()
	for _, g := range v.dirty {
		p.summarize(g)
	}
	v.dirty = v.dirty[:0]
}

// changed marks group g's summary stale.
func (p *Placer) changed(g int32) {
	if gr := &p.view.groups[g]; !gr.dirty {
		gr.dirty = true
		p.view.dirty = append(p.view.dirty, g)
	}
}

// summarize recomputes what group g's bound needs from its members, and
// its class's decode buckets. It is exact, not a running total, so that a
// placer kept across fleet changes bounds, skips and reports as a new one
// would.
func (p *Placer) summarize(g int32) {
	v := &p.view
	gr := &v.groups[g]
	*gr = emptyGroup()
	for _, i := range v.members[g] {
		h := &v.hot[i]
		gr.minInvBatch = min(gr.minInvBatch, h.invBatch)
		gr.minOthers = min(gr.minOthers, h.others)
		gr.maxOthers, gr.minHeld = max(gr.maxOthers, h.others), min(gr.minHeld, max(v.held[i], 0))
		for k := range gr.minQueue {
			gr.minQueue[k] = min(gr.minQueue[k], int(h.queue[k]))
		}
		gr.minPrefills = min(gr.minPrefills, h.prefills)
		gr.minFrac, gr.maxFrac = min(gr.minFrac, h.decodeFrac), max(gr.maxFrac, h.decodeFrac)
		if h.ownPricePerSecond > 0 {
			gr.minOwnPricePerSecond = min(gr.minOwnPricePerSecond, h.ownPricePerSecond)
		}
	}
	gr.n = int32(len(v.members[g]))
	b := g / bands
	bk := &v.buckets[b]
	*bk = emptyGroup()
	for s := b * bands; s < (b+1)*bands; s++ {
		bk.merge(&v.groups[s])
	}
	k := b / decodeBuckets
	cl := &p.classes[k]
	cl.buckets = 0
	for lo := range decodeBuckets {
		bk := &v.buckets[k*decodeBuckets+int32(lo)]
		if bk.n == 0 {
			continue
		}
		cl.buckets |= 1 << lo
		if bk.maxFrac > 0 {
			cl.buckets |= 1 << (lo + 1)
		}
	}
}

// copyRow copies worker w (nil for a free slot) into row i.
func (p *Placer) copyRow(i int32, w *fleet.Worker) {
	h, c := &p.view.hot[i], &p.view.cold[i]
	for _, col := range p.resCols {
		if int(i) < len(col) {
			col[i].current = false
		}
	}
	wasLive := h.flags&rowLive != 0
	var oldGroup int32
	oldQueue := h.queue
	if wasLive {
		oldGroup = groupOf(h)
		p.changed(oldGroup)
		p.view.count(p.classes[h.class].takes, -1)
	}
	if w == nil {
		if wasLive {
			p.view.leave(oldGroup, i, &oldQueue)
		}
		*h, *c = hotRow{}, coldRow{}
		p.view.held[i] = -1
		return
	}
	if !wasLive || c.w != w || c.gpu != w.GPU || c.arch != w.Arch || c.tp != w.TP || c.role != w.Role || c.link != w.Link {
		var fp8 bool
		h.class, fp8 = p.classOf(w)
		h.flags = 0
		if fp8 {
			h.flags = rowFP8
		}
		c.gpu, c.arch, c.tp, c.role, c.link = w.GPU, w.Arch, w.TP, w.Role, w.Link
	}
	p.view.count(p.classes[h.class].takes, 1)
	h.flags = h.flags&rowFP8 | rowLive
	if !w.LastSeen.IsZero() {
		h.flags |= rowHeard
	}
	if w.Draining {
		h.flags |= rowDraining
	}
	c.seen, h.seen = w.LastSeen, 0
	if !w.LastSeen.IsZero() {
		if off, ok := p.clockOffset(w.LastSeen); ok {
			h.seen = off
			h.flags |= rowClockFast
		}
	}
	q := 0
	for k := range fleet.NumClasses {
		q += w.QueuedByClass[k] + w.BookedPromptByClass[k]
		c.queue[k] = q
		h.queue[k] = int32(min(q, math.MaxInt32))
	}
	h.prefills = notShared
	if w.StepCap {
		h.prefills = uint8(min(max(w.Prefilling+w.Waiting+w.BookedRequests, 0), maxPrefills))
	}
	batch := w.Running + w.BookedRequests + 1
	h.decodeLo, h.decodeFrac = decodePoint(batch)
	h.band = bandOf(batch, h.decodeLo)
	h.others, h.invBatch = float64(batch-1), 1/float64(batch)
	h.ownPricePerSecond = 0
	if p.on[axGPU] && w.PricePerHour > 0 {
		h.ownPricePerSecond = w.PricePerHour / 3600
	}
	if g := groupOf(h); !wasLive || g != oldGroup {
		if wasLive {
			p.view.leave(oldGroup, i, &oldQueue)
		}
		p.view.join(g, i)
		p.changed(g)
	} else if h.queue != oldQueue {
		p.view.requeue(g, i, &oldQueue)
	}

	c.w = w
	c.hbmTotal, c.hbmFree = w.HBMTotal, w.HBMFree
	c.free, c.kvTotal, c.blockSize = w.FreeBlocks(), w.KVBlocksTotal, w.BlockSize
	p.view.held[i] = heldTokens(c)
	c.batch, c.price = batch, w.PricePerHour
	c.neighbours = neighbours(w)
	for k := range c.lower {
		c.lower[k] = int32(min(w.LowerClassBlocks(k), math.MaxInt32))
	}
}

// count adds n to the split-capable counts for a row whose class takes
// takes.
func (v *view) count(takes uint8, n int32) {
	if takes&takesPrefill != 0 {
		v.prefillers += n
	}
	if takes&takesDecode != 0 {
		v.decoders += n
	}
}

// classOf returns the index of w's cost class (GPU, TP and the phases it
// takes; the reference GPU when the GPU axis is off) and whether its
// architecture runs FP8.
func (p *Placer) classOf(w *fleet.Worker) (int32, bool) {
	fp8 := p.runsFP8(w.GPU, w.Arch)
	key := classKey{gpu: w.GPU, tp: w.TP, takes: takesOf(w.Role, w.Link)}
	if !p.on[axGPU] {
		key.gpu = p.opts.ReferenceGPU
	}
	id, ok := p.classIdx[key]
	if !ok {
		id = int32(len(p.classes))
		p.classes = append(p.classes, class{gpu: key.gpu, tp: key.tp, takes: key.takes,
			errTTFT: p.phaseError(key.gpu, PhaseTTFT), errTPOT: p.phaseError(key.gpu, PhaseTPOT)})
		p.classIdx[key] = id
		for range decodeBuckets * bands {
			p.view.members = append(p.view.members, nil)
			p.view.byQueue = append(p.view.byQueue, [fleet.NumClasses][]int32{})
			p.view.groups = append(p.view.groups, emptyGroup())
		}
		for range decodeBuckets {
			p.view.buckets = append(p.view.buckets, emptyGroup())
		}
	}
	return id, fp8
}

// phaseError is the relative prediction error of phase on gpu: its
// Options.PhaseError entry (configured), else the spread learned from
// results (SetLearnedPhaseError), else Options.PredictionError.
func (p *Placer) phaseError(gpu, phase string) float64 {
	key := PhaseKey(gpu, phase)
	if e, ok := p.opts.PhaseError[key]; ok && e > 0 {
		return e
	}
	if e, ok := p.learnedErr[key]; ok && e > 0 {
		return e
	}
	return p.opts.PredictionError
}

// SetLearnedPhaseError gives the placer prediction errors learned from
// results, keyed by PhaseKey (routing's calibration): P(miss) of each
// TTFT and TPOT target is priced with its GPU kind's own spread from the
// next placement on. A configured Options.PhaseError entry still wins.
func (p *Placer) SetLearnedPhaseError(learned map[string]float64) {
	p.learnedErr = maps.Clone(learned)
	for k := range p.classes {
		cl := &p.classes[k]
		cl.errTTFT, cl.errTPOT = p.phaseError(cl.gpu, PhaseTTFT), p.phaseError(cl.gpu, PhaseTPOT)
	}
	if p.legs != nil {
		p.legs.SetLearnedPhaseError(learned)
	}
}

// runsFP8 is whether a worker with this GPU and reported architecture has
// FP8 tensor cores, from the catalog, the table the cost model costs FP8
// by: the architecture the worker reports, when it reports one, runs FP8
// if the catalog lists a GPU of it that does (ada: the L4 and L40S;
// ampere: none); else the GPU's own catalog entry says. A GPU the catalog
// does not know, with no architecture, is not trusted with FP8.
func (p *Placer) runsFP8(gpu, arch string) bool {
	cat := p.opts.Catalog
	if arch == "" {
		g, ok := cat.GPU(gpu)
		return ok && g.FP8
	}
	for _, g := range cat.GPUs() {
		if g.FP8 && strings.EqualFold(g.Arch, arch) {
			return true
		}
	}
	return false
}

// join adds row i to group g's members, keeping them in Idx order (and
// byQueue in queue order) so that a placer kept across fleet changes scans
// in the same order as a new one.
func (v *view) join(g, i int32) {
	m := v.members[g]
	at, _ := slices.BinarySearch(m, i)
	v.members[g] = slices.Insert(m, at, i)
	for k := range v.byQueue[g] {
		q := v.byQueue[g][k]
		at := v.queuePos(q, k, i, int(v.hot[i].queue[k]))
		v.byQueue[g][k] = slices.Insert(q, at, i)
	}
}

// leave removes row i, whose queue was queue when it joined, from group g.
func (v *view) leave(g, i int32, queue *[fleet.NumClasses]int32) {
	m := v.members[g]
	if at, ok := slices.BinarySearch(m, i); ok {
		v.members[g] = slices.Delete(m, at, at+1)
	}
	for k := range v.byQueue[g] {
		q := v.byQueue[g][k]
		if at := v.queuePos(q, k, i, int(queue[k])); at < len(q) && q[at] == i {
			v.byQueue[g][k] = slices.Delete(q, at, at+1)
		}
	}
}

// requeue moves row i within group g's queue orders, from queue to its
// row's.
func (v *view) requeue(g, i int32, queue *[fleet.NumClasses]int32) {
	for k := range v.byQueue[g] {
		if queue[k] == v.hot[i].queue[k] {
			continue
		}
		q := v.byQueue[g][k]
		if at := v.queuePos(q, k, i, int(queue[k])); at < len(q) && q[at] == i {
			q = slices.Delete(q, at, at+1)
		}
		at := v.queuePos(q, k, i, int(v.hot[i].queue[k]))
		v.byQueue[g][k] = slices.Insert(q, at, i)
	}
}

// queuePos is where row i with queue[k] == key sits, or would, in q
// (ordered by queue[k], then Idx). Row i's own entry, if found on the way,
// is compared at key, since its row may already hold a new queue.
func (v *view) queuePos(q []int32, k int, i int32, key int) int {
	at, _ := slices.BinarySearchFunc(q, i, func(x, i int32) int {
		kx := int(v.hot[x].queue[k])
		if x == i {
			kx = key
		}
		if c := cmp.Compare(kx, key); c != 0 {
			return c
		}
		return cmp.Compare(x, i)
	})
	return at
}

// decodePoint places a batch size among the decode buckets: the bucket at
// or below it and the fraction of the way to the next, 0 on a bucket (or
// past the last one, which is used flat).
func decodePoint(batch int) (lo uint8, frac float64) {
	if batch < 1 {
		batch = 1
	}
	l := bits.Len(uint(batch)) - 1
	if l >= decodeBuckets-1 {
		return decodeBuckets - 1, 0
	}
	if batch == 1<<l {
		return uint8(l), 0
	}
	return uint8(l), float64(batch-(1<<l)) / float64(int(1)<<l)
}

// bandOf is the quarter of decode bucket lo (see decodePoint) that batch
// falls in; the last bucket, used flat, is banded over its first octave.
func bandOf(batch int, lo uint8) uint8 {
	start := 1 << lo
	return uint8(min(max(batch-start, 0)*bands>>lo, bands-1))
}

// weightState is a model's residency on a worker as a small code, so the
// warmth and headroom axes switch on a byte instead of comparing strings.
type weightState uint8

const (
	stateHot weightState = iota
	stateSleeping
	stateLoading
	stateCold
	stateAbsent
	stateUnknown // a state string this placer does not know: never bet on it
)

// residency is the request's model on one worker.
type residency struct {
	resident bool        // the worker lists the model
	state    weightState // stateUnknown when the worker does not list the model
	// ownLoad is the worker's own load-time estimate for weights that are
	// not hot, 0 if it gave none.
	ownLoad float64
	// current is cleared for every model when the row is copied again.
	current bool
}

type modelKey struct{ model, dtype string }

// maxModelKeys bounds the residency columns kept; past it they start over,
// so requests naming ever new models cannot grow the placer without limit.
const maxModelKeys = 64

// residencies returns the column of residencies of model at dtype, by Idx
// and as long as the view. copyRow marks a row's entries stale in every
// column; the scan re-reads those (see residencyAt).
func (p *Placer) residencies(model, dtype string) []residency {
	k := modelKey{model, dtype}
	id, ok := p.modelIdx[k]
	if !ok {
		if len(p.modelIdx) >= maxModelKeys {
			clear(p.modelIdx)
			p.resCols = p.resCols[:0]
		}
		id = int32(len(p.resCols))
		p.modelIdx[k] = id
		p.resCols = append(p.resCols, nil)
	}
	col := p.resCols[id]
	for len(col) < len(p.view.hot) {
		col = append(col, residency{})
	}
	p.resCols[id] = col
	return col
}

// residencyAt is the request's model residency on the worker at Idx i,
// re-read from the worker only when the row changed since it was cached.
// The worker's class must be prepared for r.
func (p *Placer) residencyAt(i int32, r *Request) *residency {
	if e := &p.res[i]; e.current {
		return e
	}
	return p.reread(i, r)
}

func (p *Placer) reread(i int32, r *Request) *residency {
	e := &p.res[i]
	*e = residencyOf(p.view.cold[i].w, r.Model, r.Dtype)
	if !p.on[axWarmth] {
		e.ownLoad = 0 // the axis is blind to residency: see warmLoad
	}
	e.current = true
	// A state new to the worker's class needs its load_s, for this request
	// too: the class was prepared without it.
	if cl := &p.classes[p.view.hot[i].class]; cl.states&(1<<e.state) == 0 {
		cl.states |= 1 << e.state
		p.fillLoad(cl, r, e.state)
	}
	return e
}

func residencyOf(w *fleet.Worker, model, dtype string) residency {
	ms, ok := w.Model(model, dtype)
	if !ok {
		// A worker serves the models it lists (hot, sleeping, cold or
		// absent-but-loadable, as an engine that loads models on demand
		// reports them); one it does not list it cannot run, and waiting
		// will not change that. Treating it as loadable sent requests to
		// replicas of another model.
		return residency{state: stateUnknown}
	}
	res := residency{resident: true, state: stateOf(ms.State)}
	if res.state != stateHot && ms.LoadSeconds > 0 {
		res.ownLoad = ms.LoadSeconds
	}
	return res
}

func stateOf(s string) weightState {
	switch s {
	case schemas.WeightHot:
		return stateHot
	case schemas.WeightSleeping:
		return stateSleeping
	case schemas.WeightLoading:
		return stateLoading
	case schemas.WeightCold:
		return stateCold
	case schemas.WeightAbsent:
		return stateAbsent
	}
	return stateUnknown
}
