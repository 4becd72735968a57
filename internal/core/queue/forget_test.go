package queue

import (
	"container/heap"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// heapInuse is the heap in use after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// reportSize is r's encoded size, as a router publishes it.
func reportSize(t *testing.T, r *Report) int {
	t.Helper()
	data, err := schemas.Marshal(schemas.Msgpack, r)
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

// TestHundredThousandTenantsGoIdle runs 100,000 tenants, one request
// each, through a router's queue in waves while it and a peer exchange
// fairness reports, then lets them go idle. At the peak the queues hold a
// counter per tenant and the report stays under MaxReportBytes (Partial:
// uncapped it would be megabytes, past NATS's 1 MiB payload); once the
// tenants are idle past ForgetIdleAfter, every counter, every tenant total
// kept of a peer, and a peer that stopped reporting are forgotten, the
// report is small and complete again, and the heap in use is back near
// where it started.
func TestHundredThousandTenantsGoIdle(t *testing.T) {
	const tenants, wave = 100_000, 5_000
	before := heapInuse()
	a := NewWith[int](Discipline{ServiceShares: true})
	b := NewWith[int](Discipline{ServiceShares: true})
	now := t0
	largest, partial := 0, false
	exchange := func() {
		ra := a.Report()
		if n := reportSize(t, ra); n > largest {
			largest = n
		}
		partial = partial || ra.Partial
		b.ApplyPeer("router-a", ra, now)
		a.ApplyPeer("router-b", b.Report(), now)
	}
	// A third router reports once and is never heard from again.
	a.ApplyPeer("router-c", &Report{Classes: []ClassShare{{Class: schemas.PriorityBatch, Placed: 1,
		Tenants: []TenantShare{{Tenant: "c-only", Tokens: 10}}}}}, now)

	for start := 0; start < tenants; start += wave {
		for i := start; i < start+wave; i++ {
			it := Item[int]{ID: fmt.Sprintf("req-%06d", i), Priority: schemas.PriorityStandard,
				Tenant: fmt.Sprintf("tenant-%06d", i), Cost: 300, Enqueued: now}
			if err := a.Push(it); err != nil {
				t.Fatal(err)
			}
		}
		exchange() // a wave queued: queued tenants go first
		a.Pass(now, 16, nil, func(Item[int]) Outcome { return Placed })
		if a.Len() != 0 {
			t.Fatalf("%d requests left queued", a.Len())
		}
		now = now.Add(200 * time.Millisecond)
		exchange()
	}
	peakA, peakB := a.TenantCount(), b.TenantCount()
	peakHeap := heapInuse()
	if peakA < tenants || peakB == 0 || b.PeerTenantCount() == 0 {
		t.Fatalf("at the peak: router a holds %d tenant counters (want %d), b %d and %d of a's totals", peakA, tenants, peakB, b.PeerTenantCount())
	}
	if !partial || largest > MaxReportBytes || largest >= 1<<20 {
		t.Fatalf("largest report %d bytes (partial %v): want a partial report within %d bytes", largest, partial, MaxReportBytes)
	}

	// Idle: no work anywhere, reports every second (forget's sweep
	// period) until everything is forgotten, or for four times
	// ForgetIdleAfter. It takes longer than ForgetIdleAfter: the partial
	// reports rotate through the tenants, and a tenant is forgotten only
	// once its last totals went out (at b, once a's reached it).
	idleFrom := now
	for end := now.Add(4 * ForgetIdleAfter); now.Before(end); now = now.Add(time.Second) {
		a.Pass(now, 16, nil, func(Item[int]) Outcome { return Placed })
		b.Pass(now, 16, nil, func(Item[int]) Outcome { return Placed })
		exchange()
		if a.TenantCount()+b.TenantCount()+a.PeerTenantCount()+b.PeerTenantCount() == 0 && now.Sub(idleFrom) > PeerForget {
			break
		}
	}
	t.Logf("forgotten %s after the last request", now.Sub(idleFrom))
	rep := a.Report()
	if n := a.TenantCount() + b.TenantCount(); n != 0 {
		t.Errorf("after the idle period the queues still hold %d and %d tenant counters (peak %d and %d)", a.TenantCount(), b.TenantCount(), peakA, peakB)
	}
	if n := a.PeerTenantCount() + b.PeerTenantCount(); n != 0 {
		t.Errorf("after the idle period %d and %d tenant totals of peers are kept", a.PeerTenantCount(), b.PeerTenantCount())
	}
	if a.PeerCount() != 1 || b.PeerCount() != 1 {
		t.Errorf("peers remembered: a %d, b %d; want each the other only (router-c went silent)", a.PeerCount(), b.PeerCount())
	}
	if rep.Partial || reportSize(t, rep) > 512 {
		t.Errorf("the idle report is %d bytes (partial %v): want the class totals alone", reportSize(t, rep), rep.Partial)
	}
	after := heapInuse()
	grew := int64(after) - int64(before)
	t.Logf("heap in use: %d KiB before, %d KiB at the peak, %d KiB after idle; report at most %d bytes",
		before>>10, peakHeap>>10, after>>10, largest)
	if peakHeap-before < 16<<20 {
		t.Fatalf("the peak added only %d KiB: the test loads too little to tell", (peakHeap-before)>>10)
	}
	if grew > 2<<20 {
		t.Errorf("heap in use %d KiB above where it started after the tenants went idle (peak %d KiB above)", grew>>10, (peakHeap-before)>>10)
	}
	// The queues are still in use afterwards: a returning tenant is
	// served as a new one.
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

// TestForgettingKeepsWhatMatters: an idle tenant whose counter is still
// ahead of a backlogged one's is remembered (forgetting it would forgive
// its lead), as is one a live peer reports queued; once the backlogged
// tenant has passed it, it goes.
func TestForgettingKeepsWhatMatters(t *testing.T) {
	q := NewWith[int](Discipline{ServiceShares: true})
	now := t0
	placeAll := func() { q.Pass(now, 16, nil, func(Item[int]) Outcome { return Placed }) }
	// "big" is served 10,000 tokens, then goes idle.
	if err := q.Push(Item[int]{ID: "big-1", Priority: schemas.PriorityStandard, Tenant: "big", Cost: 10_000, Enqueued: now}); err != nil {
		t.Fatal(err)
	}
	placeAll()
	// "small" stays backlogged (its requests block) with a counter far
	// below big's.
	if err := q.Push(Item[int]{ID: "small-1", Priority: schemas.PriorityStandard, Tenant: "small", Cost: 100, Enqueued: now}); err != nil {
		t.Fatal(err)
	}
	band := &q.bands[schemas.PriorityRank(schemas.PriorityStandard)]
	band.tenants["small"].vt = 0
	// A live peer reports "remote" queued.
	report := func() {
		q.ApplyPeer("peer", &Report{Classes: []ClassShare{{Class: schemas.PriorityStandard, Placed: 1, Queued: 1,
			Tenants: []TenantShare{{Tenant: "remote", Tokens: 0, Queued: 1}}}}}, now)
	}
	report()
	for end := now.Add(ForgetIdleAfter + 5*time.Second); now.Before(end); now = now.Add(500 * time.Millisecond) {
		report()
		q.Pass(now, 16, nil, func(Item[int]) Outcome { return Blocked })
	}
	for _, name := range []string{"big", "small", "remote"} {
		if band.tenants[name] == nil {
			t.Fatalf("%s was forgotten: big is ahead of a backlogged tenant, small is backlogged, remote is queued at a peer", name)
		}
	}
	// The others' counters pass big's: its lead is gone, and so is big.
	band.tenants["small"].vt = band.tenants["big"].vt + 1
	band.tenants["remote"].vt = band.tenants["big"].vt + 1
	heap.Init(&band.active)
	now = now.Add(2 * forgetSweep)
	report()
	q.Pass(now, 16, nil, func(Item[int]) Outcome { return Blocked })
	if band.tenants["big"] != nil {
		t.Fatal("big is still remembered though a return would lift it above its old counter")
	}
	if band.tenants["small"] == nil || band.tenants["remote"] == nil {
		t.Fatal("forgot a tenant that holds work")
	}
}
