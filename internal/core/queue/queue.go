// Package queue owns the router's wait queue: weighted priority classes
// with earliest-deadline-first order inside each class, a starvation
// guarantee across classes, and explicit expiry of requests whose deadline
// can no longer be met.
//
// Between classes the queue runs smooth weighted round-robin (the nginx
// scheme) over the classes that have work: with weights 8/4/2/1 and every
// class backlogged, every window of 15 pops serves 8/4/2/1 requests, so the
// lowest class always gets its share and is never starved, while an idle
// class's share goes to the others. Inside a class the earliest deadline
// goes first (no deadline sorts last), ties in arrival order — until the
// class falls behind: when the request EDF would serve next has already
// waited longer than LIFOAfter, the class serves its newest request first
// (adaptive LIFO, as in Facebook's "Fail at Scale" queues) until it catches
// up. Under sustained overload EDF serves exactly the requests that have
// waited longest, whose first-token targets are already lost, and every
// newer request then ages past its own behind them; newest-first serves
// requests that can still start in time and leaves the stale ones to
// expire. When the backlog clears, EDF's head is fresh again and EDF
// resumes.
//
// A request expires when now + its predicted minimum service time is past
// its deadline: computing it would waste GPU time on an answer nobody can
// use, so PopReady hands it back as expired for an explicit
// deadline_exceeded result instead. Expiry is found through a second heap
// keyed by each request's latest feasible start, so it costs O(log n) too.
//
// A Queue is plain data: no goroutines, no locks, time passed in. The
// router shell serialises access.
package queue

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// DefaultLIFOAfter is how long the EDF head of a class may have waited
// before the class switches to newest-first: a second, the critical
// class's first-token budget (traces.DefaultSLOs), so a request older than
// that has missed the tightest target any class sets. The simulator found
// the threshold matters little between 0.25 s and 4 s (docs/benchmarks.md,
// "Priority under overload").
const DefaultLIFOAfter = time.Second

// DefaultWeights are the per-class shares, highest class first.
var DefaultWeights = map[string]int{
	schemas.PriorityCritical: 8, schemas.PriorityInteractive: 4,
	schemas.PriorityStandard: 2, schemas.PriorityBatch: 1,
}

// Item is one queued request. Payload carries whatever the caller needs
// back (typically the admitted envelope).
type Item[T any] struct {
	ID       string
	Priority string
	// Deadline is zero when the request has none (it then never expires).
	Deadline time.Time
	// MinService is the predicted minimum time to serve the request on the
	// best worker, the bar for expiry.
	MinService time.Duration
	Enqueued   time.Time
	Payload    T
}

// Errors from Push.
var (
	ErrUnknownPriority = errors.New("queue: unknown priority class")
	ErrDuplicate       = errors.New("queue: request already queued")
)

type entry[T any] struct {
	item      Item[T]
	class     int // the band it waits in
	rank      int // its own priority class
	seq       uint64
	dl        int64 // order key in its class: the deadline in unix ns, MaxInt64 for none or in arrival order
	lastStart int64 // dl - MinService
	enq       int64 // Enqueued in unix ns, 0 when unknown
	ci, ei    int   // positions in the class heap and the expiry heap
	li        int   // position in the class's newest-first heap
}

type classHeap[T any] []*entry[T]

func (h classHeap[T]) Len() int { return len(h) }
func (h classHeap[T]) Less(i, j int) bool {
	if h[i].dl != h[j].dl {
		return h[i].dl < h[j].dl
	}
	return h[i].seq < h[j].seq
}
func (h classHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].ci = i; h[j].ci = j }
func (h *classHeap[T]) Push(x any)   { e := x.(*entry[T]); e.ci = len(*h); *h = append(*h, e) }
func (h *classHeap[T]) Pop() any {
	o := *h
	e := o[len(o)-1]
	o[len(o)-1] = nil
	*h = o[:len(o)-1]
	return e
}

// newestHeap orders a class newest first: latest Enqueued, then latest
// pushed.
type newestHeap[T any] []*entry[T]

func (h newestHeap[T]) Len() int { return len(h) }
func (h newestHeap[T]) Less(i, j int) bool {
	if h[i].enq != h[j].enq {
		return h[i].enq > h[j].enq
	}
	return h[i].seq > h[j].seq
}
func (h newestHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].li = i; h[j].li = j }
func (h *newestHeap[T]) Push(x any)   { e := x.(*entry[T]); e.li = len(*h); *h = append(*h, e) }
func (h *newestHeap[T]) Pop() any {
	o := *h
	e := o[len(o)-1]
	o[len(o)-1] = nil
	*h = o[:len(o)-1]
	return e
}

