// Package queue owns the router's wait queue: weighted priority classes,
// token-fair tenants inside each class, earliest-deadline-first order
// inside each tenant, a starvation guarantee across classes and tenants,
// explicit expiry of requests whose deadline can no longer be met, and
// the counters that make class weights and tenant shares hold across a
// fleet of routers (fair.go) — bounded, idle tenants and dead peers
// forgotten (forget.go).
//
// Between classes the queue runs weighted fair queueing over the classes
// that have work: each class keeps a virtual time, the requests it was
// offered divided by its weight (a blocked offer uses its turn; with
// Discipline.ServiceShares, as active-active routers run, only requests
// placed count, and a blocked class is owed its turn), and the class
// whose next request would finish first in virtual time goes next (ties
// to the higher class). With
// weights 8/4/2/1 and every class backlogged, every window of 15 pops
// serves 8/4/2/1 requests, so the lowest class always gets its share and
// is never starved, while an idle class's share goes to the others. A
// class that returns from idle is lifted to the least virtual time of the
// backlogged classes, so it cannot cash in credit it banked while idle.
//
// Inside a class, tenants share by tokens, VTC-style (Sheng et al.,
// "Fairness in Serving Large Language Models", OSDI'24): each tenant has a
// virtual counter of the tokens it was served (the Item's Cost: prompt
// plus weighted output tokens, as the caller counts them), the backlogged
// tenant with the least counter goes next, and a tenant that returns from
// idle is lifted to the least counter of the backlogged tenants. A tenant
// with large requests therefore gets fewer requests, not more tokens.
// Every backlogged tenant's counter rises only when it is served, so the
// one left behind becomes the least and is served: no tenant starves.
//
// Inside a tenant the earliest deadline goes first (no deadline sorts
// last), ties in arrival order — until it falls behind: when the request
// EDF would serve next has already waited longer than LIFOAfter, the
// tenant's newest request goes first (adaptive LIFO, as in Facebook's
// "Fail at Scale" queues) until it catches up. Under sustained overload
// EDF serves exactly the requests that have waited longest, whose
// first-token targets are already lost, and every newer request then ages
// past its own behind them; newest-first serves requests that can still
// start in time and leaves the stale ones to expire. When the backlog
// clears, EDF's head is fresh again and EDF resumes. Deadlines are not
// traded for fairness across tenants: a tenant over its share waits,
// and one of its requests whose deadline passes meanwhile expires with an
// explicit answer (below) rather than jumping the fair order.
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
	// Tenant is whose request it is: tenants share their class by tokens.
	Tenant string
	// Cost is what serving it counts against its tenant's share, in
	// weighted tokens (routing charges prompt + OutputTokenWeight × output);
	// below 1 it counts as 1.
	Cost int64
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
	tenant    *tenantQ[T]
	seq       uint64
	dl        int64 // order key in its tenant: the deadline in unix ns, MaxInt64 for none or in arrival order
	lastStart int64 // dl - MinService
	enq       int64 // Enqueued in unix ns, 0 when unknown
	ci, ei    int   // positions in the tenant's EDF heap and the expiry heap
	li        int   // position in the tenant's newest-first heap
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

// newestHeap orders a tenant's requests newest first: latest Enqueued,
// then latest pushed.
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

