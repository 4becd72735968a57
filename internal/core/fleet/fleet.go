// Package fleet owns the router's view of its workers, built from
// schemas.Heartbeat and schemas.KVEvent: each worker's GPU generation, HBM
// and KV-block capacity, resident models and their load-time estimates,
// running and queued work, draining flag, and the prefix index of the KV
// blocks it holds (internal/core/prefix). It also owns bookings: capacity the
// router has promised to dispatched requests that the worker's heartbeats do
// not show yet.
//
// Stale state fails closed: a worker not heard from within Staleness
// (default 3 s, three missed heartbeats) is not a placement candidate. We
// prefer refusing a worker that may be alive over dispatching to one that
// may be dead or full, because a misplaced request loses its prefill and its
// deadline, while a refused one just goes elsewhere or waits.
//
// KV events carry a per-worker Seq that increases by one per event. ApplyKV
// reports a gap so the caller can ask the worker for a snapshot (the Dynamo
// recovery scheme); until the snapshot arrives the events that did arrive are
// still applied, since a partially right prefix index only mis-scores, never
// misroutes. A heartbeat whose KVSeq is behind what we applied means the
// worker restarted: its blocks are dropped.
//
// Bookings follow the Kubernetes Reserve/Unreserve contract: Reserve counts
// a request's blocks, tokens and batch slot against the worker at once, so a
// placement made before the next heartbeat sees it; Unreserve is idempotent.
// A booking is absorbed (dropped, because the worker's own numbers now
// include it) by the first heartbeat received at least Settle after it was
// made.
//
// Every change to a worker's fields, through any method here, bumps the
// fleet's Version and records it in that worker's slot of Versions, so a
// consumer keeping a compact copy of the workers (the placer does) can
// refresh only the slots that changed instead of re-reading every worker
// on every placement.
//
// Concurrency: a Fleet is plain data with no goroutines and no locks; time
// is passed in. The router shell owns it from one goroutine (or behind one
// mutex) and serialises heartbeats, KV events, bookings and placements.
// *Worker pointers stay valid until the worker is removed.
package fleet

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/prefix"
	"github.com/switchyard-ai/switchyard/schemas"
)

// NumClasses is the number of priority classes (schemas.Priorities): the
// length of Worker's per-class arrays, indexed by schemas.PriorityRank.
const NumClasses = 4

// classRank indexes the per-class arrays. An unknown or empty class counts
// as the highest, ahead of everyone: overcounting a queue only delays a
// placement, while undercounting one can miss a deadline.
func classRank(class string) int {
	if r := schemas.PriorityRank(class); r >= 0 && r < NumClasses {
		return r
	}
	return 0
}

// Defaults for Options.
const (
	DefaultStaleness = 3 * time.Second
	DefaultSettle    = time.Second
)

// Options configures a Fleet.
type Options struct {
	// Staleness is how long a worker stays a candidate after its last
	// heartbeat.
	Staleness time.Duration
	// Settle is how long after a booking a heartbeat must arrive before it
	// is trusted to include that booking.
	Settle time.Duration
	// PrefixCap bounds each worker's indexed blocks when its heartbeat does
	// not give KVBlocksTotal (prefix.DefaultCap when 0).
	PrefixCap int
}

// Worker is the router's view of one worker. Fields are read-only outside
// this package: a write from outside would not bump Fleet.Versions, and
// copies refreshed by version would miss it.
type Worker struct {
	ID string
	// Idx is the worker's small dense id, used by the prefix index and by
	// placement scratch arrays. Ids are recycled after Remove.
	Idx  int32
	Pool string
	GPU  string
	Arch string
	TP   int
	// Role is the phases the worker takes (schemas.RolePrefill,
	// RoleDecode, RoleBoth; "" reads as RoleBoth) and Link its network
	// link for KV transfers (a catalog link name; "" for none).
	Role, Link string

	HBMTotal, HBMFree           uint64
	KVBlocksTotal, KVBlocksFree int
	BlockSize                   int
	Models                      []schemas.ModelState

	Running, Waiting, QueuedTokens, MaxBatch int
	// Prefilling is the running sequences without their first token, and
	// StepCap whether the engine shares each step among the prompts it
	// prefills (heartbeat prefilling, step_cap).
	Prefilling int
	StepCap    bool
	// QueuedByClass splits QueuedTokens by class rank (schemas.PriorityRank)
	// from the heartbeat's QueuedTokensByClass; tokens a heartbeat does not
	// attribute to a known class count as critical.
	QueuedByClass [NumClasses]int
	// KVByClass splits the KV blocks in use (KVBlocksTotal − KVBlocksFree)
	// by the class rank of the running sequences holding them, from the
	// heartbeat's KVBlocksByClass; blocks it does not attribute to a known
	// class count as critical, which no request can reclaim.
	KVByClass    [NumClasses]int
	Draining     bool
	PricePerHour float64
	Simulated    bool

	// LastSeen is the router's receive time of the last heartbeat; zero
	// until the first one, so a worker known only from KV events is never
	// a candidate.
	LastSeen time.Time

	// KVSeq is the last KV event sequence number applied; KVInSync is false
	// from a detected gap until the next snapshot.
	KVSeq    uint64
	KVInSync bool

	// Booked* are the bookings not yet absorbed by a heartbeat.
	BookedBlocks, BookedPromptTokens, BookedOutputTokens, BookedRequests int
	// BookedPromptByClass splits BookedPromptTokens by the booked requests'
	// class rank.
	BookedPromptByClass [NumClasses]int

	booked []string // request ids booked here, so absorb need not scan all bookings
}