type expiryHeap[T any] []*entry[T]

func (h expiryHeap[T]) Len() int           { return len(h) }
func (h expiryHeap[T]) Less(i, j int) bool { return h[i].lastStart < h[j].lastStart }
func (h expiryHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].ei = i; h[j].ei = j }
func (h *expiryHeap[T]) Push(x any)        { e := x.(*entry[T]); e.ei = len(*h); *h = append(*h, e) }
func (h *expiryHeap[T]) Pop() any {
	o := *h
	e := o[len(o)-1]
	o[len(o)-1] = nil
	*h = o[:len(o)-1]
	return e
}

// Queue is the router's wait queue.
type Queue[T any] struct {
	names   []string
	weights []int
	current []int // smooth WRR state
	classes []classHeap[T]
	newest  []newestHeap[T]
	expiry  expiryHeap[T]
	byID    map[string]*entry[T]
	seq     uint64
	// lifoAfter is the EDF head's wait past which its class serves newest
	// first; <= 0 keeps EDF always.
	lifoAfter int64
	disc      Discipline
	byRank    []int       // queued per priority class, whatever the band
	blocked   []*entry[T] // Pass scratch
}

// Discipline is how a queue orders and expires what it holds. The zero
// value is Switchyard's: weighted classes (DefaultWeights), earliest
// deadline first inside a class with the adaptive LIFO switch, and expiry
// of requests that can no longer meet their deadline. The other settings
// let a baseline's router keep the queue its own documentation describes
// (internal/core/baselines), through the same code.
type Discipline struct {
	// Weights are the per-class shares (DefaultWeights when nil).
	Weights map[string]int
	// Strict serves the highest non-empty class always (priority bands)
	// instead of weighted round-robin.
	Strict bool
	// OneBand puts every class in one band: a gateway that forwards in
	// arrival order whatever the class.
	OneBand bool
	// ArrivalOrder serves each class first come, first served instead of
	// earliest deadline first (and never switches to newest first).
	ArrivalOrder bool
	// NoExpiry keeps a request whose deadline can no longer be met instead
	// of handing it back as expired.
	NoExpiry bool
	// LIFOAfter overrides DefaultLIFOAfter; negative keeps EDF always.
	LIFOAfter time.Duration
}

// New returns an empty queue with one class per schemas.Priorities entry,
// weighted by weights (DefaultWeights when nil; a class missing from it, or
// with weight < 1, gets 1 so it can never starve).
func New[T any](weights map[string]int) *Queue[T] {
	return NewWith[T](Discipline{Weights: weights})
}

// NewWith returns an empty queue kept by discipline d.
func NewWith[T any](d Discipline) *Queue[T] {
	weights := d.Weights
	if weights == nil {
		weights = DefaultWeights
	}
	n := len(schemas.Priorities)
	q := &Queue[T]{
		names: schemas.Priorities, weights: make([]int, n), current: make([]int, n),
		classes: make([]classHeap[T], n), newest: make([]newestHeap[T], n), byID: make(map[string]*entry[T]),
		lifoAfter: int64(DefaultLIFOAfter), disc: d, byRank: make([]int, n),
	}
	for i, p := range schemas.Priorities {
		q.weights[i] = max(weights[p], 1)
	}
	switch {
	case d.ArrivalOrder || d.LIFOAfter < 0:
		q.lifoAfter = 0
	case d.LIFOAfter > 0:
		q.lifoAfter = int64(d.LIFOAfter)
	}
	return q
}

// Discipline is how q orders and expires.
func (q *Queue[T]) Discipline() Discipline { return q.disc }

// SetLIFOAfter sets how long a class's EDF head may have waited before the
// class serves newest first (DefaultLIFOAfter unless set); d <= 0 keeps
// every class in EDF order always.
func (q *Queue[T]) SetLIFOAfter(d time.Duration) { q.lifoAfter = int64(d) }

