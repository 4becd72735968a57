package queue

import "time"

// Test-only ways into the queue. Production builds queues with NewWith and
// serves them with Pass; the tests pin the order with one pop at a time.

// New returns an empty queue with one class per schemas.Priorities entry,
// weighted by weights (DefaultWeights when nil; a class missing from it, or
// with weight < 1, gets 1 so it can never starve).
func New[T any](weights map[string]int) *Queue[T] {
	return NewWith[T](Discipline{Weights: weights})
}

// PopReady returns the next request to place at now, or ok=false when the
// queue is empty. Requests found expired on the way are appended to
// expired and returned; they are removed from the queue. The popped
// request counts as served.
func (q *Queue[T]) PopReady(now time.Time, expired []Item[T]) (it Item[T], ok bool, exp []Item[T]) {
	expired = q.Expire(now, expired)
	q.hold.on = false // a pop is not a pass: it holds nothing back
	c := q.pick()
	if c < 0 {
		return it, false, expired
	}
	e := q.head(q.bands[c].active[0], now.UnixNano())
	q.remove(e)
	q.charge(e, now.UnixNano())
	return e.item, true, expired
}