// Fresh reports whether w was heard from within staleness of now.
func (w *Worker) Fresh(now time.Time, staleness time.Duration) bool {
	return !w.LastSeen.IsZero() && now.Sub(w.LastSeen) <= staleness
}

// FreeBlocks is the worker's free KV blocks net of bookings.
func (w *Worker) FreeBlocks() int { return w.KVBlocksFree - w.BookedBlocks }

// LowerClassBlocks is the KV blocks held by classes of rank above rank
// (strictly lower priority): what the engine would preempt for a waiting
// sequence of that rank. Bookings are not in it: FreeBlocks already
// charges them, so FreeBlocks()+LowerClassBlocks(rank) is what a request
// of that rank can have, net of bookings.
func (w *Worker) LowerClassBlocks(rank int) int {
	n := 0
	for k := max(rank+1, 0); k < NumClasses; k++ {
		n += w.KVByClass[k]
	}
	return n
}

// Model returns the residency of model on w (dtype "" matches any), or
// ok=false when the worker does not list it.
func (w *Worker) Model(model, dtype string) (schemas.ModelState, bool) {
	for i := range w.Models {
		m := &w.Models[i]
		if m.Name == model && (dtype == "" || m.Dtype == "" || m.Dtype == dtype) {
			return *m, true
		}
	}
	return schemas.ModelState{}, false
}

type booking struct {
	worker                             int32
	rank                               int8
	at                                 time.Time
	blocks, promptTokens, outputTokens int
}

// Fleet is the set of workers the router can place on.
type Fleet struct {
	opts     Options
	workers  []*Worker // by Idx; nil for a free id
	byID     map[string]int32
	freeIdx  []int32
	index    *prefix.Index
	bookings map[string]booking
	live     int
	strs     map[string]string

	version  uint64   // bumped by every change to any worker
	versions []uint64 // by Idx: version of the slot's last change
}

// maxInterned bounds the intern table so odd heartbeats cannot grow it
// without limit; past it strings are kept as they come.
const maxInterned = 4096

// intern returns the fleet's canonical copy of s. Heartbeats repeat a few
// GPU, model, dtype and state names across a thousand workers; sharing one
// backing array per name lets placement compare them by pointer instead of
// touching each worker's own bytes (a cache miss per worker per placement).
func (f *Fleet) intern(s string) string {
	if c, ok := f.strs[s]; ok {
		return c
	}
	if len(f.strs) < maxInterned {
		f.strs[s] = s
	}
	return s
}

// Canonical returns the interned copy of s if the fleet has one, else s;
// callers comparing many workers' fields against s use it once up front.
func (f *Fleet) Canonical(s string) string {
	if c, ok := f.strs[s]; ok {
		return c
	}
	return s
}

// New returns an empty fleet.
func New(opts Options) *Fleet {
	if opts.Staleness <= 0 {
		opts.Staleness = DefaultStaleness
	}
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	f := &Fleet{
		opts:     opts,
		byID:     make(map[string]int32),
		index:    prefix.New(opts.PrefixCap),
		bookings: make(map[string]booking),
		strs:     make(map[string]string),
	}
	for _, c := range []string{schemas.WeightHot, schemas.WeightSleeping, schemas.WeightLoading, schemas.WeightCold, schemas.WeightAbsent} {
		f.strs[c] = c
	}
	return f
}

// Staleness is the configured staleness bound.
func (f *Fleet) Staleness() time.Duration { return f.opts.Staleness }

// Prefix is the fleet's prefix index, keyed by Worker.Idx.
func (f *Fleet) Prefix() *prefix.Index { return f.index }

// Workers returns the worker table indexed by Idx; entries may be nil.
// The slice is the fleet's own: do not modify it.
func (f *Fleet) Workers() []*Worker { return f.workers }

// Version changes whenever any worker's fields change, or a worker is
// added or removed (KV events included: they move the worker's KVSeq); it
// never repeats within a fleet.
func (f *Fleet) Version() uint64 { return f.version }

