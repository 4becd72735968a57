package engine

import "github.com/switchyard-ai/switchyard/internal/core/lru"

// kvPool is the paged KV cache of one replica: a fixed number of blocks of
// tokens.BlockSize tokens. Full prompt blocks carry their chained hash and
// stay cached after their sequences finish, on an LRU list of unreferenced
// blocks that is evicted only when a new block is needed (vLLM's automatic
// prefix caching, gpu-model.md §6). Other blocks (partial blocks and
// generated tokens) are private to a sequence and are counted, not tracked.
type kvPool struct {
	total int
	free  int // blocks holding nothing
	// cached blocks by hash; the blocks themselves live in one lru.List
	// (a slab, so storing and evicting do not allocate in steady state):
	// a block on the list is unreferenced and evicted oldest first; a
	// referenced block is allocated but off the list.
	byHash map[uint64]lru.Slot
	blocks lru.List[kvBlock]

	stored, evicted []uint64 // events since the last drain

	census uint32 // bumped by each count of blocks by class (kvBlock.seen)
}

type kvBlock struct {
	hash uint64
	ref  int32
	// seen is the pool's census number when State last counted the block,
	// so a block several sequences share is counted once.
	seen uint32
}

func newKVPool(total int) *kvPool {
	return &kvPool{total: total, free: total, byHash: make(map[uint64]lru.Slot)}
}

// available is blocks that can be handed out now: empty ones plus cached
// blocks nobody references.
func (p *kvPool) available() int { return p.free + p.blocks.Len() }

// lookup takes a reference on the cached block with hash h, if any.
func (p *kvPool) lookup(h uint64) (lru.Slot, bool) {
	i, ok := p.byHash[h]
	if !ok {
		return 0, false
	}
	n := p.blocks.At(i)
	if n.ref == 0 {
		p.blocks.Remove(i)
	}
	n.ref++
	return i, true
}

// takeFree makes one empty block available, evicting the least recently
// used unreferenced cached block when none is empty.
func (p *kvPool) takeFree() bool {
	if p.free > 0 {
		p.free--
		return true
	}
	i, ok := p.blocks.Oldest()
	if !ok {
		return false
	}
	h := p.blocks.At(i).hash
	p.blocks.Free(i)
	delete(p.byHash, h)
	p.evicted = append(p.evicted, h)
	return true
}

// evictAll drops every unreferenced cached block (weights going to sleep
// discard the KV cache).
func (p *kvPool) evictAll() {
	for p.blocks.Len() > 0 {
		free := p.free
		p.free = 0
		p.takeFree()
		p.free = free + 1
	}
}

// allocPrivate takes one unhashed block.
func (p *kvPool) allocPrivate() bool { return p.takeFree() }

// releasePrivate returns n unhashed blocks.
func (p *kvPool) releasePrivate(n int) { p.free += n }

// allocHashed takes a block for the full prompt block with hash h: a
// reference to an existing copy (another sequence computed it meanwhile) or
// a new cached block, reported as stored.
func (p *kvPool) allocHashed(h uint64) (lru.Slot, bool) {
	if i, ok := p.lookup(h); ok {
		return i, true
	}
	if !p.takeFree() {
		return 0, false
	}
	i := p.blocks.Alloc(kvBlock{hash: h, ref: 1})
	p.byHash[h] = i
	p.stored = append(p.stored, h)
	return i, true
}

// release drops one reference; an unreferenced block joins the LRU list
// as its newest and keeps its hash until evicted.
func (p *kvPool) release(i lru.Slot) {
	n := p.blocks.At(i)
	n.ref--
	if n.ref > 0 {
		return
	}
	p.blocks.PushBack(i)
}
