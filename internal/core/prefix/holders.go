package prefix

import "math/bits"

// holders maps a block hash to the workers holding it. It is what Match
// reads, once per request block, so it is laid out for that read: an
// open-addressed table of 64-byte slots, each a hash with its first
// inlineHolders workers in the slot itself, so one lookup is one cache
// line. A Go map of slices cost a control word, a slot and the slice's own
// array: at 10,000 workers and 1,000,000 indexed blocks (117,000 distinct
// hashes, a table far past the CPU caches) Match spent some 9 µs of CPU
// per request on those misses, most of a placement. Holders past the
// inline ones, which only popular blocks have, live in a slice of more
// that the slot names.
//
// Linear probing, at most half full, with backward-shift deletion, so
// there are no tombstones and a lookup stops at the first empty slot.
type holders struct {
	slots []holderSlot
	shift uint // 64 - log2(len(slots))
	used  int
	more  [][]int32
	free  []int32 // indices of more not in use
}

// inlineHolders makes a slot 64 bytes: the hash, the count, the overflow's
// index and 12 ids.
const inlineHolders = 12

type holderSlot struct {
	hash uint64
	n    int32 // holders in all; 0 marks an empty slot
	more int32 // index into holders.more when n > inlineHolders
	w    [inlineHolders]int32
}

// overflow is the slice of holders past s's inline ones.
func (t *holders) overflow(s *holderSlot) []int32 {
	if s.n <= inlineHolders {
		return nil
	}
	return t.more[s.more]
}

const minHolderSlots = 1 << 10

func newHolders() holders {
	return holders{slots: make([]holderSlot, minHolderSlots), shift: 64 - 10}
}

// home is the slot a hash probes first. Block hashes are well mixed
// already; the multiply spreads any that are not.
func (t *holders) home(h uint64) int {
	return int((h * 0x9E3779B97F4A7C15) >> t.shift)
}

// find returns the slot holding h, or nil.
func (t *holders) find(h uint64) *holderSlot {
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.n == 0 {
			return nil
		}
		if s.hash == h {
			return s
		}
	}
}

// add records that w holds h; the caller knows it did not already.
func (t *holders) add(h uint64, w int32) {
	if 2*(t.used+1) > len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := t.home(h)
	for ; t.slots[i].n != 0; i = (i + 1) & mask {
		if s := &t.slots[i]; s.hash == h {
			switch {
			case s.n < inlineHolders:
				s.w[s.n] = w
			case s.n == inlineHolders:
				s.more = t.newOverflow()
				fallthrough
			default:
				t.more[s.more] = append(t.more[s.more], w)
			}
			s.n++
			return
		}
	}
	t.slots[i] = holderSlot{hash: h, n: 1}
	t.slots[i].w[0] = w
	t.used++
}

// remove records that w no longer holds h; unknown pairs are ignored.
func (t *holders) remove(h uint64, w int32) {
	mask := len(t.slots) - 1
	i := t.home(h)
	for ; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.n == 0 {
			return
		}
		if s.hash == h {
			break
		}
	}
	s := &t.slots[i]
	extra := t.overflow(s)
	at := -1
	for j := range min(int(s.n), inlineHolders) {
		if s.w[j] == w {
			at = j
			break
		}
	}
	switch {
	case at >= 0 && len(extra) > 0:
		// Fill the inline hole from the overflow's end.
		s.w[at] = extra[len(extra)-1]
		extra = extra[:len(extra)-1]
	case at >= 0:
		s.w[at] = s.w[s.n-1]
	default:
		k := -1
		for j, x := range extra {
			if x == w {
				k = j
				break
			}
		}
		if k < 0 {
			return
		}
		extra[k] = extra[len(extra)-1]
		extra = extra[:len(extra)-1]
	}
	if s.n > inlineHolders {
		t.more[s.more] = extra
		if len(extra) == 0 {
			t.free = append(t.free, s.more)
		}
	}
	s.n--
	if s.n == 0 {
		t.deleteAt(i)
	}
}

// deleteAt empties slot i and shifts back the entries after it that
// probed past it, so every entry stays reachable from its home.
func (t *holders) deleteAt(i int) {
	mask := len(t.slots) - 1
	t.used--
	for j := (i + 1) & mask; t.slots[j].n != 0; j = (j + 1) & mask {
		k := t.home(t.slots[j].hash)
		// Move j into the hole at i if its home is not in (i, j],
		// cyclically.
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = holderSlot{}
}

// newOverflow returns the index of an empty slice of more.
func (t *holders) newOverflow() int32 {
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		return i
	}
	t.more = append(t.more, nil)
	return int32(len(t.more) - 1)
}

func (t *holders) grow() {
	old := t.slots
	t.slots = make([]holderSlot, 2*len(old))
	t.shift = 64 - uint(bits.Len(uint(len(t.slots)))-1)
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.n == 0 {
			continue
		}
		i := t.home(s.hash)
		for t.slots[i].n != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
