package queue

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func item(id, prio string, deadline time.Duration) Item[int] {
	it := Item[int]{ID: id, Priority: prio, Enqueued: t0}
	if deadline > 0 {
		it.Deadline = t0.Add(deadline)
	}
	return it
}

func TestEDFWithinClass(t *testing.T) {
	q := New[int](nil)
	for _, it := range []Item[int]{
		item("none1", schemas.PriorityStandard, 0),
		item("late", schemas.PriorityStandard, 30*time.Second),
		item("early", schemas.PriorityStandard, 5*time.Second),
		item("none2", schemas.PriorityStandard, 0),
		item("mid", schemas.PriorityStandard, 10*time.Second),
	} {
		if err := q.Push(it); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"early", "mid", "late", "none1", "none2"}
	for _, w := range want {
		it, ok, _ := q.PopReady(t0, nil)
		if !ok || it.ID != w {
			t.Fatalf("popped %q, want %q", it.ID, w)
		}
	}
	if _, ok, _ := q.PopReady(t0, nil); ok || q.Len() != 0 {
		t.Fatal("queue should be empty")
	}
}

func TestWeightedSharesAndNoStarvation(t *testing.T) {
	q := New[int](nil)
	for i := 0; i < 100; i++ {
		for _, p := range schemas.Priorities {
			_ = q.Push(item(fmt.Sprintf("%s-%d", p, i), p, 0))
		}
	}
	// Every window of 15 pops serves the classes 8/4/2/1.
	for w := 0; w < 5; w++ {
		got := map[string]int{}
		for i := 0; i < 15; i++ {
			it, _, _ := q.PopReady(t0, nil)
			got[it.Priority]++
		}
		for p, want := range DefaultWeights {
			if got[p] != want {
				t.Fatalf("window %d: %s served %d, want %d (%v)", w, p, got[p], want, got)
			}
		}
	}
	// Configurable weights; a class left out still gets a share.
	q2 := New[int](map[string]int{schemas.PriorityCritical: 3})
	for i := 0; i < 20; i++ {
		_ = q2.Push(item(fmt.Sprintf("c%d", i), schemas.PriorityCritical, 0))
		_ = q2.Push(item(fmt.Sprintf("b%d", i), schemas.PriorityBatch, 0))
	}
	batch := 0
	for i := 0; i < 8; i++ {
		it, _, _ := q2.PopReady(t0, nil)
		if it.Priority == schemas.PriorityBatch {
			batch++
		}
	}
	if batch != 2 {
		t.Fatalf("batch got %d of 8 pops at weights 3:1, want 2", batch)
	}
}

func TestIdleClassShareGoesToOthers(t *testing.T) {
	q := New[int](nil)
	for i := 0; i < 10; i++ {
		_ = q.Push(item(fmt.Sprintf("b%d", i), schemas.PriorityBatch, 0))
	}
	for i := 0; i < 10; i++ {
		if it, ok, _ := q.PopReady(t0, nil); !ok || it.Priority != schemas.PriorityBatch {
			t.Fatal("a lone class must be served every pop")
		}
	}
	// A critical request arriving into a batch backlog goes next.
	for i := 0; i < 5; i++ {
		_ = q.Push(item(fmt.Sprintf("b2-%d", i), schemas.PriorityBatch, 0))
	}
	_ = q.Push(item("crit", schemas.PriorityCritical, 0))
	if it, _, _ := q.PopReady(t0, nil); it.ID != "crit" {
		t.Fatalf("popped %s, want crit", it.ID)
	}
}

