package fleet

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func hb(id string) *schemas.Heartbeat {
	return &schemas.Heartbeat{
		WorkerID: id, Pool: "p", GPU: "h100", TP: 1,
		HBMTotalBytes: 80 << 30, HBMFreeBytes: 20 << 30,
		KVBlocksTotal: 1000, KVBlocksFree: 600, BlockSize: 16,
		Models: []schemas.ModelState{{Name: "llama-8b", Dtype: "bf16", State: schemas.WeightHot}},
	}
}

func TestStalenessFailsClosed(t *testing.T) {
	f := New(Options{})
	f.ApplyHeartbeat(hb("a"), t0)
	f.ApplyHeartbeat(hb("b"), t0.Add(2*time.Second))
	d := hb("c")
	d.Draining = true
	f.ApplyHeartbeat(d, t0.Add(2*time.Second))
	// A worker known only through KV events has never reported capacity.
	f.ApplyKV(&schemas.KVEvent{WorkerID: "k", Seq: 1, Kind: schemas.KVStored, Hashes: []uint64{1}}, t0)

	cases := []struct {
		at   time.Duration
		want []string
	}{
		{2 * time.Second, []string{"a", "b"}},
		{3 * time.Second, []string{"a", "b"}},             // exactly at the bound: still fresh
		{3*time.Second + time.Millisecond, []string{"b"}}, // a is stale
		{6 * time.Second, nil},
	}
	for _, c := range cases {
		got := f.Candidates(t0.Add(c.at), nil)
		if len(got) != len(c.want) {
			t.Fatalf("at %v: %d candidates, want %v", c.at, len(got), c.want)
		}
		for i, w := range got {
			if w.ID != c.want[i] {
				t.Fatalf("at %v: candidate %s, want %v", c.at, w.ID, c.want)
			}
		}
	}
	g := New(Options{Staleness: 10 * time.Second})
	g.ApplyHeartbeat(hb("a"), t0)
	if len(g.Candidates(t0.Add(9*time.Second), nil)) != 1 {
		t.Fatal("configured staleness not honoured")
	}
}

func TestKVGapDetection(t *testing.T) {
	f := New(Options{})
	f.ApplyHeartbeat(hb("a"), t0)
	ev := func(seq uint64, kind string, hs ...uint64) bool {
		return f.ApplyKV(&schemas.KVEvent{WorkerID: "a", Seq: seq, Kind: kind, Hashes: hs}, t0)
	}
	w := f.Get("a")
	idx := w.Idx
	if ev(1, schemas.KVStored, 10, 11) || ev(2, schemas.KVStored, 12) {
		t.Fatal("in-order events reported a gap")
	}
	if ev(2, schemas.KVEvicted, 10) {
		t.Fatal("a duplicate reported a gap")
	}
	if !f.Prefix().Holds(idx, 10) {
		t.Fatal("a duplicate was applied")
	}
	if !ev(5, schemas.KVEvicted, 11) {
		t.Fatal("seq 2 -> 5 not reported as a gap")
	}
	if w.KVInSync || f.Prefix().Holds(idx, 11) {
		t.Fatal("gap: expected out of sync and the event still applied")
	}
	if ev(6, schemas.KVStored, 13) {
		t.Fatal("the event after a gap must not report another")
	}
	// The snapshot replaces the whole set and re-syncs.
	if ev(6, schemas.KVSnapshot, 20, 21) {
		t.Fatal("snapshot reported a gap")
	}
	if !w.KVInSync || f.Prefix().Holds(idx, 10) || !f.Prefix().Holds(idx, 21) || f.Prefix().WorkerBlocks(idx) != 2 {
		t.Fatal("snapshot did not replace the block set")
	}
	if ev(7, schemas.KVCleared) || f.Prefix().WorkerBlocks(idx) != 0 {
		t.Fatal("cleared")
	}
	// A heartbeat whose KV sequence went backwards means a restart.
	ev(8, schemas.KVStored, 30)
	h := hb("a")
	h.KVSeq = 0
	f.ApplyHeartbeat(h, t0)
	if f.Prefix().WorkerBlocks(idx) != 0 || w.KVSeq != 0 {
		t.Fatal("restart did not drop blocks")
	}
	// A router that joins late learns from the first heartbeat.
	late := hb("late")
	late.KVSeq = 42
	if !f.ApplyHeartbeat(late, t0) {
		t.Fatal("late join: expected needSnapshot")
	}
	if f.ApplyHeartbeat(late, t0.Add(time.Second)) {
		t.Fatal("only the first heartbeat asks for a snapshot")
	}
}