// tenantQ is one tenant's requests in one band, and its VTC counter.
type tenantQ[T any] struct {
	name   string
	edf    classHeap[T]
	newest newestHeap[T]
	// vt is the tenant's virtual counter: weighted tokens served to it,
	// fleet-wide (this router's and its peers'), lifted on return from idle.
	vt int64
	// ai is its position in the band's heap of backlogged tenants, -1 when
	// it has nothing queued here; since orders ties (first backlogged first).
	ai    int
	since uint64
	// placed is the weighted tokens this router placed for it (cumulative;
	// what its reports tell the peers, who add its increase to vt).
	placed int64
	// lift is what the lifts on its returns from idle added to vt: vt is
	// the fleet's service to it plus lift. Reported and merged by the
	// larger (fair.go), so a lift counts everywhere once, wherever made.
	lift int64
	// reported counts the live peers whose latest report has it queued;
	// advanced is when vt last rose or it became backlogged (unix ns);
	// gain is what the latest peer report that raised vt added.
	reported int
	advanced int64
	gain     int64
	// offered is the cost of its requests a pass offered and found
	// blocked, for that pass only: offers rotate on as if they were
	// served, the counters do not.
	offered int64
	// blockedSince is when a pass first found its head blocked since it
	// was last placed here or became backlogged (unix ns; 0: not blocked),
	// the clock of its reservation's bound (reserve.go).
	blockedSince int64
	// busyAt is when a sweep last found it holding work, here or at a
	// peer (unix ns); sentPlaced and sentLift are its totals as the
	// latest report that named it (sentIn, Queue.reports) carried them
	// (forget.go).
	busyAt               int64
	sentPlaced, sentLift int64
	sentIn               uint64
}

type tenantHeap[T any] []*tenantQ[T]

func (h tenantHeap[T]) Len() int { return len(h) }
func (h tenantHeap[T]) Less(i, j int) bool {
	if a, b := h[i].vt+h[i].offered, h[j].vt+h[j].offered; a != b {
		return a < b
	}
	return h[i].since < h[j].since
}
func (h tenantHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].ai = i; h[j].ai = j }
func (h *tenantHeap[T]) Push(x any)   { t := x.(*tenantQ[T]); t.ai = len(*h); *h = append(*h, t) }
func (h *tenantHeap[T]) Pop() any {
	o := *h
	t := o[len(o)-1]
	o[len(o)-1] = nil
	*h = o[:len(o)-1]
	t.ai = -1
	return t
}

// vtScale is one request's virtual time at weight 1: the least common
// multiple of 1…16, so a request at any weight up to 16 (and every
// divisor of it) advances its class by an exact integer.
const vtScale = 720720

// band is one class's queue (every class's, in a OneBand queue).
type band[T any] struct {
	// vt is the class's virtual time: requests served to it, fleet-wide,
	// times step (vtScale / weight); lifted on return from idle.
	vt, step int64
	n        int // queued here
	tenants  map[string]*tenantQ[T]
	active   tenantHeap[T]
	// hiVT is the highest tenant counter: where a tenant starts when no
	// tenant of the class is backlogged anywhere. maxCost is the largest
	// request cost pushed into the band: VTC's bound on how far apart two
	// backlogged tenants' counters can be (fair.go, keepWithinBound).
	hiVT, maxCost int64
	// placed is the requests this router placed from the class
	// (cumulative, for the reports).
	placed int64
	// reported and advanced are as for a tenant; reportedT are the
	// tenants some live peer reports queued. tenantsPeak is tenants's
	// high-water mark since it was last resized (forget.go).
	tenantsPeak int
	reported    int
	advanced    int64
	gain        int64
	reportedT   map[string]*tenantQ[T]
	// turns is this router's offers of the class that a pass found
	// blocked, in virtual time (unless Discipline.ServiceShares): an offer
	// uses the class's turn whatever became of it, so the weights are of
	// offers, as the queue always ran. Local, never reported: the fleet's
	// counters are of service. Lifted with vt when the class returns from
	// idle. offered is the same for one pass only (ServiceShares), so a
	// pass's offers still rotate.
	turns, offered int64
}

// Queue is the router's wait queue.
type Queue[T any] struct {
	names  []string
	bands  []band[T]
	expiry expiryHeap[T]
	byID   map[string]*entry[T]
	seq    uint64
	// lifoAfter is the EDF head's wait past which a tenant serves newest
	// first; <= 0 keeps EDF always.
	lifoAfter int64
	disc      Discipline
	// fair: tenants share a band by tokens (every EDF discipline); fleet:
	// the counters are shared with peer routers (the Switchyard one).
	fair, fleet bool
	byRank      []int       // queued per priority class, whatever the band
	blocked     []*entry[T] // Pass scratch
	peers       map[string]*peerState
	hold        holdBars
	heldBack    int64
	// reserved is, per band, the blocked head the pass under way reserves
	// for (reserve.go); passNow is the pass's time (unix ns).
	reserved []reservation[T]
	passNow  int64
	// lastForget is the latest sweep for what to forget (forget.go);
	// reporting says Report was ever called, reports counts the calls;
	// byIDPeak is byID's high-water mark since it was last resized.
	lastForget int64
	reporting  bool
	reports    uint64
	byIDPeak   int
}

