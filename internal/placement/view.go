package placement

import (
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/fleet"
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
	// members lists, by class id, the live rows of that class in
	// ascending Idx, so the scan can take a class at a time and pass over
	// a whole class whose bound cannot beat the bar without reading its
	// rows.
	members [][]int32
	dirty   []int32 // classes whose members changed since summarize
}

// hotRow is what every worker's lower bound needs: read for all of them.
type hotRow struct {
	seen time.Time // fleet.Worker.LastSeen; kept as a time.Time so freshness compares as before (monotonic clock included)
	// queue[k] is the prompt tokens queued (heartbeat) and booked of class
	// ranks 0..k: what a request of rank k waits behind (see queueTerm).
	queue [fleet.NumClasses]int
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
	flags      rowFlags
}

// coldRow is read only for workers that survive the lower bound.
type coldRow struct {
	w                 *fleet.Worker
	hbmTotal, hbmFree uint64
	free, kvTotal     int // KV blocks; free is net of bookings
	blockSize         int
	batch             int     // running + booked sequences + 1: the batch the request would join
	price             float64 // the worker's own $/hour, 0 if it gave none
	// gpu, arch and tp are what class and fp8 were derived from, so a
	// heartbeat that keeps them skips the class lookup.
	gpu, arch string
	tp        int
}

type rowFlags uint8

const (
	rowLive     rowFlags = 1 << iota // a worker occupies the slot
	rowHeard                         // at least one heartbeat (LastSeen set)
	rowDraining                      // the worker is draining
	rowFP8                           // its architecture runs FP8 weights
)

