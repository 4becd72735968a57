package queue

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func costed(id, prio, tenant string, cost int64) Item[int] {
	return Item[int]{ID: id, Priority: prio, Tenant: tenant, Cost: cost, Enqueued: t0}
}

// TestTenantsShareByTokens: two tenants of one class with equal weight and
// requests of 1,000 and 250 tokens get equal tokens (the small one four
// times the requests), within one large request, at every point.
func TestTenantsShareByTokens(t *testing.T) {
	q := New[int](nil)
	for i := range 400 {
		_ = q.Push(costed(fmt.Sprintf("big-%d", i), schemas.PriorityStandard, "big", 1000))
		_ = q.Push(costed(fmt.Sprintf("small-%d", i), schemas.PriorityStandard, "small", 250))
	}
	tok := map[string]int64{}
	n := map[string]int{}
	for range 250 {
		it, ok, _ := q.PopReady(t0, nil)
		if !ok {
			t.Fatal("queue ran dry")
		}
		tok[it.Tenant] += it.Cost
		n[it.Tenant]++
		if d := tok["big"] - tok["small"]; d > 1000 || d < -1000 {
			t.Fatalf("token gap %d after %v requests: more than one request's cost", d, n)
		}
	}
	if n["small"] != 4*n["big"] {
		t.Errorf("requests %v, want small = 4 × big", n)
	}
}

// TestTenantBackFromIdleIsLifted: a tenant that was idle while another
// was served does not get the whole class until it has caught up (VTC's
// lift): from its return the two alternate by tokens.
func TestTenantBackFromIdleIsLifted(t *testing.T) {
	q := New[int](nil)
	for i := range 100 {
		_ = q.Push(costed(fmt.Sprintf("a-%d", i), schemas.PriorityStandard, "a", 100))
	}
	for range 50 {
		q.PopReady(t0, nil)
	}
	for i := range 50 {
		_ = q.Push(costed(fmt.Sprintf("b-%d", i), schemas.PriorityStandard, "b", 100))
	}
	n := map[string]int{}
	for range 20 {
		it, _, _ := q.PopReady(t0, nil)
		n[it.Tenant]++
	}
	if n["a"] != 10 || n["b"] != 10 {
		t.Fatalf("after b's return: %v, want 10 each (b banked no credit while idle)", n)
	}
}

// TestNoTenantStarves: a tenant with requests a hundred times larger than
// the others' is still served, once per its cost's worth of theirs.
func TestNoTenantStarves(t *testing.T) {
	q := New[int](nil)
	for i := range 300 {
		for k := range 3 {
			_ = q.Push(costed(fmt.Sprintf("t%d-%d", k, i), schemas.PriorityBatch, fmt.Sprint("t", k), 10))
		}
	}
	for i := range 3 {
		_ = q.Push(costed(fmt.Sprintf("huge-%d", i), schemas.PriorityBatch, "huge", 1000))
	}
	gaps, last := 0, 0
	for i := range 600 {
		it, _, _ := q.PopReady(t0, nil)
		if it.Tenant == "huge" {
			gaps = max(gaps, i-last)
			last = i
		}
	}
	if last == 0 || gaps > 3*100+1 {
		t.Fatalf("the large tenant's longest wait was %d pops (last at %d); want at most its cost's worth of the others'", gaps, last)
	}
}

// fleetSim runs three routers' queues against one fleet whose capacity
// frees one slot per step, offered to the routers in turn (a router that
// holds back passes it to the next). Ingress is skewed in the Dynamo
// #15187 shape: r0 holds all three flows (premium, and the regular class's
// big and small tenants), r1 only regular-small, r2 only regular-big, so r0
// takes most of the ingress. Every queue is kept backlogged. With share
// false the routers never report to each other: per-router schedulers.
type fleetSim struct {
	queues []*Queue[int]
	holds  [][]flow
	n      int
}

type flow struct {
	prio, tenant string
	cost         int64
}

var (
	premium  = flow{schemas.PriorityInteractive, "prem", 300}
	regBig   = flow{schemas.PriorityStandard, "big", 2000}
	regSmall = flow{schemas.PriorityStandard, "small", 400}
)

type fleetShares struct {
	premium, bigTokens float64 // premium's share of requests; big's share of the regular class's tokens
	idle               int     // slots no router took
	byRouter           []int
}