// Push enqueues it.
func (q *Queue[T]) Push(it Item[T]) error {
	c := schemas.PriorityRank(it.Priority)
	if c < 0 {
		return fmt.Errorf("%w: %q", ErrUnknownPriority, it.Priority)
	}
	if _, dup := q.byID[it.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicate, it.ID)
	}
	rank := c
	if q.disc.OneBand {
		c = 0
	}
	q.seq++
	e := &entry[T]{item: it, class: c, rank: rank, seq: q.seq, dl: math.MaxInt64, lastStart: math.MaxInt64}
	if !it.Deadline.IsZero() {
		dl := it.Deadline.UnixNano()
		if !q.disc.ArrivalOrder {
			e.dl = dl
		}
		if !q.disc.NoExpiry {
			e.lastStart = dl - int64(it.MinService)
		}
	}
	if !it.Enqueued.IsZero() {
		e.enq = it.Enqueued.UnixNano()
	}
	q.insert(e)
	return nil
}

func (q *Queue[T]) insert(e *entry[T]) {
	heap.Push(&q.classes[e.class], e)
	heap.Push(&q.newest[e.class], e)
	heap.Push(&q.expiry, e)
	q.byID[e.item.ID] = e
	q.byRank[e.rank]++
}

// PopReady returns the next request to place at now, or ok=false when the
// queue is empty. Requests found expired on the way are appended to
// expired and returned; they are removed from the queue.
func (q *Queue[T]) PopReady(now time.Time, expired []Item[T]) (it Item[T], ok bool, exp []Item[T]) {
	expired = q.Expire(now, expired)
	c := q.pick()
	if c < 0 {
		return it, false, expired
	}
	e := q.head(c, now.UnixNano())
	q.remove(e)
	return e.item, true, expired
}

// head is class c's next request at now (unix ns): the earliest deadline,
// or the newest request once the earliest deadline's has waited longer
// than lifoAfter. A head of unknown enqueue time never switches the class.
func (q *Queue[T]) head(c int, now int64) *entry[T] {
	e := q.classes[c][0]
	if q.lifoAfter > 0 && e.enq != 0 && now-e.enq > q.lifoAfter {
		return q.newest[c][0]
	}
	return e
}

// Expire removes and appends to dst every request that can no longer meet
// its deadline at now.
func (q *Queue[T]) Expire(now time.Time, dst []Item[T]) []Item[T] {
	t := now.UnixNano()
	for len(q.expiry) > 0 && q.expiry[0].lastStart < t {
		e := q.expiry[0]
		q.remove(e)
		dst = append(dst, e.item)
	}
	return dst
}

// pick chooses the class to serve by smooth weighted round-robin over the
// non-empty classes, or -1 when all are empty.
func (q *Queue[T]) pick() int {
	if q.disc.Strict {
		for i := range q.classes {
			if len(q.classes[i]) > 0 {
				return i
			}
		}
		return -1
	}
	best, total := -1, 0
	for i := range q.classes {
		if len(q.classes[i]) == 0 {
			continue
		}
		q.current[i] += q.weights[i]
		total += q.weights[i]
		if best < 0 || q.current[i] > q.current[best] {
			best = i
		}
	}
	if best >= 0 {
		q.current[best] -= total
	}
	return best
}

// Remove takes a request out of the queue (a cancel), reporting whether it
// was queued.
func (q *Queue[T]) Remove(id string) (Item[T], bool) {
	e, ok := q.byID[id]
	if !ok {
		var zero Item[T]
		return zero, false
	}
	q.remove(e)
	return e.item, true
}

func (q *Queue[T]) remove(e *entry[T]) {
	heap.Remove(&q.classes[e.class], e.ci)
	heap.Remove(&q.newest[e.class], e.li)
	heap.Remove(&q.expiry, e.ei)
	delete(q.byID, e.item.ID)
	q.byRank[e.rank]--
	if len(q.classes[e.class]) == 0 {
		// An emptied class restarts from zero credit, so a burst after an
		// idle spell cannot cash in credit it banked while others waited.
		q.current[e.class] = 0
	}
}

// Len is the number of queued requests.
func (q *Queue[T]) Len() int { return len(q.byID) }

// LenClass is the number queued of priority class p, whatever band they
// wait in.
func (q *Queue[T]) LenClass(p string) int {
	if c := schemas.PriorityRank(p); c >= 0 {
		return q.byRank[c]
	}
	return 0
}

// Outcome is what became of one item a Pass offered for placement.
type Outcome int

const (
	// Placed: the item left the queue for good (dispatched).
	Placed Outcome = iota
	// Blocked: it cannot be placed yet; it goes back in the queue.
	Blocked
	// Answered: it left the queue another way (failed as unplaceable).
	Answered
)