func TestBookings(t *testing.T) {
	f := New(Options{Settle: time.Second})
	f.ApplyHeartbeat(hb("a"), t0)
	w := f.Get("a")
	if err := f.Reserve("a", "r1", schemas.PriorityInteractive, 100, 50, 10, t0); err != nil {
		t.Fatal(err)
	}
	if err := f.Reserve("a", "r2", schemas.PriorityBatch, 200, 20, 5, t0.Add(800*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := f.Reserve("a", "r1", schemas.PriorityBatch, 1, 1, 1, t0); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate booking: %v", err)
	}
	if err := f.Reserve("zz", "r3", schemas.PriorityBatch, 1, 1, 1, t0); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("unknown worker: %v", err)
	}
	if w.FreeBlocks() != 600-15 || w.BookedRequests != 2 || w.BookedPromptTokens != 300 {
		t.Fatalf("booking not counted: free %d", w.FreeBlocks())
	}
	if w.BookedPromptByClass != [NumClasses]int{0, 100, 0, 200} {
		t.Fatalf("bookings by class %v", w.BookedPromptByClass)
	}
	// The heartbeat at t0+1.5s was received >= 1 s after r1 but not r2.
	f.ApplyHeartbeat(hb("a"), t0.Add(1500*time.Millisecond))
	if w.BookedBlocks != 5 || w.BookedRequests != 1 || f.Bookings() != 1 {
		t.Fatalf("absorb: booked %d blocks, %d requests", w.BookedBlocks, w.BookedRequests)
	}
	if f.Unreserve("r1") {
		t.Fatal("absorbed booking still unreservable")
	}
	if !f.Unreserve("r2") || f.Unreserve("r2") {
		t.Fatal("Unreserve must release once and be idempotent")
	}
	if w.BookedBlocks != 0 || w.BookedRequests != 0 || w.FreeBlocks() != 600 || w.BookedPromptByClass != [NumClasses]int{} {
		t.Fatal("bookings not fully released")
	}
}

func TestQueuedTokensByClass(t *testing.T) {
	if NumClasses != len(schemas.Priorities) {
		t.Fatalf("NumClasses %d, schemas has %d classes", NumClasses, len(schemas.Priorities))
	}
	for _, tc := range []struct {
		name    string
		queued  int
		byClass map[string]int
		want    [NumClasses]int
	}{
		{"split", 700, map[string]int{schemas.PriorityInteractive: 100, schemas.PriorityBatch: 600}, [NumClasses]int{0, 100, 0, 600}},
		// A worker that does not split its queue: all of it is ahead of
		// every class, as before the split existed.
		{"no split", 500, nil, [NumClasses]int{500, 0, 0, 0}},
		{"unknown class", 300, map[string]int{"gold": 200, schemas.PriorityStandard: 100}, [NumClasses]int{200, 0, 100, 0}},
		{"unattributed rest", 900, map[string]int{schemas.PriorityBatch: 600}, [NumClasses]int{300, 0, 0, 600}},
		{"empty", 0, nil, [NumClasses]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Options{})
			h := hb("a")
			h.QueuedTokens, h.QueuedTokensByClass = 12345, map[string]int{schemas.PriorityCritical: 12345}
			f.ApplyHeartbeat(h, t0) // the next heartbeat must replace, not add to, this split
			h.QueuedTokens, h.QueuedTokensByClass = tc.queued, tc.byClass
			f.ApplyHeartbeat(h, t0.Add(time.Second))
			if got := f.Get("a").QueuedByClass; got != tc.want {
				t.Errorf("QueuedByClass %v, want %v", got, tc.want)
			}
		})
	}
}

func TestKVBlocksByClass(t *testing.T) {
	// hb's worker has 400 of its 1000 blocks in use.
	for _, tc := range []struct {
		name    string
		byClass map[string]int
		want    [NumClasses]int
		// lower is LowerClassBlocks by the requesting class's rank.
		lower [NumClasses]int
	}{
		{"split", map[string]int{schemas.PriorityCritical: 50, schemas.PriorityStandard: 150, schemas.PriorityBatch: 200},
			[NumClasses]int{50, 0, 150, 200}, [NumClasses]int{350, 350, 200, 0}},
		// A worker that does not split its blocks: nothing is reclaimable.
		{"no split", nil, [NumClasses]int{400, 0, 0, 0}, [NumClasses]int{}},
		{"unknown class", map[string]int{"gold": 100, schemas.PriorityBatch: 300}, [NumClasses]int{100, 0, 0, 300}, [NumClasses]int{300, 300, 300, 0}},
		{"unattributed rest", map[string]int{schemas.PriorityInteractive: 100}, [NumClasses]int{300, 100, 0, 0}, [NumClasses]int{100, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Options{})
			h := hb("a")
			h.KVBlocksByClass = map[string]int{schemas.PriorityBatch: 400}
			f.ApplyHeartbeat(h, t0) // the next heartbeat must replace, not add to, this split
			h.KVBlocksByClass = tc.byClass
			f.ApplyHeartbeat(h, t0.Add(time.Second))
			w := f.Get("a")
			if w.KVByClass != tc.want {
				t.Errorf("KVByClass %v, want %v", w.KVByClass, tc.want)
			}
			for rank, want := range tc.lower {
				if got := w.LowerClassBlocks(rank); got != want {
					t.Errorf("LowerClassBlocks(%d) = %d, want %d", rank, got, want)
				}
			}
		})
	}
}