func runFleet(t *testing.T, share bool, steps, reportEvery int) fleetShares {
	t.Helper()
	weights := map[string]int{schemas.PriorityInteractive: 4, schemas.PriorityStandard: 1}
	s := &fleetSim{holds: [][]flow{{premium, regBig, regSmall}, {regSmall}, {regBig}}}
	for range s.holds {
		s.queues = append(s.queues, NewWith[int](Discipline{Weights: weights, ServiceShares: true})) // as active-active routers run
	}
	now := t0
	queued := make([]map[string]int, len(s.queues))
	refill := func(r int) {
		if queued[r] == nil {
			queued[r] = map[string]int{}
		}
		for _, f := range s.holds[r] {
			for ; queued[r][f.tenant] < 8; queued[r][f.tenant]++ {
				s.n++
				it := costed(fmt.Sprint(s.n), f.prio, f.tenant, f.cost)
				it.Enqueued = now
				_ = s.queues[r].Push(it)
			}
		}
	}
	var out fleetShares
	out.byRouter = make([]int, len(s.queues))
	req := map[string]int{}
	tok := map[string]int64{}
	for step := range steps {
		now = now.Add(10 * time.Millisecond)
		if share && step%reportEvery == 0 {
			for i, q := range s.queues {
				for j, p := range s.queues {
					if i != j {
						p.ApplyPeer(fmt.Sprint("r", i), q.Report(), now)
					}
				}
			}
		}
		taken := false
		for k := range s.queues {
			r := (step + k) % len(s.queues)
			refill(r)
			free := true
			s.queues[r].Pass(now, 1, nil, func(it Item[int]) Outcome {
				if !free {
					return Blocked
				}
				free = false
				queued[r][it.Tenant]--
				if step >= steps/10 { // after a warm-up
					req[it.Priority]++
					if it.Priority == schemas.PriorityStandard {
						tok[it.Tenant] += it.Cost
					}
				}
				return Placed
			})
			if !free {
				taken = true
				out.byRouter[r]++
				break
			}
		}
		if !taken {
			out.idle++
		}
	}
	out.premium = float64(req[schemas.PriorityInteractive]) / float64(req[schemas.PriorityInteractive]+req[schemas.PriorityStandard])
	out.bigTokens = float64(tok["big"]) / float64(tok["big"]+tok["small"])
	return out
}

// TestFleetSharesUnderSkewedIngress: without shared counters each router
// schedules fairly among what it holds, and the fleet's shares drift
// toward ingress (premium far below its 4:1 weight, the regular class's
// tokens toward the tenant with the larger requests, whose router pulls
// it); with reports every 20 steps (200 ms of 10 ms steps) the fleet
// serves 4:1 and equal tokens, and leaves no capacity idle.
func TestFleetSharesUnderSkewedIngress(t *testing.T) {
	off := runFleet(t, false, 20000, 20)
	on := runFleet(t, true, 20000, 20)
	t.Logf("per-router: premium %.3f, big tenant's tokens %.3f, by router %v, idle %d", off.premium, off.bigTokens, off.byRouter, off.idle)
	t.Logf("fleet-wide: premium %.3f, big tenant's tokens %.3f, by router %v, idle %d", on.premium, on.bigTokens, on.byRouter, on.idle)
	if off.premium > 0.5 || math.Abs(off.bigTokens-0.5) < 0.1 {
		t.Errorf("per-router scheduling should drift toward ingress: premium %.3f, big tenant %.3f", off.premium, off.bigTokens)
	}
	if math.Abs(on.premium-0.8) > 0.04 {
		t.Errorf("fleet-wide premium share %.3f, want 0.800 ± 0.040", on.premium)
	}
	if math.Abs(on.bigTokens-0.5) > 0.025 {
		t.Errorf("fleet-wide big tenant's token share %.3f, want 0.500 ± 0.025", on.bigTokens)
	}
	if on.idle != 0 {
		t.Errorf("%d slots left idle: holding back must leave capacity to a peer, not waste it", on.idle)
	}
	if 10*on.byRouter[0] < 7*20000 {
		t.Errorf("r0 placed %v: the skewed shape wants it to take most of the fleet's placements", on.byRouter)
	}
}

