package lru

import (
	"slices"
	"testing"
)

// order is the list from oldest to newest, read through Oldest and the
// slots' links, as a client would evict them one by one.
func order(l *List[string]) []string {
	var out []string
	for i := l.head; i != 0; i = l.slots[i-1].next {
		out = append(out, *l.At(i - 1))
	}
	return out
}

func TestListOrderAndReuse(t *testing.T) {
	tests := []struct {
		name string
		run  func(l *List[string]) []Slot
		want []string
		len  int
		live int
	}{
		{
			name: "zero list is empty",
			run:  func(l *List[string]) []Slot { return nil },
		},
		{
			name: "push back keeps arrival order",
			run: func(l *List[string]) []Slot {
				a, b, c := l.Alloc("a"), l.Alloc("b"), l.Alloc("c")
				l.PushBack(a)
				l.PushBack(b)
				l.PushBack(c)
				return nil
			},
			want: []string{"a", "b", "c"}, len: 3, live: 3,
		},
		{
			name: "pushing a listed slot again makes it the newest",
			run: func(l *List[string]) []Slot {
				a, b, c := l.Alloc("a"), l.Alloc("b"), l.Alloc("c")
				l.PushBack(a)
				l.PushBack(b)
				l.PushBack(c)
				l.PushBack(a)
				return nil
			},
			want: []string{"b", "c", "a"}, len: 3, live: 3,
		},
		{
			name: "an allocated slot off the list is kept but never evicted",
			run: func(l *List[string]) []Slot {
				a, b := l.Alloc("a"), l.Alloc("b")
				l.PushBack(a)
				l.PushBack(b)
				l.Remove(a)
				l.Remove(a) // twice is harmless
				return nil
			},
			want: []string{"b"}, len: 1, live: 2,
		},
		{
			name: "freeing the middle relinks its neighbours; the slot is reused",
			run: func(l *List[string]) []Slot {
				a, b, c := l.Alloc("a"), l.Alloc("b"), l.Alloc("c")
				l.PushBack(a)
				l.PushBack(b)
				l.PushBack(c)
				l.Free(b)
				d := l.Alloc("d")
				if d != b {
					panic("freed slot not reused")
				}
				l.PushBack(d)
				return nil
			},
			want: []string{"a", "c", "d"}, len: 3, live: 3,
		},
		{
			name: "evicting oldest until empty",
			run: func(l *List[string]) []Slot {
				for _, v := range []string{"a", "b", "c"} {
					l.PushBack(l.Alloc(v))
				}
				for {
					i, ok := l.Oldest()
					if !ok {
						break
					}
					l.Free(i)
				}
				return nil
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l List[string]
			tc.run(&l)
			if got := order(&l); !slices.Equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
			if l.Len() != tc.len || l.Allocated() != tc.live {
				t.Errorf("Len %d Allocated %d, want %d %d", l.Len(), l.Allocated(), tc.len, tc.live)
			}
			if i, ok := l.Oldest(); ok != (tc.len > 0) || (ok && *l.At(i) != tc.want[0]) {
				t.Errorf("Oldest = %d, %v", i, ok)
			}
		})
	}
}

// TestListSteadyStateDoesNotAllocate: a full cache that evicts one and
// stores one per step reuses its slots.
func TestListSteadyStateDoesNotAllocate(t *testing.T) {
	var l List[uint64]
	for i := range 1024 {
		l.PushBack(l.Alloc(uint64(i)))
	}
	n := uint64(1024)
	allocs := testing.AllocsPerRun(1000, func() {
		i, _ := l.Oldest()
		l.Free(i)
		n++
		l.PushBack(l.Alloc(n))
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per evict+store, want 0", allocs)
	}
}