// Discipline is how a queue orders and expires what it holds. The zero
// value is Switchyard's: weighted classes (DefaultWeights), token-fair
// tenants, earliest deadline first inside a tenant with the adaptive LIFO
// switch, expiry of requests that can no longer meet their deadline, and
// counters shared with peer routers (fair.go). The other settings let a
// baseline's router keep the queue its own documentation describes
// (internal/core/baselines), through the same code; each of them turns
// the fleet-wide sharing off.
type Discipline struct {
	// Weights are the per-class shares (DefaultWeights when nil).
	Weights map[string]int
	// Strict serves the highest non-empty class always (priority bands)
	// instead of weighted fair queueing.
	Strict bool
	// OneBand puts every class in one band: a gateway that forwards in
	// arrival order whatever the class.
	OneBand bool
	// ArrivalOrder serves each band first come, first served whatever the
	// tenant, instead of token-fair tenants and earliest deadline first
	// (and never switches to newest first).
	ArrivalOrder bool
	// NoExpiry keeps a request whose deadline can no longer be met instead
	// of handing it back as expired.
	NoExpiry bool
	// LIFOAfter overrides DefaultLIFOAfter; negative keeps EDF always.
	LIFOAfter time.Duration
	// ServiceShares makes the class weights shares of requests placed
	// rather than of offers: a class whose offers are blocked (the
	// placer's class reserves keep lower classes off nearly full workers)
	// is owed the turns it could not use and gets them when it fits.
	// Active-active routers set it, so the weights hold in service across
	// the fleet. Off (the default, and the simulator's), a blocked offer
	// uses its class's turn: under overload the classes that can be placed
	// take the turns of those that cannot — in the simulator (Mooncake,
	// 12x) interactive attainment with adaptive LIFO 0.39 against 0.21
	// with ServiceShares, interactive being half the demand at a 4/15
	// weight.
	ServiceShares bool
}

// NewWith returns an empty queue kept by discipline d.
func NewWith[T any](d Discipline) *Queue[T] {
	weights := d.Weights
	if weights == nil {
		weights = DefaultWeights
	}
	n := len(schemas.Priorities)
	q := &Queue[T]{
		names: schemas.Priorities, bands: make([]band[T], n), byID: make(map[string]*entry[T]),
		lifoAfter: int64(DefaultLIFOAfter), disc: d, byRank: make([]int, n),
		fair: !d.ArrivalOrder, fleet: !d.ArrivalOrder && !d.OneBand && !d.Strict, peers: map[string]*peerState{},
		reserved: make([]reservation[T], n),
	}
	for i, p := range schemas.Priorities {
		w := int64(min(max(weights[p], 1), vtScale))
		q.bands[i] = band[T]{step: vtScale / w, tenants: map[string]*tenantQ[T]{}, reportedT: map[string]*tenantQ[T]{}}
	}
	switch {
	case d.ArrivalOrder || d.LIFOAfter < 0:
		q.lifoAfter = 0
	case d.LIFOAfter > 0:
		q.lifoAfter = int64(d.LIFOAfter)
	}
	return q
}

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
	b := &q.bands[c]
	tq := q.tenant(b, it.Tenant)
	// Returning from idle (nothing queued here, none reported by a peer):
	// lifted, so idle time banks no credit.
	if b.n == 0 && b.reported == 0 {
		q.liftBand(c)
	}
	if tq.ai < 0 && tq.reported == 0 {
		liftTenant(b, tq)
	}
	b.maxCost = max(b.maxCost, it.Cost, 1)
	q.seq++
	e := &entry[T]{item: it, class: c, rank: rank, tenant: tq, seq: q.seq, dl: math.MaxInt64, lastStart: math.MaxInt64}
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

