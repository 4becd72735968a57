// Package prefix owns the router's prefix index: which workers hold which
// chained KV block hashes (internal/core/tokens), and the longest-prefix match of a
// request against every worker at once.
//
// Workers are small dense integer ids (the fleet assigns and recycles them),
// so a match fills a caller-owned array indexed by worker id instead of
// allocating a map per placement. Because block hashes are chained, a hash
// identifies its whole prefix; a worker's match length is the number of
// leading request hashes it holds, and the walk stops at the first block no
// remaining worker extends. The hash-to-holders map is an open-addressed
// table laid out for that walk (holders.go): one cache line per block.
//
// Memory is bounded per worker: each worker keeps its blocks in LRU order
// (a store of an already-held block refreshes it), and storing past the
// worker's cap evicts its least recently stored block. The cap is a safety
// net against lost eviction events; a live worker's own evictions normally
// keep it well under.
//
// An Index is not safe for concurrent use; the router shell serialises
// access (see internal/core/fleet).
package prefix

import "github.com/switchyard-ai/switchyard/internal/core/lru"

// DefaultCap is the per-worker block cap when none is set: about 1 M blocks
// (16 M tokens), above any single GPU's KV capacity, so it only bites when
// eviction events were lost.
const DefaultCap = 1 << 20

// workerSet is one worker's blocks: every block it holds is on its LRU
// list (a store refreshes it), the oldest evicted past the cap.
type workerSet struct {
	pos    map[uint64]lru.Slot // hash -> slot of its block
	blocks lru.List[uint64]    // the hashes, oldest first
	cap    int
}

// Index maps chained block hashes to the workers holding them.
type Index struct {
	holders    holders
	workers    []*workerSet
	defaultCap int
	entries    int
}

// New returns an empty index whose workers hold at most defaultCap blocks
// each (DefaultCap when defaultCap <= 0).
func New(defaultCap int) *Index {
	if defaultCap <= 0 {
		defaultCap = DefaultCap
	}
	return &Index{holders: newHolders(), defaultCap: defaultCap}
}

func (ix *Index) worker(w int32) *workerSet {
	for int(w) >= len(ix.workers) {
		ix.workers = append(ix.workers, nil)
	}
	ws := ix.workers[w]
	if ws == nil {
		ws = &workerSet{pos: make(map[uint64]lru.Slot), cap: ix.defaultCap}
		ix.workers[w] = ws
	}
	return ws
}

// SetCap bounds worker w to n blocks (the index default when n <= 0),
// evicting its least recently stored blocks if it is over.
func (ix *Index) SetCap(w int32, n int) {
	ws := ix.worker(w)
	if n <= 0 {
		n = ix.defaultCap
	}
	ws.cap = n
	for len(ws.pos) > ws.cap {
		ix.evictOldest(w, ws)
	}
}

// Stored records that worker w now holds hashes; blocks it already held
// become its most recent.
func (ix *Index) Stored(w int32, hashes []uint64) {
	ws := ix.worker(w)
	for _, h := range hashes {
		if i, ok := ws.pos[h]; ok {
			ws.blocks.PushBack(i)
			continue
		}
		i := ws.blocks.Alloc(h)
		ws.pos[h] = i
		ws.blocks.PushBack(i)
		ix.holders.add(h, w)
		ix.entries++
		if len(ws.pos) > ws.cap {
			ix.evictOldest(w, ws)
		}
	}
}

// Evicted records that worker w dropped hashes. Unknown hashes are ignored:
// eviction of a block we never saw stored is harmless.
func (ix *Index) Evicted(w int32, hashes []uint64) {
	if int(w) >= len(ix.workers) || ix.workers[w] == nil {
		return
	}
	ws := ix.workers[w]
	for _, h := range hashes {
		if i, ok := ws.pos[h]; ok {
			ix.drop(w, ws, h, i)
		}
	}
}

