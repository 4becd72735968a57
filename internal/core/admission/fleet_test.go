package admission

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestFleetViewLoadAndPrice(t *testing.T) {
	var f FleetView
	hb := func(id, gpu string, done uint64, at time.Time, price float64) schemas.Heartbeat {
		return schemas.Heartbeat{WorkerID: id, GPU: gpu, Pool: gpu, CompletedTotal: done, SentAt: at, PricePerHour: price, Utilization: 0.5}
	}
	if l := f.Load(nil, t0); l.RequestsPerSec != 0 {
		t.Fatalf("no heartbeats, rate %v", l.RequestsPerSec)
	}
	// Two workers complete 10 and 20 requests per second.
	for i := 0; i <= 4; i++ {
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		f.Observe(hb("a", "h100", uint64(5*i), at, 4), at)
		f.Observe(hb("b", "l40s", uint64(10*i), at, 1), at)
	}
	now := t0.Add(2 * time.Second)
	l := f.Load(map[string]int{"batch": 3}, now)
	if l.RequestsPerSec < 29.9 || l.RequestsPerSec > 30.1 || l.Utilization != 0.5 || l.Pending["batch"] != 3 {
		t.Fatalf("load %+v, want 30 req/s, utilisation 0.5", l)
	}
	// Throughput falls (a trough): the peak decays instead of vanishing.
	for i := 5; i <= 14; i++ {
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		f.Observe(hb("a", "h100", 20, at, 4), at)
		f.Observe(hb("b", "l40s", 40, at, 1), at)
	}
	later := t0.Add(7 * time.Second)
	l = f.Load(nil, later)
	if l.RequestsPerSec <= 0 || l.RequestsPerSec >= 30 {
		t.Fatalf("after a quiet 5 s the rate %v should be the decayed peak, below 30 and above 0", l.RequestsPerSec)
	}
	if p := f.MeanPrice(later); p != 2.5 {
		t.Fatalf("mean price %v of an h100 at 4 and an l40s at 1, want 2.5", p)
	}
	// Engines' waiting requests by class add up across workers; a worker
	// without the split adds to the total only.
	wa, wb := hb("a", "h100", 20, later, 4), hb("b", "l40s", 40, later, 1)
	wa.Waiting, wa.WaitingByClass = 5, map[string]int{schemas.PriorityBatch: 3, schemas.PriorityCritical: 2}
	wb.Waiting, wb.WaitingByClass = 4, map[string]int{schemas.PriorityBatch: 4}
	f.Observe(wa, later)
	f.Observe(wb, later)
	if l := f.Load(nil, later); l.WorkerWaiting != 9 || l.WorkerWaitingByClass[schemas.PriorityBatch] != 7 || l.WorkerWaitingByClass[schemas.PriorityCritical] != 2 {
		t.Fatalf("waiting %d by class %v, want 9 with batch 7, critical 2", l.WorkerWaiting, l.WorkerWaitingByClass)
	}
	// A worker that stops sending heartbeats leaves the fleet.
	f.Observe(hb("a", "h100", 21, later.Add(5*time.Second), 4), later.Add(5*time.Second))
	if p := f.MeanPrice(later.Add(5 * time.Second)); p != 4 {
		t.Fatalf("stale worker still counted: mean price %v, want the h100's 4", p)
	}
	// A restarted worker (counter back to 0) is not a negative rate.
	f.Observe(hb("a", "h100", 0, later.Add(5500*time.Millisecond), 4), later.Add(5500*time.Millisecond))
	if l := f.Load(nil, later.Add(5500*time.Millisecond)); l.RequestsPerSec < 0 {
		t.Fatalf("negative rate %v", l.RequestsPerSec)
	}
}