// tenant is band b's queue of tenant name (one queue for all in an
// arrival-order band), made on first sight.
func (q *Queue[T]) tenant(b *band[T], name string) *tenantQ[T] {
	if !q.fair {
		name = ""
	}
	tq := b.tenants[name]
	if tq == nil {
		tq = &tenantQ[T]{name: name, ai: -1}
		b.tenants[name] = tq
		b.tenantsPeak = max(b.tenantsPeak, len(b.tenants))
	}
	return tq
}

func (q *Queue[T]) insert(e *entry[T]) {
	tq, b := e.tenant, &q.bands[e.class]
	heap.Push(&tq.edf, e)
	heap.Push(&tq.newest, e)
	heap.Push(&q.expiry, e)
	q.byID[e.item.ID] = e
	q.byIDPeak = max(q.byIDPeak, len(q.byID))
	q.byRank[e.rank]++
	b.n++
	if tq.ai < 0 {
		q.seq++
		tq.since = q.seq
		tq.blockedSince = 0
		heap.Push(&b.active, tq)
	}
}

func (q *Queue[T]) remove(e *entry[T]) {
	tq, b := e.tenant, &q.bands[e.class]
	heap.Remove(&tq.edf, e.ci)
	heap.Remove(&tq.newest, e.li)
	heap.Remove(&q.expiry, e.ei)
	delete(q.byID, e.item.ID)
	q.byRank[e.rank]--
	b.n--
	if len(tq.edf) == 0 {
		heap.Remove(&b.active, tq.ai)
	}
}