// Versions is, by Idx, the Version at which each slot last changed (a
// worker added, updated or removed); a consumer that remembers these can
// tell exactly which slots to re-read. The slice is the fleet's own and has
// the length of Workers: do not modify it.
func (f *Fleet) Versions() []uint64 { return f.versions }

// changed records a change to the slot idx.
func (f *Fleet) changed(idx int32) {
	f.version++
	f.versions[idx] = f.version
}

// Len is the number of workers known.
func (f *Fleet) Len() int { return f.live }

// Get returns the worker with id, or nil.
func (f *Fleet) Get(id string) *Worker {
	if i, ok := f.byID[id]; ok {
		return f.workers[i]
	}
	return nil
}

// Candidates appends to dst the workers that may take new work at now:
// heard from within Staleness and not draining.
func (f *Fleet) Candidates(now time.Time, dst []*Worker) []*Worker {
	for _, w := range f.workers {
		if w != nil && !w.Draining && w.Fresh(now, f.opts.Staleness) {
			dst = append(dst, w)
		}
	}
	return dst
}

func (f *Fleet) ensure(id string) *Worker {
	if i, ok := f.byID[id]; ok {
		return f.workers[i]
	}
	var idx int32
	if n := len(f.freeIdx); n > 0 {
		idx = f.freeIdx[n-1]
		f.freeIdx = f.freeIdx[:n-1]
	} else {
		idx = int32(len(f.workers))
		f.workers = append(f.workers, nil)
		f.versions = append(f.versions, 0)
	}
	w := &Worker{ID: id, Idx: idx}
	f.workers[idx] = w
	f.byID[id] = idx
	f.live++
	f.changed(idx)
	return w
}

// ApplyHeartbeat updates (or adds) the worker hb describes, received at now.
// It reports needSnapshot when this is the first heartbeat we have from the
// worker and it has already published KV events we never saw (the router
// started after the worker): only a snapshot can fill the index.
func (f *Fleet) ApplyHeartbeat(hb *schemas.Heartbeat, now time.Time) (needSnapshot bool) {
	w := f.ensure(hb.WorkerID)
	first := w.LastSeen.IsZero()
	w.Pool, w.GPU, w.Arch, w.TP = f.intern(hb.Pool), f.intern(hb.GPU), f.intern(hb.Arch), hb.TP
	w.Role, w.Link = f.intern(hb.Role), f.intern(hb.Link)
	if w.TP < 1 {
		w.TP = 1
	}
	w.HBMTotal, w.HBMFree = hb.HBMTotalBytes, hb.HBMFreeBytes
	if w.KVBlocksTotal != hb.KVBlocksTotal {
		// The worker cannot hold more blocks than its KV pool, so that is
		// the natural bound on its index entries.
		f.index.SetCap(w.Idx, hb.KVBlocksTotal)
	}
	w.KVBlocksTotal, w.KVBlocksFree = hb.KVBlocksTotal, hb.KVBlocksFree
	w.BlockSize = hb.BlockSize
	w.Models = append(w.Models[:0], hb.Models...)
	for i := range w.Models {
		m := &w.Models[i]
		m.Name, m.Dtype, m.State = f.intern(m.Name), f.intern(m.Dtype), f.intern(m.State)
	}
	w.Running, w.Waiting, w.QueuedTokens, w.MaxBatch = hb.Running, hb.Waiting, hb.QueuedTokens, hb.MaxBatch
	w.Prefilling, w.StepCap = hb.Prefilling, hb.StepCap
	w.QueuedByClass = [NumClasses]int{}
	attributed := 0
	for class, n := range hb.QueuedTokensByClass {
		w.QueuedByClass[classRank(class)] += n
		attributed += n
	}
	if rest := hb.QueuedTokens - attributed; rest > 0 {
		// An older worker (no split) or an inconsistent one: whatever is
		// not attributed is ahead of everyone, as it was before the split.
		w.QueuedByClass[0] += rest
	}
	w.KVByClass = [NumClasses]int{}
	held := 0
	for class, n := range hb.KVBlocksByClass {
		w.KVByClass[classRank(class)] += n
		held += n
	}
	if rest := hb.KVBlocksTotal - hb.KVBlocksFree - held; rest > 0 {
		// An older worker (no split) or an inconsistent one: blocks not
		// attributed are held by the highest class, which nobody preempts.
		w.KVByClass[0] += rest
	}
	w.Draining = hb.Draining
	w.PricePerHour = hb.PricePerHour
	w.Simulated = hb.Simulated
	w.LastSeen = now

	if hb.KVSeq < w.KVSeq {
		// The worker's KV sequence went backwards: it restarted with an
		// empty cache.
		f.index.Cleared(w.Idx)
		w.KVSeq = 0
		w.KVInSync = true
	} else if w.KVSeq == 0 && hb.KVSeq == 0 {
		w.KVInSync = true
	} else if first && w.KVSeq == 0 {
		w.KVInSync = false
		needSnapshot = true
	}
	f.absorb(w, now)
	f.changed(w.Idx)
	return needSnapshot
}

