// Package lru owns the core's one least-recently-used list: values kept in
// a slab (one slice, no heap object per entry, freed slots reused) with an
// intrusive doubly linked order over the slots that are on the list. Both
// LRUs of Switchyard are this one list: a simulated replica's cached KV
// blocks (internal/core/engine, evicted when a new block is needed) and the
// router's per-worker prefix index (internal/core/prefix, bounded by a cap).
//
// A slot is addressed by its Slot index, stable for as long as the slot is
// allocated. A slot can be allocated without being on the list (a KV block
// some sequence still references): Alloc and Free manage slots, PushBack,
// Remove and Oldest the order. The zero List is empty and ready to use; it
// is not safe for concurrent use.
package lru

// Slot addresses one allocated value. Links store slot+1 so that the zero
// value of a link means "none" and the zero List works.
type Slot = int32

type entry[T any] struct {
	value T
	// prev and next are the neighbours' slot+1 on the list (0: none); prev
	// is offList while the slot is not on the list, and next is the free
	// list's link while the slot is free. (No separate flag: the entry of a
	// 16-byte value stays 24 bytes.)
	prev, next int32
}

const offList = -1

// List is a slab of T with an LRU order over some of its slots.
type List[T any] struct {
	slots      []entry[T]
	freeHead   int32 // slot+1 of the first free slot, 0 when none
	head, tail int32 // slot+1: head is the least recently pushed, tail the most
	listed     int
	allocated  int
}

// Alloc stores v in a free slot (reusing one when it can) and returns it;
// the slot is not on the list.
func (l *List[T]) Alloc(v T) Slot {
	l.allocated++
	if l.freeHead != 0 {
		i := l.freeHead - 1
		l.freeHead = l.slots[i].next
		l.slots[i] = entry[T]{value: v, prev: offList}
		return i
	}
	l.slots = append(l.slots, entry[T]{value: v, prev: offList})
	return Slot(len(l.slots) - 1)
}

// Free takes slot i off the list if it is on it and returns it for reuse.
func (l *List[T]) Free(i Slot) {
	l.Remove(i)
	var zero T
	l.slots[i] = entry[T]{value: zero, prev: offList, next: l.freeHead}
	l.freeHead = i + 1
	l.allocated--
}

// At is the value in slot i, to read or change in place.
func (l *List[T]) At(i Slot) *T { return &l.slots[i].value }

// PushBack makes slot i the most recent, moving it if it is on the list.
func (l *List[T]) PushBack(i Slot) {
	l.Remove(i)
	e := &l.slots[i]
	e.prev, e.next = l.tail, 0
	if l.tail != 0 {
		l.slots[l.tail-1].next = i + 1
	} else {
		l.head = i + 1
	}
	l.tail = i + 1
	l.listed++
}

// Remove takes slot i off the list (the slot stays allocated); a slot not
// on the list is left as it is.
func (l *List[T]) Remove(i Slot) {
	e := &l.slots[i]
	if e.prev == offList {
		return
	}
	if e.prev != 0 {
		l.slots[e.prev-1].next = e.next
	} else {
		l.head = e.next
	}
	if e.next != 0 {
		l.slots[e.next-1].prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = offList, 0
	l.listed--
}

// Oldest is the least recently pushed slot on the list; ok is false when
// the list is empty.
func (l *List[T]) Oldest() (i Slot, ok bool) {
	if l.head == 0 {
		return 0, false
	}
	return l.head - 1, true
}

// Listed reports whether slot i is on the list.
func (l *List[T]) Listed(i Slot) bool { return l.slots[i].prev != offList }

// Len is the number of slots on the list.
func (l *List[T]) Len() int { return l.listed }

// Allocated is the number of slots holding a value, on the list or not.
func (l *List[T]) Allocated() int { return l.allocated }

// EachSlot calls fn with every slot's value in slot order (not LRU order),
// free slots (which hold the zero T) included, for rare passes over every
// value such as clearing a mark.
func (l *List[T]) EachSlot(fn func(*T)) {
	for i := range l.slots {
		fn(&l.slots[i].value)
	}
}
