package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func match(ix *Index, hashes []uint64) []int32 {
	lens := make([]int32, ix.MaxWorker())
	ix.Match(hashes, lens, nil)
	return lens
}

func TestLongestPrefixPerWorker(t *testing.T) {
	ix := New(0)
	ix.Stored(0, []uint64{1, 2, 3, 4})
	ix.Stored(1, []uint64{1, 2})
	ix.Stored(2, []uint64{2, 3, 4}) // holds later blocks but not the first: no prefix
	ix.Stored(3, []uint64{1, 3})    // hole at block 2: match stops at 1
	got := match(ix, []uint64{1, 2, 3, 4, 5})
	want := []int32{4, 2, 0, 1}
	for w, n := range want {
		if got[w] != n {
			t.Errorf("worker %d: match %d, want %d", w, got[w], n)
		}
	}
}

func TestEvictedClearedSnapshot(t *testing.T) {
	ix := New(0)
	ix.Stored(0, []uint64{1, 2, 3})
	ix.Stored(1, []uint64{1, 2, 3})
	ix.Evicted(0, []uint64{2, 99})
	if got := match(ix, []uint64{1, 2, 3}); got[0] != 1 || got[1] != 3 {
		t.Fatalf("after evict: %v", got)
	}
	ix.Cleared(1)
	if ix.WorkerBlocks(1) != 0 || ix.Holds(1, 1) {
		t.Fatal("cleared worker still holds blocks")
	}
	ix.Snapshot(0, []uint64{7, 8})
	if ix.Holds(0, 1) || !ix.Holds(0, 8) || ix.Entries() != 2 || ix.Blocks() != 2 {
		t.Fatalf("snapshot: entries %d blocks %d", ix.Entries(), ix.Blocks())
	}
}

func TestCapEvictsLeastRecent(t *testing.T) {
	ix := New(3)
	ix.Stored(0, []uint64{1, 2, 3})
	ix.Stored(0, []uint64{1}) // refresh 1: 2 is now the oldest
	ix.Stored(0, []uint64{4})
	if ix.Holds(0, 2) || !ix.Holds(0, 1) || !ix.Holds(0, 4) || ix.WorkerBlocks(0) != 3 {
		t.Fatal("LRU cap evicted the wrong block")
	}
	ix.SetCap(0, 1)
	if ix.WorkerBlocks(0) != 1 || !ix.Holds(0, 4) {
		t.Fatal("SetCap did not shrink to the most recent block")
	}
	// Reusing freed slab slots must keep the list consistent.
	for h := uint64(100); h < 200; h++ {
		ix.Stored(0, []uint64{h})
	}
	if ix.WorkerBlocks(0) != 1 || !ix.Holds(0, 199) || ix.Entries() != 1 {
		t.Fatalf("churn: blocks %d entries %d", ix.WorkerBlocks(0), ix.Entries())
	}
}

func TestMatchNoAllocs(t *testing.T) {
	ix := New(0)
	hs := make([]uint64, 64)
	for i := range hs {
		hs[i] = uint64(i + 1)
	}
	for w := int32(0); w < 8; w++ {
		ix.Stored(w, hs[:8*(w+1)])
	}
	lens := make([]int32, ix.MaxWorker())
	touched := make([]int32, 0, 16)
	allocs := testing.AllocsPerRun(100, func() {
		touched = ix.Match(hs, lens, touched[:0])
		for _, w := range touched {
			lens[w] = 0
		}
	})
	if allocs != 0 {
		t.Fatalf("Match allocates %v per call", allocs)
	}
}

// Match agrees with a plain reference (per-worker sets, walked block by
// block) through random stores, evictions, clears and cap evictions, with
// hashes shared by more workers than a slot holds inline and a table that
// grows and shifts entries back on deletion.
func TestMatchAgreesWithReferenceUnderChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const workers, pool = 40, 1000
	ix := New(400)
	ref := make([]map[uint64]bool, workers)
	order := make([][]uint64, workers) // stored order, for the cap's LRU
	for w := range ref {
		ref[w] = map[uint64]bool{}
	}
	refStore := func(w int, h uint64) {
		if ref[w][h] {
			order[w] = slices.DeleteFunc(order[w], func(x uint64) bool { return x == h })
		}
		ref[w][h] = true
		order[w] = append(order[w], h)
		if len(order[w]) > 400 {
			delete(ref[w], order[w][0])
			order[w] = order[w][1:]
		}
	}
	chain := func(n int) []uint64 {
		start := rng.IntN(pool - n)
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = uint64(start+i)*0x100000001b3 + 1
		}
		return hs
	}
	lens := make([]int32, workers)
	for step := range 20000 {
		w := rng.IntN(workers)
		switch op := rng.IntN(100); {
		case op < 60:
			hs := chain(1 + rng.IntN(40))
			ix.Stored(int32(w), hs)
			for _, h := range hs {
				refStore(w, h)
			}
		case op < 95:
			hs := chain(1 + rng.IntN(20))
			ix.Evicted(int32(w), hs)
			for _, h := range hs {
				if ref[w][h] {
					delete(ref[w], h)
					order[w] = slices.DeleteFunc(order[w], func(x uint64) bool { return x == h })
				}
			}
		default:
			ix.Cleared(int32(w))
			ref[w], order[w] = map[uint64]bool{}, nil
		}
		if step%50 != 0 {
			continue
		}
		q := chain(60)
		touched := ix.Match(q, lens, nil)
		for v := range workers {
			want := 0
			for want < len(q) && ref[v][q[want]] {
				want++
			}
			if int(lens[v]) != want {
				t.Fatalf("step %d: worker %d matched %d, reference %d", step, v, lens[v], want)
			}
		}
		for _, v := range touched {
			lens[v] = 0
		}
		distinct := map[uint64]bool{}
		for v := range ref {
			for h := range ref[v] {
				distinct[h] = true
			}
		}
		if ix.Blocks() != len(distinct) {
			t.Fatalf("step %d: %d distinct blocks indexed, reference %d", step, ix.Blocks(), len(distinct))
		}
	}
}