func TestExpiry(t *testing.T) {
	q := New[int](nil)
	a := item("a", schemas.PriorityInteractive, 10*time.Second)
	a.MinService = 4 * time.Second // latest start t0+6s
	b := item("b", schemas.PriorityInteractive, 8*time.Second)
	b.MinService = time.Second // latest start t0+7s, earlier deadline
	c := item("c", schemas.PriorityBatch, 0)
	c.MinService = time.Hour // no deadline: never expires
	for _, it := range []Item[int]{a, b, c} {
		_ = q.Push(it)
	}
	// At t0+6.5s, a cannot finish by t0+10s, though its deadline is later
	// than b's; b is fine.
	it, ok, exp := q.PopReady(t0.Add(6500*time.Millisecond), nil)
	if len(exp) != 1 || exp[0].ID != "a" {
		t.Fatalf("expired %v, want [a]", exp)
	}
	if !ok || it.ID != "b" {
		t.Fatalf("popped %s, want b", it.ID)
	}
	if _, ok := q.Remove("a"); ok {
		t.Fatal("an expired request is still queued")
	}
	exp = q.Expire(t0.Add(24*time.Hour), nil)
	if len(exp) != 0 || q.Len() != 1 {
		t.Fatal("a request without deadline expired")
	}
	// Exactly at the bar is still feasible.
	d := item("d", schemas.PriorityStandard, 5*time.Second)
	d.MinService = 2 * time.Second
	_ = q.Push(d)
	if exp := q.Expire(t0.Add(3*time.Second), nil); len(exp) != 0 {
		t.Fatal("expired at exactly deadline - min service")
	}
}

func TestPushErrorsAndRemove(t *testing.T) {
	q := New[string](nil)
	if err := q.Push(Item[string]{ID: "x", Priority: "vip"}); !errors.Is(err, ErrUnknownPriority) {
		t.Fatal(err)
	}
	_ = q.Push(Item[string]{ID: "x", Priority: schemas.PriorityBatch, Payload: "p"})
	if err := q.Push(Item[string]{ID: "x", Priority: schemas.PriorityBatch}); !errors.Is(err, ErrDuplicate) {
		t.Fatal(err)
	}
	if it, ok := q.Remove("x"); !ok || it.Payload != "p" || q.Len() != 0 || q.LenClass(schemas.PriorityBatch) != 0 {
		t.Fatal("remove")
	}
}

func BenchmarkPushPop(b *testing.B) {
	q := New[int](nil)
	for i := 0; i < 10000; i++ {
		_ = q.Push(item(fmt.Sprint(i), schemas.Priorities[i%4], time.Duration(i%977)*time.Millisecond+time.Hour))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		it, _, _ := q.PopReady(t0, nil)
		_ = q.Push(it) // back in, so the queue stays at 10,000
	}
}