// absorb drops bookings on w old enough that this heartbeat includes them.
func (f *Fleet) absorb(w *Worker, now time.Time) {
	for i := 0; i < len(w.booked); {
		id := w.booked[i]
		if b := f.bookings[id]; now.Sub(b.at) >= f.opts.Settle {
			f.release(id, b) // removes w.booked[i]
			continue
		}
		i++
	}
}

// ApplyKV applies a KV event and reports whether it revealed a gap in the
// worker's event sequence, in which case the caller should request a
// snapshot. Duplicates and events older than the last applied are ignored.
func (f *Fleet) ApplyKV(ev *schemas.KVEvent, now time.Time) (gap bool) {
	w := f.ensure(ev.WorkerID)
	defer f.changed(w.Idx) // KVSeq and KVInSync are worker fields too
	if ev.Kind == schemas.KVSnapshot {
		if ev.Seq < w.KVSeq {
			return false // a stale snapshot overtaken by newer events
		}
		f.index.Snapshot(w.Idx, ev.Hashes)
		w.KVSeq = ev.Seq
		w.KVInSync = true
		return false
	}
	if ev.Seq != 0 && ev.Seq <= w.KVSeq {
		return false
	}
	if ev.Seq != w.KVSeq+1 {
		gap = true
		w.KVInSync = false
	}
	w.KVSeq = ev.Seq
	switch ev.Kind {
	case schemas.KVStored:
		f.index.Stored(w.Idx, ev.Hashes)
	case schemas.KVEvicted:
		f.index.Evicted(w.Idx, ev.Hashes)
	case schemas.KVCleared:
		f.index.Cleared(w.Idx)
	}
	return gap
}

// Remove drops a worker, its prefix entries and its bookings.
func (f *Fleet) Remove(id string) {
	idx, ok := f.byID[id]
	if !ok {
		return
	}
	w := f.workers[idx]
	for _, rid := range w.booked {
		delete(f.bookings, rid)
	}
	f.index.Cleared(idx)
	f.index.SetCap(idx, 0)
	f.workers[idx] = nil
	delete(f.byID, id)
	f.freeIdx = append(f.freeIdx, idx)
	f.live--
	f.changed(idx)
}

// Errors from Reserve.
var (
	ErrUnknownWorker = errors.New("fleet: unknown worker")
	ErrDuplicate     = errors.New("fleet: request already booked")
)

// Reserve books capacity on workerID for requestID of priority class at
// now: blocks KV blocks (net of cached ones), promptTokens still to prefill
// (counted under class, since the engine prefills in class order), outputTokens
// to decode, and one batch slot.
func (f *Fleet) Reserve(workerID, requestID, class string, promptTokens, outputTokens, blocks int, now time.Time) error {
	idx, ok := f.byID[workerID]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownWorker, workerID)
	}
	if _, dup := f.bookings[requestID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicate, requestID)
	}
	b := booking{worker: idx, rank: int8(classRank(class)), at: now, blocks: blocks, promptTokens: promptTokens, outputTokens: outputTokens}
	f.bookings[requestID] = b
	w := f.workers[idx]
	w.BookedBlocks += blocks
	w.BookedPromptTokens += promptTokens
	w.BookedPromptByClass[b.rank] += promptTokens
	w.BookedOutputTokens += outputTokens
	w.BookedRequests++
	w.booked = append(w.booked, requestID)
	f.changed(idx)
	return nil
}

// Unreserve releases requestID's booking, if it still has one, and reports
// whether it did. Calling it twice, or after a heartbeat absorbed the
// booking, is a no-op.
func (f *Fleet) Unreserve(requestID string) bool {
	b, ok := f.bookings[requestID]
	if !ok {
		return false
	}
	f.release(requestID, b)
	return true
}

// Bookings is the number of bookings not yet absorbed or released.
func (f *Fleet) Bookings() int { return len(f.bookings) }

func (f *Fleet) release(id string, b booking) {
	delete(f.bookings, id)
	w := f.workers[b.worker]
	w.BookedBlocks -= b.blocks
	w.BookedPromptTokens -= b.promptTokens
	w.BookedPromptByClass[b.rank] -= b.promptTokens
	w.BookedOutputTokens -= b.outputTokens
	w.BookedRequests--
	for i, x := range w.booked {
		if x == id {
			w.booked[i] = w.booked[len(w.booked)-1]
			w.booked = w.booked[:len(w.booked)-1]
			break
		}
	}
	f.changed(b.worker)
}
