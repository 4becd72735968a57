package sim

// Event kinds, in the order they run when they fall on the same instant:
// a step's results land before new arrivals are placed, so placement sees
// the freshest state the live router could have.
const (
	evStepEnd uint8 = iota
	evHeartbeat
	evDeliver
	evArrive
	evRetry
)

// Events after the autoscaler's (evReady, evControl: autoscale.go).
const (
	evAdmit   = evRetry + 3 + iota // a deferred request reaches the router
	evTick                         // the router's retry tick while work waits
	evSweep                        // the router's idle tick: breakers, reaper
	evFault                        // a scheduled fault strikes a worker
	evHandoff                      // a prefill leg's KV handle reaches the router
)

// event is one scheduled happening. It is a plain value (no interface) so
// the heap does not allocate per event.
type event struct {
	at   int64 // virtual ns from the trace start
	seq  uint64
	kind uint8
	a    int32 // worker index or request index
	b    int32 // a second operand (a dispatch's attempt)
}

func (x event) before(y event) bool {
	if x.at != y.at {
		return x.at < y.at
	}
	if x.kind != y.kind {
		return x.kind < y.kind
	}
	return x.seq < y.seq
}

// eventHeap is a binary min-heap ordered by (time, kind, insertion order),
// which makes the run a deterministic function of its inputs.
type eventHeap struct {
	ev  []event
	seq uint64
}

func (h *eventHeap) push(at int64, kind uint8, a int32) { h.pushAB(at, kind, a, 0) }

func (h *eventHeap) pushAB(at int64, kind uint8, a, b int32) {
	h.seq++
	h.ev = append(h.ev, event{at: at, seq: h.seq, kind: kind, a: a, b: b})
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.ev[i].before(h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	h.ev[0] = h.ev[n]
	h.ev = h.ev[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.ev[r].before(h.ev[l]) {
			m = r
		}
		if !h.ev[m].before(h.ev[i]) {
			break
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
	return top
}

func (h *eventHeap) len() int { return len(h.ev) }