// refresh brings the view up to f's current state. It re-reads only slots
// whose fleet version moved, and nothing at all when the fleet's version
// has not; a different fleet than last time is copied whole.
func (p *Placer) refresh(f *fleet.Fleet) {
	v := &p.view
	if v.fleet != f {
		v.fleet, v.version = f, 0
		v.vers, v.hot, v.cold = v.vers[:0], v.hot[:0], v.cold[:0]
		for k := range v.members {
			v.members[k] = v.members[k][:0]
			p.changed(int32(k))
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
	}
	for i, ver := range vers {
		if ver != v.vers[i] {
			p.copyRow(int32(i), workers[i])
			v.vers[i] = ver
		}
	}
	v.version = f.Version()
	for _, k := range v.dirty {
		p.summarize(k)
	}
	v.dirty = v.dirty[:0]
}

// changed marks class k's summary stale.
func (p *Placer) changed(k int32) {
	if cl := &p.classes[k]; !cl.dirty {
		cl.dirty = true
		p.view.dirty = append(p.view.dirty, k)
	}
}

// summarize recomputes what class k's bound needs from its members: the
// decode buckets they interpolate between, their lowest own price and the
// share of a decode their biggest batch leaves each sequence. It
// is exact, not a running total, so that a placer kept across fleet
// changes bounds, skips and reports as a new one would.
func (p *Placer) summarize(k int32) {
	cl := &p.classes[k]
	cl.dirty = false
	cl.buckets, cl.minOwnPricePerSecond, cl.minInvBatch = 0, math.Inf(1), 1
	for _, i := range p.view.members[k] {
		h := &p.view.hot[i]
		cl.minInvBatch = min(cl.minInvBatch, h.invBatch)
		cl.buckets |= 1 << h.decodeLo
		if h.decodeFrac != 0 {
			cl.buckets |= 1 << (h.decodeLo + 1)
		}
		if h.ownPricePerSecond > 0 {
			cl.minOwnPricePerSecond = min(cl.minOwnPricePerSecond, h.ownPricePerSecond)
		}
	}
}

// copyRow copies worker w (nil for a free slot) into row i.
func (p *Placer) copyRow(i int32, w *fleet.Worker) {
	h, c := &p.view.hot[i], &p.view.cold[i]
	wasLive, oldClass := h.flags&rowLive != 0, h.class
	if wasLive {
		p.changed(oldClass)
	}
	if w == nil {
		if wasLive {
			p.view.leave(oldClass, i)
		}
		*h, *c = hotRow{}, coldRow{}
		return
	}
	if !wasLive || c.w != w || c.gpu != w.GPU || c.arch != w.Arch || c.tp != w.TP {
		var fp8 bool
		h.class, fp8 = p.classOf(w)
		h.flags = 0
		if fp8 {
			h.flags = rowFP8
		}
		c.gpu, c.arch, c.tp = w.GPU, w.Arch, w.TP
		if wasLive && oldClass != h.class {
			p.view.leave(oldClass, i)
		}
		if !wasLive || oldClass != h.class {
			p.view.join(h.class, i)
			p.changed(h.class)
		}
	}
	h.flags = h.flags&rowFP8 | rowLive
	if !w.LastSeen.IsZero() {
		h.flags |= rowHeard
	}
	if w.Draining {
		h.flags |= rowDraining
	}
	h.seen = w.LastSeen
	q := 0
	for k := range fleet.NumClasses {
		q += w.QueuedByClass[k] + w.BookedPromptByClass[k]
		h.queue[k] = q
	}
	batch := w.Running + w.BookedRequests + 1
	h.decodeLo, h.decodeFrac = decodePoint(batch)
	h.others, h.invBatch = float64(batch-1), 1/float64(batch)
	h.ownPricePerSecond = 0
	if p.on[axGPU] && w.PricePerHour > 0 {
		h.ownPricePerSecond = w.PricePerHour / 3600
	}

	c.w = w
	c.hbmTotal, c.hbmFree = w.HBMTotal, w.HBMFree
	c.free, c.kvTotal, c.blockSize = w.FreeBlocks(), w.KVBlocksTotal, w.BlockSize
	c.batch, c.price = batch, w.PricePerHour
}

// classOf returns the index of w's cost class (GPU and TP; the reference
// GPU when the GPU axis is off) and whether its architecture runs FP8.
func (p *Placer) classOf(w *fleet.Worker) (int32, bool) {
	arch := w.Arch
	if arch == "" {
		arch = ArchOf(w.GPU)
	}
	fp8 := false
	for _, a := range p.opts.FP8Arches {
		if strings.EqualFold(a, arch) {
			fp8 = true
		}
	}
	key := classKey{gpu: w.GPU, tp: w.TP}
	if !p.on[axGPU] {
		key.gpu = p.opts.ReferenceGPU
	}
	id, ok := p.classIdx[key]
	if !ok {
		id = int32(len(p.classes))
		p.classes = append(p.classes, class{gpu: key.gpu, tp: key.tp, minOwnPricePerSecond: math.Inf(1)})
		p.classIdx[key] = id
		p.view.members = append(p.view.members, nil)
	}
	return id, fp8
}

// join adds row i to class k's members, keeping them in Idx order so that
// a placer kept across fleet changes scans in the same order as a new one.
func (v *view) join(k, i int32) {
	m := v.members[k]
	at, _ := slices.BinarySearch(m, i)
	v.members[k] = slices.Insert(m, at, i)
}

func (v *view) leave(k, i int32) {
	m := v.members[k]
	if at, ok := slices.BinarySearch(m, i); ok {
		v.members[k] = slices.Delete(m, at, at+1)
	}
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
	state    weightState // stateAbsent when not resident
	// ownLoad is the worker's own load-time estimate for weights that are
	// not hot, 0 if it gave none.
	ownLoad float64
	// version is the view.vers entry of the row it was read at; 0 never is.
	version uint64
}

type modelKey struct{ model, dtype string }

// maxModelKeys bounds the residency columns kept; past it they start over,
// so requests naming ever new models cannot grow the placer without limit.
const maxModelKeys = 64

// residencies returns the column of residencies of model at dtype, by Idx
// and as long as the view. An entry is current when its version equals
// the row's; the scan re-reads the others (see residencyAt).
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
	if e := &p.res[i]; e.version == p.view.vers[i] {
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
	e.version = p.view.vers[i]
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
		return residency{state: stateAbsent}
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