// Cleared drops every block of worker w (a cache reset, a restart, or the
// worker leaving the fleet).
func (ix *Index) Cleared(w int32) {
	if int(w) >= len(ix.workers) || ix.workers[w] == nil {
		return
	}
	ws := ix.workers[w]
	for h := range ws.pos {
		ix.holders.remove(h, w)
	}
	ix.entries -= len(ws.pos)
	cap := ws.cap
	ix.workers[w] = nil
	if cap != ix.defaultCap {
		ix.worker(w).cap = cap
	}
}

// Snapshot replaces worker w's block set with hashes, as after a gap in its
// event sequence.
func (ix *Index) Snapshot(w int32, hashes []uint64) {
	ix.Cleared(w)
	ix.Stored(w, hashes)
}

// Holds reports whether worker w holds hash h.
func (ix *Index) Holds(w int32, h uint64) bool {
	if int(w) >= len(ix.workers) || ix.workers[w] == nil {
		return false
	}
	_, ok := ix.workers[w].pos[h]
	return ok
}

// WorkerBlocks returns how many blocks worker w holds in the index.
func (ix *Index) WorkerBlocks(w int32) int {
	if int(w) >= len(ix.workers) || ix.workers[w] == nil {
		return 0
	}
	return len(ix.workers[w].pos)
}

// Entries is the number of (worker, block) pairs indexed.
func (ix *Index) Entries() int { return ix.entries }

// Blocks is the number of distinct block hashes indexed.
func (ix *Index) Blocks() int { return ix.holders.used }

// Match walks hashes in order and sets lens[w] to the number of leading
// hashes worker w holds, for every worker holding at least the first one.
// lens must be indexed by worker id, long enough for every id in the index
// (see MaxWorker), and zero on entry; the ids whose entries were set are
// appended to touched and returned so the caller can reset just those.
// Nothing is allocated beyond growth of touched.
func (ix *Index) Match(hashes []uint64, lens []int32, touched []int32) []int32 {
	if len(hashes) == 0 {
		return touched
	}
	s := ix.holders.find(hashes[0])
	if s == nil {
		return touched
	}
	for _, w := range s.w[:min(s.n, inlineHolders)] {
		lens[w] = 1
		touched = append(touched, w)
	}
	if s.n > inlineHolders {
		for _, w := range ix.holders.overflow(s) {
			lens[w] = 1
			touched = append(touched, w)
		}
	}
	// A worker extends its match at block i only if it held all i before
	// (lens[w] == i), so no per-block set intersection is needed.
	//
	// The slots are looked up matchAhead blocks at a time before any is
	// read: the lookups do not depend on each other, so their cache misses
	// overlap instead of coming one after another, and the few looked up
	// past the block where the walk stops cost little beside that.
	var found [matchAhead]*holderSlot
	for i := 1; i < len(hashes); i += matchAhead {
		n := min(matchAhead, len(hashes)-i)
		for j := range n {
			found[j] = ix.holders.find(hashes[i+j])
		}
		for j, s := range found[:n] {
			if s == nil {
				return touched
			}
			b := int32(i + j)
			ext := extend(s.w[:min(s.n, inlineHolders)], lens, b)
			if s.n > inlineHolders && extend(ix.holders.overflow(s), lens, b) {
				ext = true
			}
			if !ext {
				return touched
			}
		}
	}
	return touched
}

// matchAhead is how many blocks Match looks up at once.
const matchAhead = 8

// extend moves the workers of ws whose match reached block i (lens[w] ==
// i) on to i+1, and reports whether any did.
func extend(ws []int32, lens []int32, i int32) bool {
	ext := false
	for _, w := range ws {
		if lens[w] == i {
			lens[w] = i + 1
			ext = true
		}
	}
	return ext
}

// MaxWorker returns one more than the largest worker id the index has seen,
// the length Match's lens must have.
func (ix *Index) MaxWorker() int { return len(ix.workers) }

func (ix *Index) evictOldest(w int32, ws *workerSet) {
	i, ok := ws.blocks.Oldest()
	if !ok {
		return
	}
	ix.drop(w, ws, *ws.blocks.At(i), i)
}

func (ix *Index) drop(w int32, ws *workerSet, h uint64, i lru.Slot) {
	ws.blocks.Free(i)
	delete(ws.pos, h)
	ix.holders.remove(h, w)
	ix.entries--
}
