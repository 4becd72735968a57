package placement

import (
	"math"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// occupied is a fleet of fast workers, one per entry, each with 1000 KV
// blocks of which 100 are free and the other 900 held by the given class,
// and queued prompt tokens of that class.
type occupied struct {
	holder string // class holding the used blocks
	free   int    // 100 when 0
	queued int    // critical prompt tokens queued
}

func occupiedFleet(ws ...occupied) *fleet.Fleet {
	f := fleet.New(fleet.Options{})
	for i, w := range ws {
		free := w.free
		if free == 0 {
			free = 100
		}
		f.ApplyHeartbeat(&schemas.Heartbeat{
			WorkerID: string(rune('A' + i)), GPU: "fast", TP: 1, HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30,
			KVBlocksTotal: 1000, KVBlocksFree: free, BlockSize: 16,
			Models:          []schemas.ModelState{{Name: "m", Dtype: "bf16", State: schemas.WeightHot}},
			KVBlocksByClass: map[string]int{w.holder: 1000 - free},
			QueuedTokens:    w.queued, QueuedTokensByClass: map[string]int{schemas.PriorityCritical: w.queued},
		}, now)
	}
	return f
}

// A request needing more KV blocks than are free may count those held by
// strictly lower classes, which the engine preempts for it, if its class
// may reclaim (Options.Reclaim: critical by default); only the class of
// the occupancy changes between these cases. The request (2000+200
// tokens) needs 138 blocks, 100 are free.
func TestLowerClassKVIsReclaimable(t *testing.T) {
	all := map[string]bool{schemas.PriorityCritical: true, schemas.PriorityInteractive: true, schemas.PriorityStandard: true, schemas.PriorityBatch: true}
	cases := []struct {
		name    string
		prio    string
		holder  string
		reclaim map[string]bool // Options.Reclaim; nil for the default
		want    Reason          // ReasonNone: placed
	}{
		{"critical over batch", schemas.PriorityCritical, schemas.PriorityBatch, nil, ReasonNone},
		{"critical over interactive", schemas.PriorityCritical, schemas.PriorityInteractive, nil, ReasonNone},
		{"critical over critical", schemas.PriorityCritical, schemas.PriorityCritical, nil, ReasonWouldPreempt},
		{"critical not allowed to", schemas.PriorityCritical, schemas.PriorityBatch, map[string]bool{}, ReasonWouldPreempt},
		{"interactive over standard, by default", schemas.PriorityInteractive, schemas.PriorityStandard, nil, ReasonWouldPreempt},
		{"interactive over standard, allowed", schemas.PriorityInteractive, schemas.PriorityStandard, all, ReasonNone},
		{"interactive over interactive", schemas.PriorityInteractive, schemas.PriorityInteractive, all, ReasonWouldPreempt},
		{"interactive over critical", schemas.PriorityInteractive, schemas.PriorityCritical, all, ReasonWouldPreempt},
		// Standard may reclaim batch's blocks here, but its KV ceiling
		// (0.95) forbids the full cache that leaves.
		{"standard over batch", schemas.PriorityStandard, schemas.PriorityBatch, all, ReasonPriorityReserve},
		{"batch over batch", schemas.PriorityBatch, schemas.PriorityBatch, all, ReasonWouldPreempt},
		// A worker that does not split its blocks offers nothing to reclaim.
		{"critical, no split", schemas.PriorityCritical, "", nil, ReasonWouldPreempt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOpts()
			o.Reclaim = c.reclaim
			d := place(t, occupiedFleet(occupied{holder: c.holder}), req(c.prio), o)
			if c.want == ReasonNone {
				if !d.OK() {
					t.Fatalf("rejected: %v", d.Rejections[0].Reason)
				}
				if d.Terms.Blocks != 138 || d.Terms.ReclaimBlocks != 38 {
					t.Fatalf("blocks %d, reclaim %d; want 138 and 38", d.Terms.Blocks, d.Terms.ReclaimBlocks)
				}
				return
			}
			if d.OK() || d.Counts[c.want] != 1 {
				t.Fatalf("picked %s, counts %v; want rejected for %v", winner(d), d.Counts, c.want)
			}
		})
	}
	// With the priority axis off no class is known to be lower.
	o := testOpts()
	disable(AxisPriority)(&o)
	if d := place(t, occupiedFleet(occupied{holder: schemas.PriorityBatch}), req(schemas.PriorityCritical), o); d.OK() || d.Counts[ReasonWouldPreempt] != 1 {
		t.Fatalf("priority axis off: picked %s, counts %v", winner(d), d.Counts)
	}
}

