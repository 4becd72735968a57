package engine

// kvPool is the paged KV cache of one replica: a fixed number of blocks of
// tokens.BlockSize tokens. Full prompt blocks carry their chained hash and
// stay cached after their sequences finish, on an LRU list of unreferenced
// blocks that is evicted only when a new block is needed (vLLM's automatic
// prefix caching, gpu-model.md §6). Other blocks (partial blocks and
// generated tokens) are private to a sequence and are counted, not tracked.
type kvPool struct {
	total int
	free  int // blocks holding nothing
	// cached blocks by hash; nodes live in a slab reused through freeNodes
	// so that storing and evicting do not allocate in steady state.
	byHash    map[uint64]int32
	nodes     []kvNode
	freeNodes []int32
	lruHead   int32 // least recently released, evicted first
	lruTail   int32
	lruLen    int

	stored, evicted []uint64 // events since the last drain

	census uint32 // bumped by each count of blocks by class (kvNode.seen)
}

type kvNode struct {
	hash       uint64
	ref        int32
	prev, next int32
	// seen is the pool's census number when State last counted the block,
	// so a block several sequences share is counted once (it fits the
	// struct's padding: the node stays 24 bytes).
	seen uint32
}

const nilNode int32 = -1

func newKVPool(total int) *kvPool {
	return &kvPool{total: total, free: total, byHash: make(map[uint64]int32), lruHead: nilNode, lruTail: nilNode}
}

// available is blocks that can be handed out now: empty ones plus cached
// blocks nobody references.
func (p *kvPool) available() int { return p.free + p.lruLen }

// lookup takes a reference on the cached block with hash h, if any.
func (p *kvPool) lookup(h uint64) (int32, bool) {
	i, ok := p.byHash[h]
	if !ok {
		return nilNode, false
	}
	n := &p.nodes[i]
	if n.ref == 0 {
		p.lruRemove(i)
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
	if p.lruHead == nilNode {
		return false
	}
	i := p.lruHead
	p.lruRemove(i)
	h := p.nodes[i].hash
	delete(p.byHash, h)
	p.freeNodes = append(p.freeNodes, i)
	p.evicted = append(p.evicted, h)
	return true
}

// evictAll drops every unreferenced cached block (weights going to sleep
// discard the KV cache).
func (p *kvPool) evictAll() {
	for p.lruHead != nilNode {
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
func (p *kvPool) allocHashed(h uint64) (int32, bool) {
	if i, ok := p.lookup(h); ok {
		return i, true
	}
	if !p.takeFree() {
		return nilNode, false
	}
	var i int32
	if n := len(p.freeNodes); n > 0 {
		i = p.freeNodes[n-1]
		p.freeNodes = p.freeNodes[:n-1]
	} else {
		p.nodes = append(p.nodes, kvNode{})
		i = int32(len(p.nodes) - 1)
	}
	p.nodes[i] = kvNode{hash: h, ref: 1, prev: nilNode, next: nilNode}
	p.byHash[h] = i
	p.stored = append(p.stored, h)
	return i, true
}

// release drops one reference; an unreferenced block joins the LRU tail and
// keeps its hash until evicted.
func (p *kvPool) release(i int32) {
	n := &p.nodes[i]
	n.ref--
	if n.ref > 0 {
		return
	}
	n.prev, n.next = p.lruTail, nilNode
	if p.lruTail != nilNode {
		p.nodes[p.lruTail].next = i
	} else {
		p.lruHead = i
	}
	p.lruTail = i
	p.lruLen++
}

func (p *kvPool) lruRemove(i int32) {
	n := &p.nodes[i]
	if n.prev != nilNode {
		p.nodes[n.prev].next = n.next
	} else {
		p.lruHead = n.next
	}
	if n.next != nilNode {
		p.nodes[n.next].prev = n.prev
	} else {
		p.lruTail = n.prev
	}
	n.prev, n.next = nilNode, nilNode
	p.lruLen--
}