// TestHoldBackEnds: a router holding only regular work leaves capacity to
// a peer that reports premium queued and behind, and stops as soon as the
// report is PeerStale, the peer's premium stops advancing for StallAfter,
// or the request it would serve has been held MaxHold.
func TestHoldBackEnds(t *testing.T) {
	weights := map[string]int{schemas.PriorityInteractive: 4, schemas.PriorityStandard: 1}
	peerReport := func(placed int64) *Report {
		return &Report{Classes: []ClassShare{{Class: schemas.PriorityInteractive, Placed: placed, Queued: 50,
			Tenants: []TenantShare{{Tenant: "prem", Tokens: placed * 300, Queued: 50}}}}}
	}
	setup := func() *Queue[int] {
		q := New[int](weights)
		for i := range 200 {
			_ = q.Push(costed(fmt.Sprint("r", i), schemas.PriorityStandard, "reg", 300))
		}
		return q
	}
	// placeAll offers one slot of capacity per pass.
	placeAll := func(q *Queue[int], at time.Time) int {
		n := 0
		q.Pass(at, 1, nil, func(Item[int]) Outcome {
			if n == 1 {
				return Blocked
			}
			n++
			return Placed
		})
		return n
	}
	for _, tc := range []struct {
		name string
		run  func(q *Queue[int]) (held, placedAfter int)
	}{
		{"stale report", func(q *Queue[int]) (int, int) {
			q.ApplyPeer("r0", peerReport(0), t0)
			held := 0
			for i := range 10 { // regular is ahead after a couple: held back
				held += 1 - placeAll(q, t0.Add(time.Duration(i)*time.Millisecond))
			}
			return held, placeAll(q, t0.Add(PeerStale+time.Millisecond))
		}},
		{"stalled peer", func(q *Queue[int]) (int, int) {
			held := 0
			for i := range 25 { // the peer keeps reporting, its premium never advances
				at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
				q.ApplyPeer("r0", peerReport(0), at)
				held += 1 - placeAll(q, at)
			}
			return held, placeAll(q, t0.Add(2500*time.Millisecond))
		}},
		{"peer advancing keeps the share", func(q *Queue[int]) (int, int) {
			held := 0
			for i := range 25 {
				at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
				q.ApplyPeer("r0", peerReport(int64(2*i)), at) // 2 premium per 100 ms: regular's share is half a pass
				held += 1 - placeAll(q, at)
			}
			return held, -1
		}},
		{"held for MaxHold", func(q *Queue[int]) (int, int) {
			for range 40 { // regular 40 requests ahead of a premium class that advances slowly
				q.PopReady(t0, nil)
			}
			held := 0
			for i := range 30 {
				at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
				q.ApplyPeer("r0", peerReport(int64(i)), at)
				held += 1 - placeAll(q, at)
			}
			if held != 30 {
				return 0, 0
			}
			at := t0.Add(MaxHold + 50*time.Millisecond)
			q.ApplyPeer("r0", peerReport(31), at)
			return held, placeAll(q, at)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := setup()
			held, after := tc.run(q)
			if held == 0 || q.HeldBack() == 0 {
				t.Fatalf("never held back for the peer's premium (held %d)", held)
			}
			if after == 0 {
				t.Fatalf("still holding back after the peer's work stopped counting")
			}
			if tc.name == "peer advancing keeps the share" {
				// 25 passes while the peer placed 48 premium: regular's 4:1
				// share is 12, plus the class slack's one.
				if placed := 25 - held; placed < 11 || placed > 15 {
					t.Fatalf("placed %d regular while the peer placed 48 premium, want about 13", placed)
				}
			}
		})
	}
}

// TestPeerRestartCountsFromZero: a peer whose totals drop (it restarted)
// is counted from zero again, never as negative service.
func TestPeerRestartCountsFromZero(t *testing.T) {
	q := New[int](nil)
	rep := func(placed, tokens int64) *Report {
		return &Report{Classes: []ClassShare{{Class: schemas.PriorityStandard, Placed: placed,
			Tenants: []TenantShare{{Tenant: "a", Tokens: tokens}}}}}
	}
	q.ApplyPeer("r1", rep(10, 1000), t0)
	b := &q.bands[schemas.PriorityRank(schemas.PriorityStandard)]
	vt, tvt := b.vt, b.tenants["a"].vt
	q.ApplyPeer("r1", rep(3, 300), t0.Add(time.Second))
	if b.vt != vt+3*b.step || b.tenants["a"].vt != tvt+300 {
		t.Fatalf("after a restart: class vt +%d (want +%d), tenant +%d (want +300)", b.vt-vt, 3*b.step, b.tenants["a"].vt-tvt)
	}
	// The same totals again add nothing (a duplicate or a lost-and-resent report).
	q.ApplyPeer("r1", rep(3, 300), t0.Add(2*time.Second))
	if b.vt != vt+3*b.step {
		t.Fatal("a repeated report counted twice")
	}
}

