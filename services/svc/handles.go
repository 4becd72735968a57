package svc

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// Labels are a metric's label values, in the order its name lists them;
// unused trailing values stay empty.
type Labels [3]string

// Handles memoises metric handles by their label values. Naming a metric
// with fmt.Sprintf and finding it in the set's locked map cost about a
// microsecond and four allocations, and the shells did it several times
// per request (each event, each final result, each admission); a hit here
// is one map lookup without an allocation. The zero value is ready.
type Handles[T any] struct {
	mu sync.Mutex
	m  map[Labels]T
}

// Get returns the handle for labels, calling create (which names the
// metric and registers it in its set) only the first time they are seen.
func (h *Handles[T]) Get(labels Labels, create func() T) T {
	h.mu.Lock()
	v, ok := h.m[labels]
	h.mu.Unlock()
	if ok {
		return v
	}
	// create runs unlocked (it takes the set's own lock); two callers
	// racing here get the same handle from the set either way.
	v = create()
	h.mu.Lock()
	if h.m == nil {
		h.m = map[Labels]T{}
	}
	h.m[labels] = v
	h.mu.Unlock()
	return v
}

// shellMetrics are the handles the shell itself counts into per message.
type shellMetrics struct {
	events        Handles[*metrics.Counter] // kind
	results       Handles[*metrics.Counter] // status, class
	slo           Handles[*metrics.Counter] // class, met
	cost          Handles[*metrics.FloatCounter]
	duplicates    Handles[*metrics.Counter]
	eventMessages Handles[*metrics.Counter]
}