// TestAdaptiveLIFO: a class serves earliest deadline first while the
// request EDF would pick has waited at most LIFOAfter, newest first once
// it has waited longer, and EDF again when the stale requests are gone.
func TestAdaptiveLIFO(t *testing.T) {
	at := func(id string, enq, deadline time.Duration) Item[int] {
		return Item[int]{ID: id, Priority: schemas.PriorityInteractive, Enqueued: t0.Add(enq), Deadline: t0.Add(deadline)}
	}
	// old has the earliest deadline; a, b, c arrived 3 s later.
	items := []Item[int]{at("old", 0, 20*time.Second), at("a", 3*time.Second, 21*time.Second),
		at("b", 3*time.Second, 23*time.Second), at("c", 3*time.Second, 22*time.Second)}
	doomed := at("doomed", 0, 4*time.Second)
	doomed.MinService = time.Second // expires after t0+3s
	for _, tc := range []struct {
		name      string
		lifoAfter time.Duration // 0: the default
		items     []Item[int]
		now       time.Duration
		want      []string
	}{
		{"head waited under the threshold: EDF", 0, items, 800 * time.Millisecond, []string{"old", "a", "c", "b"}},
		{"head stale: newest first", 0, items, 3500 * time.Millisecond, []string{"c", "b", "a", "old"}},
		{"longer threshold: still EDF", 5 * time.Second, items, 3500 * time.Millisecond, []string{"old", "a", "c", "b"}},
		{"stale head expired: EDF again", 0, append(items[1:4:4], doomed), 3500 * time.Millisecond, []string{"a", "c", "b"}},
		{"switched off", -1, items, time.Minute / 6, []string{"old", "a", "c", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := NewWith[int](Discipline{LIFOAfter: tc.lifoAfter})
			for _, it := range tc.items {
				_ = q.Push(it)
			}
			var got []string
			for q.Len() > 0 {
				it, ok, _ := q.PopReady(t0.Add(tc.now), nil)
				if ok {
					got = append(got, it.ID)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
		})
	}
	// Without an enqueue time the wait is unknown: never newest first.
	q := New[int](nil)
	_ = q.Push(Item[int]{ID: "a", Priority: schemas.PriorityStandard})
	_ = q.Push(Item[int]{ID: "b", Priority: schemas.PriorityStandard, Enqueued: t0})
	if it, _, _ := q.PopReady(t0.Add(time.Hour), nil); it.ID != "a" {
		t.Fatalf("popped %s, want a (EDF)", it.ID)
	}
}

// TestPassKeepsBlockedOrder: requests a pass could not place go back in
// their arrival order, so a stale class offers its newest request first
// pass after pass rather than whichever was re-queued last.
func TestPassKeepsBlockedOrder(t *testing.T) {
	q := New[int](nil)
	for i := 0; i < 5; i++ {
		_ = q.Push(Item[int]{ID: fmt.Sprint(i), Priority: schemas.PriorityInteractive, Enqueued: t0, Deadline: t0.Add(time.Minute)})
	}
	now := t0.Add(10 * time.Second) // stale: newest first; equal enqueue times fall back to push order
	for pass := 0; pass < 3; pass++ {
		var offered []string
		q.Pass(now, 5, nil, func(it Item[int]) Outcome { offered = append(offered, it.ID); return Blocked })
		if fmt.Sprint(offered) != "[4 3 2 1 0]" {
			t.Fatalf("pass %d offered %v, want newest first", pass, offered)
		}
	}
	// A request place re-queued itself is not overwritten by its blocked copy.
	q.Pass(now, 1, nil, func(it Item[int]) Outcome {
		it.Payload = 7
		_ = q.Push(it)
		return Blocked
	})
	if e := q.byID["4"]; e == nil || e.item.Payload != 7 || q.Len() != 5 {
		t.Fatalf("re-queued request lost: %+v, len %d", e, q.Len())
	}
}

// TestDisciplines: the baselines' queues through the same code — strict
// bands, one arrival-order band, and no expiry — and per-class counts that
// stay true in one band.
func TestDisciplines(t *testing.T) {
	items := []Item[int]{
		{ID: "b1", Priority: schemas.PriorityBatch, Deadline: t0.Add(time.Second), Enqueued: t0},
		{ID: "i1", Priority: schemas.PriorityInteractive, Deadline: t0.Add(9 * time.Second), Enqueued: t0.Add(1)},
		{ID: "c1", Priority: schemas.PriorityCritical, Deadline: t0.Add(8 * time.Second), Enqueued: t0.Add(2)},
		{ID: "c2", Priority: schemas.PriorityCritical, Deadline: t0.Add(7 * time.Second), Enqueued: t0.Add(3)},
	}
	for _, tc := range []struct {
		name string
		d    Discipline
		now  time.Time
		want []string
		exp  int
	}{
		// Weighted fair queueing at 8/4/2/1: critical's second request
		// finishes (2/8) no later than interactive's first (1/4) in
		// virtual time, and ties go to the higher class.
		{"switchyard: weighted, EDF", Discipline{}, t0, []string{"c2", "c1", "i1", "b1"}, 0},
		{"strict bands, arrival order", Discipline{Strict: true, ArrivalOrder: true}, t0, []string{"c1", "c2", "i1", "b1"}, 0},
		{"one band, arrival order", Discipline{OneBand: true, ArrivalOrder: true}, t0, []string{"b1", "i1", "c1", "c2"}, 0},
		{"switchyard expires the late", Discipline{}, t0.Add(2 * time.Second), []string{"c2", "c1", "i1"}, 1},
		{"no expiry keeps the late", Discipline{OneBand: true, ArrivalOrder: true, NoExpiry: true}, t0.Add(2 * time.Second), []string{"b1", "i1", "c1", "c2"}, 0},
	} {
		q := NewWith[int](tc.d)
		for _, it := range items {
			if err := q.Push(it); err != nil {
				t.Fatal(err)
			}
		}
		if got := q.LenClass(schemas.PriorityCritical); got != 2 {
			t.Errorf("%s: LenClass(critical) = %d, want 2", tc.name, got)
		}
		var got []string
		exp := q.Pass(tc.now, 16, nil, func(it Item[int]) Outcome { got = append(got, it.ID); return Placed })
		if !slices.Equal(got, tc.want) || len(exp) != tc.exp {
			t.Errorf("%s: order %v expired %d, want %v expired %d", tc.name, got, len(exp), tc.want, tc.exp)
		}
	}
}
