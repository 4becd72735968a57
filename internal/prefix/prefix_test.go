package prefix

import "testing"

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
