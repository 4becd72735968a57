package admission

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/schemas"
)

func TestFleetViewLoadAndPools(t *testing.T) {
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
	pools := f.Pools(later)
	if len(pools) != 2 || pools[0].Name != "h100" || pools[1].PricePerHour != 1 || pools[0].Workers != 1 ||
		len(pools[1].Kinds) != 1 || pools[1].Kinds[0].GPU != "l40s" {
		t.Fatalf("pools %+v", pools)
	}
	// Priced for one request by the roofline model: the L40S pool is
	// slower than the H100 the estimate was made on, the H100 pool the same.
	m := perf.NewPredictor(nil)
	est, ok := RooflineEstimate(m, pools[0].Kinds, "llama-3.1-8b", 2000, 200)
	if !ok {
		t.Fatal("no roofline estimate on an H100")
	}
	priced := PoolSpeeds(pools, m, est, "llama-3.1-8b", 2000, 200)
	if s := priced[0].Speed; s < 0.999 || s > 1.001 {
		t.Errorf("h100 pool speed %v against an H100 estimate, want 1", s)
	}
	if s := priced[1].Speed; s <= 0.1 || s >= 0.9 {
		t.Errorf("l40s pool speed %v against an H100 estimate, want well under 1", s)
	}
	if got := PoolSpeeds(pools, nil, est, "llama-3.1-8b", 2000, 200); got[1].Speed != 1 {
		t.Errorf("without a model the pools are unpriced, got speed %v", got[1].Speed)
	}
	// A worker that stops sending heartbeats leaves the fleet.
	f.Observe(hb("a", "h100", 21, later.Add(5*time.Second), 4), later.Add(5*time.Second))
	if p := f.Pools(later.Add(5 * time.Second)); len(p) != 1 || p[0].Name != "h100" {
		t.Fatalf("stale worker still counted: %+v", p)
	}
	// A restarted worker (counter back to 0) is not a negative rate.
	f.Observe(hb("a", "h100", 0, later.Add(5500*time.Millisecond), 4), later.Add(5500*time.Millisecond))
	if l := f.Load(nil, later.Add(5500*time.Millisecond)); l.RequestsPerSec < 0 {
		t.Fatalf("negative rate %v", l.RequestsPerSec)
	}
}