// Pass runs one placement pass at now: it removes the requests that can no
// longer meet their deadline (appended to expired and returned, for the
// caller to answer), then offers requests to place in queue order until
// maxBlocked of them are blocked or the queue runs dry, and puts the
// blocked ones back. The live router and the simulator both place through
// Pass, so they walk the queue identically.
//
// Measured in the simulator (Mooncake conversation trace, first 10 min,
// h100:16; SLO attainment overall / critical / interactive / standard /
// batch; each row against EDF in the same build):
//
//   - Adaptive LIFO inside each class (kept, see head): 8× 0.923 → 0.953
//     (interactive 0.880 → 0.935); 12× 0.476 → 0.829, by class
//     0.940/0.116/0.673/0.988 → 0.924/0.867/0.882/0.542; 16× 0.325 → 0.727;
//     24× 0.290 → 0.551. Under EDF the
//     interactive heads were the requests that had waited longest (p50
//     18 s in the queue at 12×), infeasible on every worker for lack of
//     slack, and each pass spent its blocked budget on them while the WRR
//     turns of standard and batch kept placing. Threshold 0.25 s … 4 s:
//     12× 0.83 … 0.84, 8× 0.944 … 0.955. Azure code trace on h100:4: the
//     same at 1×, 2× and 4×, 0.957 → 0.953 at 8×. Cost: critical loses a
//     little at 12× and more at 24× (0.901 → 0.816), its large prompts
//     finding no worker with the KV free once interactive work runs. Not a
//     win everywhere: on the trace's first 1,000 requests at 12× on h100:8,
//     three times over capacity, 0.555 → 0.499 (interactive 0.561 → 0.597,
//     critical 0.914 → 0.886).
//   - Pure LIFO (newest first always): 8× 0.945, 12× 0.831 — EDF is the
//     better order while a class keeps up.
//   - A threshold per class at its first-token base (1/2/5/30 s): 10×
//     0.893, 12× 0.831, critical 0.916 / 0.901 — no better than one second.
//   - Critical kept in EDF, LIFO below it: 12× 0.813, critical 0.862.
//     LIFO only in critical and interactive: the inversion moves down a
//     class (10× 0.773: standard 0.256, batch 0.986); LIFO in all but batch:
//     10× 0.859, 12× 0.783 — every class in EDF order had the same domino.
//   - Reserving, for the oldest critical request blocked for KV, the
//     would-preempt worker with the most free KV (lower classes excluded
//     from it until that request leaves the queue; simulator only, with
//     adaptive LIFO): critical 10× 0.915 → 0.940, 12× 0.924 → 0.931, but
//     overall 8× 0.953 → 0.926, 10× 0.896 → 0.862.
//   - maxBlocked 64 instead of 16: 12× 0.696 (interactive 0.839, standard
//     0.336); with adaptive LIFO 12× 0.856 but critical 0.898: more blocked
//     offers per pass place more work of every class, and critical's large
//     prompts then wait for KV longer.
//   - Eight more offers of the same class when a critical or interactive
//     head blocks (look-ahead that does not count against maxBlocked): 12×
//     0.700 (standard 0.171); with adaptive LIFO no better than without.
//   - Earlier sessions: gating lower classes behind a blocked higher one
//     (interactive 0.88 → 0.26 at 8×) — the requests that block longest are
//     huge prompts no worker can take yet, and they held every lower class
//     back with them; a blocked budget per class (8× 0.92 → 0.52) — more
//     lower-class offers per pass place more lower-class work, which then
//     sits ahead of interactive requests on the GPUs.
func (q *Queue[T]) Pass(now time.Time, maxBlocked int, expired []Item[T], place func(Item[T]) Outcome) []Item[T] {
	expired = q.Expire(now, expired)
	q.blocked = q.blocked[:0]
	t := now.UnixNano()
	for len(q.blocked) < maxBlocked {
		c := q.pick()
		if c < 0 {
			break
		}
		e := q.head(c, t)
		q.remove(e)
		if place(e.item) == Blocked {
			q.blocked = append(q.blocked, e)
		}
	}
	// Blocked requests go back as they were, keeping their arrival order
	// for ties and for newest-first.
	for _, e := range q.blocked {
		if _, dup := q.byID[e.item.ID]; !dup { // re-pushed by place: that one stands
			q.insert(e)
		}
	}
	clear(q.blocked)
	return expired
}