// head is tenant tq's next request at now (unix ns): the earliest
// deadline, or the newest request once the earliest deadline's has waited
// longer than lifoAfter. A head of unknown enqueue time never switches.
func (q *Queue[T]) head(tq *tenantQ[T], now int64) *entry[T] {
	e := tq.edf[0]
	if q.lifoAfter > 0 && e.enq != 0 && now-e.enq > q.lifoAfter {
		return tq.newest[0]
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

// pick chooses the band to serve, or -1 when none may be: the highest
// non-empty one under Strict; otherwise, among the bands with work whose
// least tenant is within the fleet's bars (fair.go), the one whose next
// request finishes first in virtual time, ties to the higher class.
func (q *Queue[T]) pick() int {
	if q.disc.Strict {
		for i := range q.bands {
			if q.bands[i].n > 0 {
				return i
			}
		}
		return -1
	}
	best, held := -1, int64(-1)
	var bestF int64
	for i := range q.bands {
		b := &q.bands[i]
		if b.n == 0 {
			continue
		}
		q.keepWithinBound(b)
		if q.hold.on && (b.vt > q.hold.band+classSlack || b.active[0].vt > q.hold.tenant[i]+TenantSlack) &&
			q.hold.now-q.head(b.active[0], q.hold.now).enq < int64(MaxHold) {
			continue
		}
		if !q.backfills(i, q.passNow) {
			// Its next offer would jump a blocked head's reservation. Its
			// key leaves out this pass's rotation: the blocked offer did
			// not use the class's turn (reserve.go).
			if k := b.vt + b.turns + b.step; held < 0 || k < held {
				held = k
			}
			continue
		}
		if f := b.vt + b.turns + b.offered + b.step; best < 0 || f < bestF {
			best, bestF = i, f
		}
	}
	if held >= 0 && (best < 0 || held <= bestF) {
		return -1 // the reserved head's class is next: the room is kept for it
	}
	return best
}

// charge counts e as served at now: its class's virtual time and its
// tenant's counter advance, and this router's totals with them.
func (q *Queue[T]) charge(e *entry[T], now int64) {
	b, tq := &q.bands[e.class], e.tenant
	cost := max(e.item.Cost, 1)
	b.vt += b.step
	b.placed++
	b.advanced = now
	tq.vt += cost
	tq.placed += cost
	tq.advanced = now
	b.hiVT = max(b.hiVT, tq.vt)
	q.placedHere(e)
	if tq.ai >= 0 {
		heap.Fix(&b.active, tq.ai)
	}
}

// liftBand lifts band c's virtual time to the least of the bands
// backlogged anywhere in the fleet, or to the highest of all when none is.
func (q *Queue[T]) liftBand(c int) {
	q.bands[c].vt = max(q.bands[c].vt, q.bandFloor(c, func(b *band[T]) int64 { return b.vt }))
	// Its turns are lifted the same way, over the order key (service plus
	// blocked offers), so it returns level with the others' turns, not
	// ahead of every blocked offer they were made while it was away.
	b := &q.bands[c]
	b.turns = max(b.turns, q.bandFloor(c, func(b *band[T]) int64 { return b.vt + b.turns })-b.vt)
}

// bandFloor is the least key of the bands other than c backlogged
// anywhere in the fleet, or the highest key of all when none is.
func (q *Queue[T]) bandFloor(c int, key func(*band[T]) int64) int64 {
	floor, any := int64(0), false
	for i := range q.bands {
		b := &q.bands[i]
		if i == c || (b.n == 0 && b.reported == 0) {
			continue
		}
		if k := key(b); !any || k < floor {
			floor, any = k, true
		}
	}
	if !any {
		for i := range q.bands {
			floor = max(floor, key(&q.bands[i]))
		}
	}
	return floor
}

// liftTenant lifts tq's counter to the least of band b's tenants
// backlogged anywhere in the fleet, or to the highest of all when none is
// (VTC's counter lift).
func liftTenant[T any](b *band[T], tq *tenantQ[T]) {
	floor, any := int64(0), false
	if len(b.active) > 0 {
		floor, any = b.active[0].vt, true
	}
	for _, o := range b.reportedT {
		if o != tq && (!any || o.vt < floor) {
			floor, any = o.vt, true
		}
	}
	if !any {
		floor = b.hiVT
	}
	if floor > tq.vt {
		tq.lift += floor - tq.vt
		tq.vt = floor
	}
	b.hiVT = max(b.hiVT, tq.vt)
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
// maxBlocked of them are blocked, the queue runs dry, or what is left is
// held back for a peer router's share (fair.go), and puts the blocked
// ones back. A placed request counts as served. The live router and the
// simulator both place through Pass, so they walk the queue identically.
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
	t := now.UnixNano()
	q.forget(t)
	q.holdBars(t)
	q.passNow = t
	q.blocked = q.blocked[:0]
	for len(q.blocked) < maxBlocked {
		c := q.pick()
		if c < 0 {
			if q.hold.on && q.Len() > len(q.blocked) {
				q.heldBack++ // work left for a peer that holds a share further behind
			}
			break
		}
		e := q.head(q.bands[c].active[0], t)
		q.remove(e)
		switch place(e.item) {
		case Blocked:
			// The turn is used: the next offer goes to whoever is next
			// as if this one had been served (what keeps a class or tenant
			// whose requests cannot be placed now from taking every offer
			// of the pass), but nothing is counted as served.
			q.blocked = append(q.blocked, e)
			b, tq := &q.bands[c], e.tenant
			if q.disc.ServiceShares {
				b.offered += b.step
			} else {
				b.turns += b.step
			}
			tq.offered += max(e.item.Cost, 1)
			q.reserve(e, t)
			if tq.ai >= 0 {
				heap.Fix(&b.active, tq.ai)
			}
		case Placed:
			q.charge(e, t)
		}
	}
	// The rotation and the reservations last one pass.
	q.unreserve()
	for _, e := range q.blocked {
		e.tenant.offered = 0
		q.bands[e.class].offered = 0
	}
	for _, e := range q.blocked {
		b := &q.bands[e.class]
		for _, tq := range b.active {
			tq.offered = 0
		}
		if len(b.active) > 1 {
			heap.Init(&b.active)
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