// Reclaiming has a price — the victims' recompute — so a worker that must
// preempt wins only when nothing cheaper can take the request.
func TestReclaimIsPricedAndChosenLast(t *testing.T) {
	crit := req(schemas.PriorityCritical)
	free := occupied{holder: schemas.PriorityBatch, free: 800}
	full := occupied{holder: schemas.PriorityBatch}
	for _, c := range []struct {
		name string
		ws   []occupied
		want string
	}{
		{"free blocks beat reclaiming", []occupied{full, free}, "B"},
		{"...wherever they are", []occupied{free, full}, "A"},
		// 30,000 critical tokens queued (3 s) cost more than a full
		// cache's preemption risk and recomputing 38 blocks of batch work.
		{"reclaiming beats a long queue", []occupied{full, {holder: schemas.PriorityBatch, free: 800, queued: 30000}}, "A"},
		{"...not a short one", []occupied{full, {holder: schemas.PriorityBatch, free: 800, queued: 5000}}, "B"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if d := place(t, occupiedFleet(c.ws...), crit, testOpts()); winner(d) != c.want {
				t.Errorf("picked %s, want %s; candidates:", winner(d), c.want)
				for _, cd := range d.Candidates {
					t.Logf("  %s %+v", cd.Worker.ID, cd.Terms)
				}
			}
		})
	}

	d := place(t, occupiedFleet(full), crit, testOpts())
	tm := d.Terms
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	// 38 blocks of 16 tokens recomputed at the fast GPU's 10,000 tokens/s,
	// valued at interactive's $0.01/s (the next class down) plus $6/h.
	if !near(tm.ReclaimSeconds, 38*16/10000.0) || !near(tm.ReclaimUSD, tm.ReclaimSeconds*(0.01+6.0/3600)) {
		t.Fatalf("reclaim %v s, %v USD", tm.ReclaimSeconds, tm.ReclaimUSD)
	}
	if !near(tm.TotalUSD, tm.TimeUSD+tm.GPUUSD+tm.MissUSD+tm.ReclaimUSD) {
		t.Fatalf("total %v is not the sum of its terms: %+v", tm.TotalUSD, tm)
	}
	// The cache is full after placement: the preemption risk of a full one.
	if !near(tm.PreemptSeconds, tm.PrefillSeconds+tm.DecodeSeconds) {
		t.Fatalf("preempt_s %v, want prefill + decode %v", tm.PreemptSeconds, tm.PrefillSeconds+tm.DecodeSeconds)
	}
	// With the headroom axis off nothing is reclaimed or priced.
	o := testOpts()
	disable(AxisHeadroom)(&o)
	if off := place(t, occupiedFleet(full), crit, o).Terms; off.ReclaimBlocks != 0 || off.ReclaimUSD != 0 {
		t.Fatalf("headroom axis off: %+v", off)
	}
}

// Bookings draw on the reclaimable blocks as on free ones: what a request
// may count is free + lower classes' blocks, net of every booking since
// the heartbeat.
func TestReclaimIsNetOfBookings(t *testing.T) {
	f := occupiedFleet(occupied{holder: schemas.PriorityBatch}) // 100 free + 900 batch
	p := New(testCost{}, testOpts())
	crit := req(schemas.PriorityCritical) // 138 blocks
	for i, want := range []bool{true, true, true, true, true, true, true, false} {
		d := p.Place(f, crit, now)
		if d.OK() != want {
			t.Fatalf("placement %d: placed %v, want %v (counts %v)", i, d.OK(), want, d.Counts)
		}
		if !d.OK() {
			break
		}
		// Each booking reclaims only its own blocks' shortfall.
		if wantReclaim := min(138, 138*(i+1)-100); d.Terms.ReclaimBlocks != wantReclaim {
			t.Fatalf("placement %d: reclaim %d, want %d", i, d.Terms.ReclaimBlocks, wantReclaim)
		}
		prefill, out, blocks := d.Booking(crit.PromptTokens, crit.OutputTokens)
		if err := f.Reserve("A", string(rune('a'+i)), schemas.PriorityCritical, prefill, out, blocks, now); err != nil {
			t.Fatal(err)
		}
	}
}
