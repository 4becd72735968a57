package queue

// The reservation of a blocked tenant's head (Discipline.ServiceShares).
//
// VTC picks the backlogged tenant with the least counter, but a pass offers
// requests to a placer that answers only "placed" or "blocked". When the
// chosen tenant's request does not fit the room a worker has left (a large
// prompt where a small one fits), the pass used to rotate on and place the
// next tenant's smaller request in that room — and offer the blocked tenant
// again, and rotate again, each blocked offer letting the others run one
// more request ahead. The large tenant's credit was then spent only as
// capacity allowed: in the three-router test its share of the tokens ran
// 0.446-0.518 where its weight asks 0.500.
//
// So a blocked head reserves its place, the way a batch scheduler reserves
// for the head of its queue and backfills only what cannot delay it (EASY
// backfilling). For the rest of the pass, another tenant of the same class
// may be placed only if its request would finish, in the tenants' virtual
// time, no later than the reserved request would: counter + cost of its
// head ≤ the blocked tenant's counter + the blocked head's cost. A backfill
// inside that bound cannot take the blocked tenant's share: when the
// blocked request is placed, its tenant is level again. A tenant that
// would finish later waits. And while the class is the one weighted fair
// queueing would serve next (its blocked offer did not use its turn), the
// pass stops there: no other class takes the room either. A first version
// let the other classes go on — and premium, whose requests fit where the
// regular class's did not, took the room: with the tenants level, the
// regular class lost its share (premium 0.92 of the requests where 4:1
// asks 0.80, in the three-router test). The queue does not know which
// worker's room the head waits for, so it keeps all of it: the price of
// the reservation is capacity left unplaced while room frees for the head,
// at most ReserveFor at a time.
//
// Bounds. Inside a class on one router, while every tenant is backlogged,
// no tenant's counter runs ahead of a blocked tenant's by more than the
// blocked head's cost — one request, the bound VTC itself keeps without
// capacity in the way — so token shares converge to the weights as the
// window grows. Starvation-free: a reservation lasts while its tenant has
// been blocked for at most ReserveFor since it was last placed here; past
// that (its head cannot be placed: its model's pool is full, its worker's
// breaker open) the others go on as before, so work waits behind a
// reservation at most ReserveFor per request the reserved tenant is
// placed, and a class whose head is reserved stops this router's passes
// for at most as long. A class with one tenant backlogged reserves nothing
// (its own next request may always go). Without ServiceShares (one router,
// the simulator) a blocked offer still uses its tenant's turn, as it
// always did.

// ReserveFor bounds how long a blocked tenant's head holds the other
// tenants of its class back (above): StallAfter, the same bar after which
// a peer's queued work that does not advance stops holding anything back.
const ReserveFor = StallAfter

// reservation is one band's reserved head for the pass under way.
type reservation[T any] struct {
	tenant *tenantQ[T]
	// finish is the tenant's counter plus the blocked head's cost: where
	// its counter will be once the head is placed.
	finish int64
}

// reserve records, when e was blocked at now (unix ns), the reservation of
// its band for the rest of the pass, unless the band has one already or
// its tenant has been blocked longer than ReserveFor.
func (q *Queue[T]) reserve(e *entry[T], now int64) {
	tq := e.tenant
	if tq.blockedSince == 0 {
		tq.blockedSince = now
	}
	if !q.fair || !q.disc.ServiceShares {
		return
	}
	r := &q.reserved[e.class]
	if r.tenant != nil || now-tq.blockedSince > int64(ReserveFor) {
		return
	}
	r.tenant, r.finish = tq, tq.vt+max(e.item.Cost, 1)
}

// backfills reports whether band c's next offer at now may go past the
// band's reservation: it is the reserved tenant's own, or it would finish
// in virtual time no later than the reserved head.
func (q *Queue[T]) backfills(c int, now int64) bool {
	r := &q.reserved[c]
	tq := q.bands[c].active[0]
	if r.tenant == nil || tq == r.tenant || r.tenant.ai < 0 {
		return true
	}
	return tq.vt+max(q.head(tq, now).item.Cost, 1) <= r.finish
}

// unreserve ends the pass's reservations.
func (q *Queue[T]) unreserve() {
	clear(q.reserved)
}

// placedHere notes that e was placed: a reservation its tenant held is
// spent, and the tenant's blocked time counts afresh.
func (q *Queue[T]) placedHere(e *entry[T]) {
	e.tenant.blockedSince = 0
	if r := &q.reserved[e.class]; r.tenant == e.tenant {
		r.tenant = nil
	}
}