// TestBaselinesShareNothing: a baseline's discipline neither reports nor
// holds back.
func TestBaselinesShareNothing(t *testing.T) {
	q := NewWith[int](Discipline{Strict: true, ArrivalOrder: true})
	_ = q.Push(costed("x", schemas.PriorityStandard, "a", 1))
	if q.Report() != nil {
		t.Fatal("a baseline's queue reported")
	}
	q.ApplyPeer("r1", &Report{Classes: []ClassShare{{Class: schemas.PriorityCritical, Queued: 9}}}, t0)
	n := 0
	q.Pass(t0, 4, nil, func(Item[int]) Outcome { n++; return Placed })
	if n != 1 {
		t.Fatal("a baseline's queue held back for a peer")
	}
}

// TestPeerServiceCountsOnce: a tenant's service counts once at every
// router however its peers heard of it. C places 10 requests of y and
// tells B; B places one more and tells A; then C's report reaches A. A
// counts 11 requests — not 21, as it did when a peer's counter (which
// held C's service) was merged by the larger and C's increase then added.
func TestPeerServiceCountsOnce(t *testing.T) {
	var a, b, c *Queue[int]
	for _, q := range []**Queue[int]{&a, &b, &c} {
		*q = NewWith[int](Discipline{ServiceShares: true})
	}
	place := func(q *Queue[int], id string) {
		if err := q.Push(costed(id, schemas.PriorityStandard, "y", 100)); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := q.PopReady(t0, nil); !ok {
			t.Fatal("queue ran dry")
		}
	}
	for i := range 10 {
		place(c, fmt.Sprint("c", i))
	}
	b.ApplyPeer("c", c.Report(), t0)
	place(b, "b0")
	a.ApplyPeer("b", b.Report(), t0)
	a.ApplyPeer("c", c.Report(), t0)
	for name, q := range map[string]*Queue[int]{"a": a, "b": b} {
		if got := q.bands[schemas.PriorityRank(schemas.PriorityStandard)].tenants["y"].vt; got != 1100 {
			t.Errorf("%s counts y at %d, want 1100 (11 requests of 100)", name, got)
		}
	}
}

// TestBacklogStartsWithinOneRequest: a router places two tenants' requests
// on arrival while a peer reports the small one queued, so it is never
// lifted and the large one's bigger requests run its counter 4,000 tokens
// ahead — the state the three-router test's tenants entered their backlog
// in. Then both are backlogged here. Active-active (ServiceShares), the
// counters are kept within one request of each other (keepWithinBound),
// so the backlog's tokens are even from its first request; a single
// router's queue (the simulator's) repays the debt, serving the small
// tenant alone until it is level.
func TestBacklogStartsWithinOneRequest(t *testing.T) {
	for _, tc := range []struct {
		name         string
		shares, even bool
	}{
		{"active-active", true, true},
		{"single router", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := NewWith[int](Discipline{Weights: map[string]int{schemas.PriorityStandard: 1}, ServiceShares: tc.shares})
			peer := &Report{Classes: []ClassShare{{Class: schemas.PriorityStandard, Queued: 1,
				Tenants: []TenantShare{{Tenant: "small", Queued: 1}}}}}
			for i := range 10 {
				q.ApplyPeer("p", peer, t0)
				for _, f := range []flow{regBig, regSmall} {
					if err := q.Push(costed(fmt.Sprint("a", f.tenant, i), f.prio, f.tenant, f.cost/5*2)); err != nil {
						t.Fatal(err)
					}
					if _, ok, _ := q.PopReady(t0, nil); !ok {
						t.Fatal("queue ran dry")
					}
				}
			}
			for i := range 20 {
				for _, f := range []flow{regBig, regSmall} {
					_ = q.Push(costed(fmt.Sprint("b", f.tenant, i), f.prio, f.tenant, f.cost/5*2))
				}
			}
			tok := map[string]int64{}
			widest := int64(0)
			for range 20 {
				it, ok, _ := q.PopReady(t0, nil)
				if !ok {
					t.Fatal("queue ran dry")
				}
				tok[it.Tenant] += it.Cost
				widest = max(widest, tok["big"]-tok["small"], tok["small"]-tok["big"])
			}
			// Two requests: one for where the counters start, one for
			// the request in hand.
			if even := widest <= 2*800; even != tc.even {
				t.Fatalf("widest token gap in the backlog %d (tokens %v); within two requests: %t, want %t", widest, tok, even, tc.even)
			}
		})
	}
}