func TestRemoveDropsPrefixAndBookings(t *testing.T) {
	f := New(Options{})
	f.ApplyHeartbeat(hb("a"), t0)
	f.ApplyHeartbeat(hb("b"), t0)
	a := f.Get("a").Idx
	f.ApplyKV(&schemas.KVEvent{WorkerID: "a", Seq: 1, Kind: schemas.KVStored, Hashes: []uint64{1, 2}}, t0)
	f.ApplyKV(&schemas.KVEvent{WorkerID: "b", Seq: 1, Kind: schemas.KVStored, Hashes: []uint64{1}}, t0)
	_ = f.Reserve("a", "r", schemas.PriorityStandard, 1, 1, 1, t0)
	f.Remove("a")
	if f.Get("a") != nil || f.Len() != 1 || f.Bookings() != 0 {
		t.Fatal("worker not removed")
	}
	if f.Prefix().Holds(a, 1) || f.Prefix().Blocks() != 1 {
		t.Fatal("prefix entries of a removed worker remain")
	}
	// The id is recycled with a clean slate.
	f.ApplyHeartbeat(hb("c"), t0)
	if c := f.Get("c"); c.Idx != a || f.Prefix().WorkerBlocks(c.Idx) != 0 || c.BookedRequests != 0 {
		t.Fatal("recycled id carries old state")
	}
}

func TestModelLookupAndHeartbeatReuse(t *testing.T) {
	f := New(Options{})
	h := hb("a")
	f.ApplyHeartbeat(h, t0)
	w := f.Get("a")
	if m, ok := w.Model("llama-8b", "bf16"); !ok || m.State != schemas.WeightHot {
		t.Fatal("model not found")
	}
	if _, ok := w.Model("llama-8b", "fp8"); ok {
		t.Fatal("dtype mismatch matched")
	}
	allocs := testing.AllocsPerRun(50, func() { f.ApplyHeartbeat(h, t0) })
	if allocs != 0 {
		t.Fatalf("steady-state heartbeat allocates %v", allocs)
	}
}

// Every method that changes a worker moves the fleet's version and that
// worker's slot in Versions, and only that slot; reads move nothing.
func TestVersionsMarkExactlyTheChangedSlots(t *testing.T) {
	f := New(Options{})
	f.ApplyHeartbeat(hb("a"), t0)
	f.ApplyHeartbeat(hb("b"), t0)
	steps := []struct {
		name   string
		change func()
		slot   int // -1: nothing may move
	}{
		{"heartbeat", func() { f.ApplyHeartbeat(hb("b"), t0.Add(time.Second)) }, 1},
		{"kv event", func() {
			f.ApplyKV(&schemas.KVEvent{WorkerID: "a", Seq: 1, Kind: schemas.KVStored, Hashes: []uint64{7}}, t0)
		}, 0},
		{"reserve", func() {
			if err := f.Reserve("a", "r1", schemas.PriorityStandard, 10, 10, 1, t0); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"unreserve", func() { f.Unreserve("r1") }, 0},
		{"unreserve again", func() { f.Unreserve("r1") }, -1},
		{"reads", func() { f.Get("a"); f.Candidates(t0, nil); f.Canonical("h100") }, -1},
		{"booking absorbed by a heartbeat", func() {
			if err := f.Reserve("b", "r2", schemas.PriorityStandard, 10, 10, 1, t0); err != nil {
				t.Fatal(err)
			}
			f.ApplyHeartbeat(hb("b"), t0.Add(5*time.Second))
			if f.Get("b").BookedRequests != 0 {
				t.Fatal("booking not absorbed")
			}
		}, 1},
		{"remove", func() { f.Remove("a") }, 0},
		{"a new worker reuses the slot", func() { f.ApplyHeartbeat(hb("c"), t0) }, 0},
	}
	for _, s := range steps {
		before, vers := f.Version(), append([]uint64(nil), f.Versions()...)
		s.change()
		after := f.Versions()
		if len(after) != len(f.Workers()) {
			t.Fatalf("%s: %d versions for %d slots", s.name, len(after), len(f.Workers()))
		}
		if s.slot < 0 {
			if f.Version() != before || after[0] != vers[0] || after[1] != vers[1] {
				t.Fatalf("%s moved the version", s.name)
			}
			continue
		}
		if f.Version() <= before || after[s.slot] != f.Version() {
			t.Fatalf("%s: version %d -> %d, slot %d at %d", s.name, before, f.Version(), s.slot, after[s.slot])
		}
		if other := 1 - s.slot; after[other] != vers[other] {
			t.Fatalf("%s moved slot %d too", s.name, other)
		}
	}
}
