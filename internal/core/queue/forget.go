package queue

import (
	"slices"
	"strings"
	"time"
)

// Bounded state. A queue meets every tenant that sends work, and every
// peer router that reports: without forgetting, a router serving many
// tenants over its life holds a counter for each of them for ever, its
// fairness report names them all (past NATS's 1 MiB payload its publish
// fails), and its peers keep what they last saw of each. So the queue
// forgets:
//
//   - a tenant (in one class) once it holds nothing here, no live peer
//     reports it queued, it has had no service anywhere for
//     ForgetIdleAfter, its service here went out in a report (so peers
//     have its last increase), and its counter is no higher than the
//     floor a return would lift it to (liftTenant): a counter at or
//     below that floor is below meaning, since the tenant coming back is
//     lifted to the floor whether it is remembered or not. A tenant gone
//     idle ahead of the others stays until their counters pass it, so
//     forgetting never forgives service;
//   - a peer not heard from for PeerForget (its totals with it: a peer
//     that comes back after that is counted as a new one);
//   - at a peer, what it last saw of a tenant a complete report no longer
//     names (fair.go, forgetUnreported).
//
// Go maps do not give memory back as entries are deleted, so a map that
// has shrunk to a quarter of its high-water mark is copied into one of
// its new size.
//
// The sweep runs at most every forgetSweep, from Pass and ApplyPeer, in
// time linear in the tenants held.

// ForgetIdleAfter is how long a tenant must have held nothing, here or at
// a live peer, with no service anywhere, before the queue may forget it:
// hundreds of report periods, so its last totals have reached the peers.
const ForgetIdleAfter = time.Minute

// PeerForget is how long a peer may go unheard before the queue forgets
// it altogether.
const PeerForget = time.Minute

// forgetSweep is how often the queue looks for what to forget.
const forgetSweep = time.Second

// MaxReportBytes bounds a fairness report's encoded size (about: each
// tenant entry is priced at reportEntryBytes), well under NATS's default
// 1 MiB payload.
const MaxReportBytes = 256 << 10

// reportEntryBytes is a generous price of one TenantShare in msgpack: the
// name plus its five keys and values at their widest.
func reportEntryBytes(tenant string) int { return len(tenant) + 72 }

// forget runs the sweep at now (unix ns) when one is due.
func (q *Queue[T]) forget(now int64) {
	if q.lastForget != 0 && now-q.lastForget < int64(forgetSweep) {
		return
	}
	q.lastForget = now
	q.expirePeers(now)
	for i := range q.bands {
		b := &q.bands[i]
		floor := tenantFloor(b)
		for name, tq := range b.tenants {
			if len(tq.edf) > 0 || tq.reported > 0 {
				tq.busyAt = now
				continue
			}
			if q.forgettable(tq, floor, now) {
				delete(b.tenants, name)
			}
		}
		if n := len(b.tenants); b.tenantsPeak > 64 && n < b.tenantsPeak/4 {
			b.tenants, b.tenantsPeak = resized(b.tenants), n
		}
	}
	if n := len(q.byID); q.byIDPeak > 64 && n < q.byIDPeak/4 {
		q.byID, q.byIDPeak = resized(q.byID), n
	}
}

// forgettable reports whether idle tenant tq may be forgotten at now, its
// band's return floor being floor.
func (q *Queue[T]) forgettable(tq *tenantQ[T], floor, now int64) bool {
	if tq.vt > floor || now-max(tq.busyAt, tq.advanced) < int64(ForgetIdleAfter) {
		return false
	}
	// Its service here must have gone out in a report, or a peer would
	// never count what was placed since the one before (only once the
	// queue reports at all: a lone router has no peers to tell). A lift
	// need not: the counter is at the floor, where a return anywhere
	// lifts it anyway.
	return !q.reporting || tq.placed == 0 || (tq.sentIn > 0 && tq.sentPlaced == tq.placed)
}

// tenantFloor is the counter a tenant of band b returning from idle is
// lifted to (liftTenant): the least of the tenants backlogged here or at
// a live peer, else the band's highest.
func tenantFloor[T any](b *band[T]) int64 {
	floor, any := int64(0), false
	for _, tq := range b.active {
		if !any || tq.vt < floor {
			floor, any = tq.vt, true
		}
	}
	for _, tq := range b.reportedT {
		if !any || tq.vt < floor {
			floor, any = tq.vt, true
		}
	}
	if !any {
		return b.hiVT
	}
	return floor
}

// resized copies m into a map of its own size (deleting entries never
// shrinks a Go map).
func resized[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// mostNeeded cuts a report's tenant shares to MaxReportBytes: the tenants
// with work queued first (peers hold back for them), then those whose
// totals changed since they were last sent, each group longest unsent
// first, so that successive reports rotate through every tenant.
func (q *Queue[T]) mostNeeded(shares []reportShare[T]) []reportShare[T] {
	for i := range shares {
		tq, rank := shares[i].tq, uint64(2)
		switch {
		case len(tq.edf) > 0:
			rank = 0
		case tq.sentPlaced != tq.placed || tq.sentLift != tq.lift || tq.sentIn == 0:
			rank = 1
		}
		shares[i].key = rank<<62 | min(tq.sentIn, 1<<62-1)
	}
	slices.SortFunc(shares, func(a, b reportShare[T]) int {
		if a.key != b.key {
			if a.key < b.key {
				return -1
			}
			return 1
		}
		if c := strings.Compare(a.tq.name, b.tq.name); c != 0 {
			return c
		}
		return a.class - b.class
	})
	size, n := 0, 0
	for n < len(shares) {
		size += reportEntryBytes(shares[n].tq.name)
		if size > MaxReportBytes {
			break
		}
		n++
	}
	return shares[:n]
}

// reportShare is one tenant of one class (an index into Report.Classes)
// on its way into a report.
type reportShare[T any] struct {
	class int
	tq    *tenantQ[T]
	// key orders it in a cut report (mostNeeded): its rank, then the
	// report that last named it.
	key uint64
}

// TenantCount is how many tenant counters the queue holds, over its
// classes: one of the figures forgetting bounds.
func (q *Queue[T]) TenantCount() int {
	n := 0
	for i := range q.bands {
		n += len(q.bands[i].tenants)
	}
	return n
}

// PeerCount is how many peer routers the queue remembers.
func (q *Queue[T]) PeerCount() int { return len(q.peers) }

// PeerTenantCount is the tenant totals kept of all peers.
func (q *Queue[T]) PeerTenantCount() int {
	n := 0
	for _, p := range q.peers {
		n += p.seen()
	}
	return n
}
